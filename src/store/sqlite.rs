//! The embedded SQLite backend: one node, durable by default.
//!
//! Every connection runs in WAL mode with `synchronous=FULL`, a busy
//! timeout and foreign keys on (set by the connect options, so a connection
//! the pool opens later gets them too). Writes go through one connection
//! owned by the [group-commit executor](super::group_commit): concurrent
//! claims, moves and effect inserts share one durable transaction, each in
//! its own savepoint, and each caller is answered once that transaction is
//! on disk. Reads use a separate pool and never wait for the writer.

use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;

use super::group_commit::{GroupCommit, GroupCommitOptions};
use super::sql::{Dialect, Statements};
use super::{OpenDeadLetters, Result, Store, StoreOptions, StoredToken};
use crate::audit::checkpoint::{ChainHead, Checkpoint, CheckpointWrite, HeadRow};
use crate::audit::AuditRecord;
use crate::audit::{ChainAnchor, ScanRow, Verification};
use crate::clock::SharedClock;
use crate::ingress::RawEvent;
use crate::ledger::{
    ClaimOutcome, ClaimRequest, IdempotencyKey, Moved, Namespace, OwnerCall, OwnerMove, Run,
};
use crate::outbox::{
    ActionSwitch, AttemptView, Decision, Effect, Leased, NewEffect, Recorded, TargetRoom,
};
use crate::retention::{RunMaterial, RunStamp, Selection};
use futures_util::stream::BoxStream;
use serde_json::Value;
// Dead letters and replay (issue 6, branch dlq).
use crate::deadletter::{
    ActionOutcome, DeadLetter, DeadLetterFilter, ExecutionFailed, ExecutionFailure, JobItem,
    JobItemRef, NewReplayJob, ReplaceCommand, ReplayCommand, ReplayJob, ResolveCommand, RunLink,
};

mod ops {
    /// Writes go through the group-commit executor.
    pub(crate) type Writer = crate::store::group_commit::GroupCommit;
    /// One write: a turn in a group commit.
    pub(crate) type WriteTx = crate::store::group_commit::Turn;
    crate::ledger_ops!(sqlx::Sqlite);
    crate::outbox_ops!(sqlx::Sqlite);
    crate::gauge_ops!(sqlx::Sqlite);
    crate::deadletter_ops!(sqlx::Sqlite);
    crate::replay_ops!(sqlx::Sqlite);
    crate::replace_ops!(sqlx::Sqlite);
    crate::audit_ops!(sqlx::Sqlite);
    crate::approval_ops!(sqlx::Sqlite);
    // Operator console (issue 7, branch console).
    crate::console_ops!(sqlx::Sqlite, crate::store::sql::Dialect::Sqlite);
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

/// The SQLite store.
#[derive(Debug)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

/// What every operation needs; shared with the writer thread.
#[derive(Debug)]
struct Inner {
    write: GroupCommit,
    read: SqlitePool,
    connect: SqliteConnectOptions,
    st: Statements,
    clock: SharedClock,
}

impl Inner {
    fn cx(&self) -> ops::Cx<'_> {
        let now = self.clock.now_ms();
        ops::Cx {
            write: &self.write,
            read: &self.read,
            st: &self.st,
            now: Some(now),
            clock_now: now,
        }
    }
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
            // A file connection does not go stale; sqlx's ping before each
            // use would cost every read a trip to the connection's thread.
            .test_before_acquire(false)
            .connect_with(connect.clone())
            .await?;
        let inner = Inner {
            write,
            read,
            connect,
            st: Statements {
                redactor: options.redaction.clone(),
                ..Statements::new(Dialect::Sqlite)
            },
            clock: options.clock,
        };
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// The group-commit executor every write goes through.
    pub fn writer(&self) -> &GroupCommit {
        &self.inner.write
    }

    /// The pool reads go through.
    pub fn read_pool(&self) -> &SqlitePool {
        &self.inner.read
    }

    fn cx(&self) -> ops::Cx<'_> {
        self.inner.cx()
    }

    /// Runs a write operation on the writer's thread (see
    /// [`GroupCommit::run`]), its arguments moved in:
    ///
    /// ```text
    /// let req = req.clone();
    /// self.on_writer(move |s| async move { ops::claim(&s.cx(), &req).await }).await
    /// ```
    async fn on_writer<T, F, Fut>(&self, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        self.inner.write.run(op(self.inner.clone())).await?
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
            .connect_with(self.inner.connect.clone())
            .await?;
        let migrated = MIGRATOR.run(&pool).await;
        pool.close().await;
        Ok(migrated?)
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.inner.read).await?;
        Ok(())
    }

    async fn claim(&self, req: &ClaimRequest) -> Result<ClaimOutcome> {
        // A duplicate (the key is settled) is answered from the read pool
        // and never waits for a group commit.
        if let Some(answer) = ops::settled_claim(&self.cx(), req).await? {
            return Ok(answer);
        }
        let req = req.clone();
        self.on_writer(move |s| async move { ops::claim(&s.cx(), &req).await })
            .await
    }

    async fn renew(&self, call: &OwnerCall, lease_ms: i64, max_life_ms: i64) -> Result<Moved> {
        let call = call.clone();
        self.on_writer(
            move |s| async move { ops::renew(&s.cx(), &call, lease_ms, max_life_ms).await },
        )
        .await
    }

    async fn finish(&self, call: &OwnerCall, mv: &OwnerMove) -> Result<Moved> {
        let (call, mv) = (call.clone(), mv.clone());
        self.on_writer(move |s| async move { ops::finish(&s.cx(), &call, &mv).await })
            .await
    }

    async fn accept_event(
        &self,
        req: &ClaimRequest,
        event: &RawEvent,
        forward: &NewEffect,
    ) -> Result<ClaimOutcome> {
        if let Some(answer) = ops::settled_claim(&self.cx(), req).await? {
            return Ok(answer);
        }
        let (req, event, forward) = (req.clone(), event.clone(), forward.clone());
        self.on_writer(
            move |s| async move { ops::accept_event(&s.cx(), &req, &event, &forward).await },
        )
        .await
    }

    async fn quarantine_event(&self, event: &RawEvent, run: &Run) -> Result<()> {
        let (event, run) = (event.clone(), run.clone());
        self.on_writer(move |s| async move { ops::quarantine_event(&s.cx(), &event, &run).await })
            .await
    }

    async fn effects_of(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Vec<Effect>> {
        ops::effects_of(&self.inner.read, &self.inner.st, namespace, key).await
    }

    async fn commit(
        &self,
        call: &OwnerCall,
        result: Option<&Value>,
        effects: &[NewEffect],
    ) -> Result<Moved> {
        let (call, result, effects) = (call.clone(), result.cloned(), effects.to_vec());
        self.on_writer(move |s| async move {
            ops::outbox::commit(&s.cx(), &call, result.as_ref(), &effects).await
        })
        .await
    }

    async fn lease_effects(
        &self,
        owner: &str,
        lease_ms: i64,
        limit: i64,
        rooms: &[TargetRoom],
    ) -> Result<Vec<Leased>> {
        let owner = owner.to_owned();
        let rooms = rooms.to_vec();
        self.on_writer(move |s| async move {
            ops::outbox::lease(&s.cx(), &owner, lease_ms, limit, &rooms).await
        })
        .await
    }

    async fn record_decisions(&self, decisions: &[Decision]) -> Result<Vec<Recorded>> {
        let decisions = decisions.to_vec();
        self.on_writer(
            move |s| async move { ops::outbox::record_decisions(&s.cx(), &decisions).await },
        )
        .await
    }

    async fn expire_sending(&self) -> Result<u64> {
        self.on_writer(move |s| async move { ops::outbox::expire(&s.cx()).await })
            .await
    }

    async fn cancel_effect(&self, id: &str, actor: &str) -> Result<Option<Effect>> {
        let (id, actor) = (id.to_owned(), actor.to_owned());
        self.on_writer(move |s| async move { ops::outbox::cancel(&s.cx(), &id, &actor).await })
            .await
    }

    async fn effect(&self, id: &str) -> Result<Option<Effect>> {
        ops::outbox::effect(&self.inner.read, &self.inner.st, id).await
    }

    async fn attempts(&self, effect_id: &str) -> Result<Vec<AttemptView>> {
        ops::outbox::attempts(&self.inner.read, &self.inner.st, effect_id).await
    }

    async fn set_actions(&self, scope: &str, enabled: bool, actor: &str) -> Result<()> {
        let (scope, actor) = (scope.to_owned(), actor.to_owned());
        self.on_writer(move |s| async move {
            let now = s.clock.now_ms();
            ops::outbox::set_switch(&s.cx(), &scope, enabled, &actor, now).await
        })
        .await
    }

    async fn action_switches(&self) -> Result<Vec<ActionSwitch>> {
        ops::outbox::switches(&self.inner.read, &self.inner.st).await
    }

    async fn backlog(&self) -> Result<Vec<(String, String, i64)>> {
        ops::outbox::backlog(&self.inner.read, &self.inner.st).await
    }

    async fn get_run(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Option<Run>> {
        ops::fetch(&self.inner.read, &self.inner.st, namespace, key).await
    }

    async fn audit_trail(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
    ) -> Result<Vec<AuditRecord>> {
        ops::audit_trail(&self.inner.read, &self.inner.st, namespace, key).await
    }

    async fn stored_tokens(&self) -> Result<Vec<StoredToken>> {
        ops::stored_tokens(&self.inner.read, &self.inner.st).await
    }

    async fn insert_token(&self, token: &StoredToken) -> Result<()> {
        let token = token.clone();
        self.on_writer(move |s| async move { ops::insert_token(&s.cx(), &token).await })
            .await
    }

    // --- ops (metrics) ---

    async fn stale_processing(&self) -> Result<Vec<(String, i64)>> {
        ops::gauges::stale_processing(&self.cx()).await
    }

    async fn open_dead_letters(&self) -> Result<Vec<OpenDeadLetters>> {
        ops::gauges::open_dead_letters(&self.cx()).await
    }

    // ---- Audit integrity, retention and backup (issue 6: audit) ----

    fn head_scan(&self) -> BoxStream<'_, Result<HeadRow>> {
        ops::audit::head_scan(&self.inner.read, &self.inner.st)
    }

    fn audit_scan<'a>(&'a self, namespace: Option<&'a str>) -> BoxStream<'a, Result<ScanRow>> {
        ops::audit::audit_scan(&self.inner.read, &self.inner.st, namespace)
    }

    fn checkpointed_heads(&self) -> BoxStream<'_, Result<ChainHead>> {
        ops::audit::heads(&self.inner.read, &self.inner.st)
    }

    async fn checkpoints(&self) -> Result<Vec<Checkpoint>> {
        ops::audit::checkpoints(&self.inner.read, &self.inner.st, false).await
    }

    async fn latest_checkpoint(&self) -> Result<Option<Checkpoint>> {
        Ok(
            ops::audit::checkpoints(&self.inner.read, &self.inner.st, true)
                .await?
                .pop(),
        )
    }

    async fn commit_checkpoint(&self, write: &CheckpointWrite) -> Result<bool> {
        ops::audit::commit_checkpoint(&self.cx(), write).await
    }

    async fn chain_anchor(&self, namespace: &str, key: &str) -> Result<ChainAnchor> {
        ops::audit::chain_anchor(&self.inner.read, &self.inner.st, namespace, key).await
    }

    async fn record_verification(&self, verification: &Verification) -> Result<()> {
        ops::audit::record_verification(&self.inner.read, &self.inner.st, verification).await
    }

    async fn last_verification(&self) -> Result<Option<Verification>> {
        ops::audit::last_verification(&self.inner.read, &self.inner.st).await
    }

    async fn take_job(&self, name: &str, owner: &str, lease_ms: i64) -> Result<bool> {
        ops::audit::take_job(
            &self.inner.read,
            &self.inner.st,
            name,
            owner,
            lease_ms,
            self.inner.clock.now_ms(),
        )
        .await
    }

    async fn release_job(&self, name: &str, owner: &str) -> Result<()> {
        ops::audit::release_job(&self.inner.read, &self.inner.st, name, owner).await
    }

    async fn retention_candidates(
        &self,
        sel: &Selection,
        tombstones: bool,
    ) -> Result<Vec<RunStamp>> {
        ops::audit::candidates(&self.inner.read, sel, tombstones).await
    }

    async fn run_material(&self, stamp: &RunStamp) -> Result<Option<RunMaterial>> {
        ops::audit::material(&self.inner.read, &self.inner.st, stamp).await
    }

    async fn slim_runs(&self, runs: &[RunMaterial], archive_file: &str, now: i64) -> Result<u64> {
        ops::audit::slim(&self.cx(), runs, archive_file, now).await
    }

    async fn scrub_effect_bodies(&self, limit: i64, now: i64) -> Result<u64> {
        ops::audit::scrub(&self.cx(), limit, now).await
    }

    async fn backup(&self, dest: &std::path::Path) -> Result<()> {
        super::backup::sqlite(&self.inner.read, dest).await
    }

    async fn close(&self) {
        self.inner.write.close().await;
        self.inner.read.close().await;
    }

    // ---- Dead letters and replay (issue 6, branch dlq) ----

    async fn dead_letters(&self, filter: &DeadLetterFilter) -> Result<Vec<DeadLetter>> {
        ops::deadletter::list(&self.inner.read, filter).await
    }

    async fn dead_letter(&self, id: &str) -> Result<Option<DeadLetter>> {
        ops::deadletter::fetch(&self.inner.read, &self.inner.st, id).await
    }

    async fn assign_dead_letter(&self, id: &str, owner: &str) -> Result<Option<DeadLetter>> {
        ops::deadletter::assign(&self.inner.read, &self.inner.st, id, owner).await
    }

    async fn resolve_dead_letter(&self, cmd: &ResolveCommand) -> Result<ActionOutcome> {
        ops::deadletter::resolve(&self.cx(), cmd).await
    }

    async fn replay_dead_letter(&self, cmd: &ReplayCommand) -> Result<ActionOutcome> {
        ops::replay::replay(&self.cx(), cmd).await
    }

    async fn replace_dead_letter(&self, cmd: &ReplaceCommand) -> Result<ActionOutcome> {
        ops::replace::replace(&self.cx(), cmd).await
    }

    async fn fail_by_execution(&self, failure: &ExecutionFailure) -> Result<ExecutionFailed> {
        ops::deadletter::fail_by_execution(&self.cx(), failure).await
    }

    async fn run_links(&self, namespace: &str, key: &str) -> Result<Vec<RunLink>> {
        ops::deadletter::links(&self.inner.read, &self.inner.st, namespace, key).await
    }

    async fn raw_event(&self, id: &str) -> Result<Option<RawEvent>> {
        ops::deadletter::raw_event(&self.inner.read, &self.inner.st, id).await
    }

    async fn create_replay_job(&self, job: &NewReplayJob) -> Result<ReplayJob> {
        ops::replay::create_job(&self.cx(), job).await
    }

    async fn replay_job(&self, id: &str) -> Result<Option<ReplayJob>> {
        ops::replay::job(&self.inner.read, &self.inner.st, id).await
    }

    async fn replay_jobs(&self, limit: i64) -> Result<Vec<ReplayJob>> {
        ops::replay::jobs(&self.inner.read, &self.inner.st, limit).await
    }

    async fn replay_job_items(&self, id: &str, after_seq: i64, limit: i64) -> Result<Vec<JobItem>> {
        ops::replay::items(&self.inner.read, &self.inner.st, id, after_seq, limit).await
    }

    async fn set_replay_job_state(
        &self,
        id: &str,
        stop: bool,
        actor: &str,
    ) -> Result<Option<ReplayJob>> {
        ops::replay::set_state(&self.cx(), id, stop, actor).await
    }

    async fn lease_replay_job(&self, owner: &str, lease_ms: i64) -> Result<Option<ReplayJob>> {
        ops::replay::lease(&self.cx(), owner, lease_ms).await
    }

    async fn next_replay_item(&self, job_id: &str) -> Result<Option<JobItem>> {
        ops::replay::next_item(&self.inner.read, &self.inner.st, job_id).await
    }

    async fn refuse_replay_item(&self, item: &JobItemRef, why: &str) -> Result<bool> {
        ops::replay::refuse_item(&self.cx(), item, why).await
    }

    async fn complete_replay_job(&self, id: &str, owner: &str) -> Result<bool> {
        ops::replay::complete(&self.cx(), id, owner).await
    }

    async fn release_replay_job(&self, id: &str, owner: &str) -> Result<()> {
        ops::replay::release(&self.cx(), id, owner).await
    }
}

crate::impl_approval_store!(SqliteStore);
// Operator console (issue 7, branch console).
crate::impl_console_store!(SqliteStore);
