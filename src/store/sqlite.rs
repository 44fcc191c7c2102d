//! The embedded SQLite backend: one node, durable by default.
//!
//! Every connection runs in WAL mode with `synchronous=FULL`, a busy
//! timeout and foreign keys on (set by the connect options, so a connection
//! the pool opens later gets them too). Writes go through one connection
//! owned by the [group-commit executor](super::group_commit): concurrent
//! claims, moves and effect inserts share one durable transaction, each in
//! its own savepoint, and each caller is answered once that transaction is
//! on disk. Reads use a separate pool and never wait for the writer.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;

use super::group_commit::{GroupCommit, GroupCommitOptions};
use super::sql::{Dialect, Statements};
use super::{Result, Store, StoreOptions, StoredToken};
use crate::audit::AuditRecord;
use crate::clock::SharedClock;
use crate::ingress::RawEvent;
use crate::ledger::{
    ClaimOutcome, ClaimRequest, IdempotencyKey, Moved, Namespace, OwnerCall, OwnerMove, Run,
};
use crate::outbox::{ActionSwitch, AttemptView, Decision, Effect, Leased, NewEffect};
use serde_json::Value;

mod ops {
    /// Writes go through the group-commit executor.
    pub(crate) type Writer = crate::store::group_commit::GroupCommit;
    /// One write: a turn in a group commit.
    pub(crate) type WriteTx = crate::store::group_commit::Turn;
    crate::ledger_ops!(sqlx::Sqlite);
    crate::outbox_ops!(sqlx::Sqlite);
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

/// The SQLite store.
#[derive(Debug)]
pub struct SqliteStore {
    write: GroupCommit,
    read: SqlitePool,
    connect: SqliteConnectOptions,
    st: Statements,
    clock: SharedClock,
}

impl SqliteStore {
    /// Opens the database file a `sqlite://PATH` URL names, creating it,
    /// with the default group commit.
    ///
    /// # Errors
    /// The URL does not parse, names an in-memory database (two pools would
    /// see two databases), or the file cannot be opened.
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Self> {
        Self::connect_with(url, options, GroupCommitOptions::default()).await
    }

    /// Opens the database with the given group-commit batching.
    ///
    /// # Errors
    /// As [`SqliteStore::connect`].
    pub async fn connect_with(
        url: &str,
        options: StoreOptions,
        group: GroupCommitOptions,
    ) -> Result<Self> {
        if url.contains(":memory:") || url.contains("mode=memory") {
            return Err(super::StoreError::UnsupportedUrl(format!(
                "{url} (in-memory SQLite loses every claim on exit; name a file)"
            )));
        }
        let connect = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_millis(options.busy_timeout_ms))
            .foreign_keys(true);
        let write = GroupCommit::start(&connect, group).await?;
        let read = SqlitePoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .connect_with(connect.clone())
            .await?;
        Ok(Self {
            write,
            read,
            connect,
            st: Statements::new(Dialect::Sqlite),
            clock: options.clock,
        })
    }

    /// The group-commit executor every write goes through.
    pub fn writer(&self) -> &GroupCommit {
        &self.write
    }

    /// The pool reads go through.
    pub fn read_pool(&self) -> &SqlitePool {
        &self.read
    }

    fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    fn cx(&self) -> ops::Cx<'_> {
        let now = self.now();
        ops::Cx {
            write: &self.write,
            read: &self.read,
            st: &self.st,
            now: Some(now),
            clock_now: now,
        }
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn migrate(&self) -> Result<()> {
        // Migrations take their own connection: they manage their own
        // transactions, which a turn inside a batch cannot.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(self.connect.clone())
            .await?;
        let migrated = MIGRATOR.run(&pool).await;
        pool.close().await;
        Ok(migrated?)
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.read).await?;
        Ok(())
    }

    async fn claim(&self, req: &ClaimRequest) -> Result<ClaimOutcome> {
        ops::claim(&self.cx(), req).await
    }

    async fn renew(&self, call: &OwnerCall, lease_ms: i64, max_life_ms: i64) -> Result<Moved> {
        ops::renew(&self.cx(), call, lease_ms, max_life_ms).await
    }

    async fn finish(&self, call: &OwnerCall, mv: &OwnerMove) -> Result<Moved> {
        ops::finish(&self.cx(), call, mv).await
    }

    async fn accept_event(
        &self,
        req: &ClaimRequest,
        event: &RawEvent,
        forward: &NewEffect,
    ) -> Result<ClaimOutcome> {
        ops::accept_event(&self.cx(), req, event, forward).await
    }

    async fn quarantine_event(&self, event: &RawEvent, run: &Run) -> Result<()> {
        ops::quarantine_event(&self.cx(), event, run).await
    }

    async fn effects_of(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Vec<Effect>> {
        ops::effects_of(&self.read, &self.st, namespace, key).await
    }

    async fn commit(
        &self,
        call: &OwnerCall,
        result: Option<&Value>,
        effects: &[NewEffect],
    ) -> Result<Moved> {
        ops::outbox::commit(&self.cx(), call, result, effects).await
    }

    async fn lease_effects(&self, owner: &str, lease_ms: i64, limit: i64) -> Result<Vec<Leased>> {
        ops::outbox::lease(&self.cx(), owner, lease_ms, limit).await
    }

    async fn record_decisions(&self, decisions: &[Decision]) -> Result<Vec<bool>> {
        ops::outbox::record_decisions(&self.cx(), decisions).await
    }

    async fn expire_sending(&self) -> Result<u64> {
        ops::outbox::expire(&self.cx()).await
    }

    async fn cancel_effect(&self, id: &str, actor: &str) -> Result<Option<Effect>> {
        ops::outbox::cancel(&self.cx(), id, actor).await
    }

    async fn effect(&self, id: &str) -> Result<Option<Effect>> {
        ops::outbox::effect(&self.read, &self.st, id).await
    }

    async fn attempts(&self, effect_id: &str) -> Result<Vec<AttemptView>> {
        ops::outbox::attempts(&self.read, &self.st, effect_id).await
    }

    async fn set_actions(&self, scope: &str, enabled: bool, actor: &str) -> Result<()> {
        ops::outbox::set_switch(&self.cx(), scope, enabled, actor, self.clock.now_ms()).await
    }

    async fn action_switches(&self) -> Result<Vec<ActionSwitch>> {
        ops::outbox::switches(&self.read, &self.st).await
    }

    async fn backlog(&self) -> Result<Vec<(String, String, i64)>> {
        ops::outbox::backlog(&self.read, &self.st).await
    }

    async fn get_run(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Option<Run>> {
        ops::fetch(&self.read, &self.st, namespace, key).await
    }

    async fn audit_trail(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
    ) -> Result<Vec<AuditRecord>> {
        ops::audit_trail(&self.read, &self.st, namespace, key).await
    }

    async fn stored_tokens(&self) -> Result<Vec<StoredToken>> {
        ops::stored_tokens(&self.read, &self.st).await
    }

    async fn insert_token(&self, token: &StoredToken) -> Result<()> {
        ops::insert_token(&self.cx(), token).await
    }

    async fn close(&self) {
        self.write.close().await;
        self.read.close().await;
    }
}
