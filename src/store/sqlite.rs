//! The embedded SQLite backend: one node, durable by default.
//!
//! Every pooled connection runs in WAL mode with `synchronous=FULL`, a busy
//! timeout and foreign keys on (set by the connect options, so a connection
//! the pool opens later gets them too). Writes go through a pool of one
//! connection, so they queue in the process instead of spinning on
//! `SQLITE_BUSY`; reads use a separate pool and never wait for writers.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;

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
use crate::ops::retention::{RunMaterial, RunStamp, Selection};
use crate::outbox::{ActionSwitch, AttemptView, Decision, Effect, Leased, NewEffect, Recorded};
use futures_util::stream::BoxStream;
use serde_json::Value;
// Dead letters and replay (issue 6, branch dlq).
use crate::deadletter::{
    ActionOutcome, DeadLetter, DeadLetterFilter, ExecutionFailed, ExecutionFailure, JobItem,
    JobItemRef, NewReplayJob, ReplaceCommand, ReplayCommand, ReplayJob, ResolveCommand, RunLink,
};

mod ops {
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
    write: SqlitePool,
    read: SqlitePool,
    st: Statements,
    clock: SharedClock,
}

impl SqliteStore {
    /// Opens the database file a `sqlite://PATH` URL names, creating it.
    ///
    /// # Errors
    /// The URL does not parse, names an in-memory database (two pools would
    /// see two databases), or the file cannot be opened.
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Self> {
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
        let write = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(connect.clone())
            .await?;
        let read = SqlitePoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .connect_with(connect.read_only(false))
            .await?;
        Ok(Self {
            write,
            read,
            st: Statements {
                redactor: options.redaction.clone(),
                ..Statements::new(Dialect::Sqlite)
            },
            clock: options.clock,
        })
    }

    /// The pool writes go through (one connection).
    pub fn write_pool(&self) -> &SqlitePool {
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
        MIGRATOR.run(&self.write).await?;
        Ok(())
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

    async fn record_decisions(&self, decisions: &[Decision]) -> Result<Vec<Recorded>> {
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
        ops::insert_token(&self.write, &self.st, token, self.now()).await
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
        ops::audit::head_scan(&self.read, &self.st)
    }

    fn audit_scan<'a>(&'a self, namespace: Option<&'a str>) -> BoxStream<'a, Result<ScanRow>> {
        ops::audit::audit_scan(&self.read, &self.st, namespace)
    }

    fn checkpointed_heads(&self) -> BoxStream<'_, Result<ChainHead>> {
        ops::audit::heads(&self.read, &self.st)
    }

    async fn checkpoints(&self) -> Result<Vec<Checkpoint>> {
        ops::audit::checkpoints(&self.read, &self.st, false).await
    }

    async fn latest_checkpoint(&self) -> Result<Option<Checkpoint>> {
        Ok(ops::audit::checkpoints(&self.read, &self.st, true)
            .await?
            .pop())
    }

    async fn commit_checkpoint(&self, write: &CheckpointWrite) -> Result<bool> {
        ops::audit::commit_checkpoint(&self.cx(), write).await
    }

    async fn chain_anchor(&self, namespace: &str, key: &str) -> Result<ChainAnchor> {
        ops::audit::chain_anchor(&self.read, &self.st, namespace, key).await
    }

    async fn record_verification(&self, verification: &Verification) -> Result<()> {
        ops::audit::record_verification(&self.write, &self.st, verification).await
    }

    async fn last_verification(&self) -> Result<Option<Verification>> {
        ops::audit::last_verification(&self.read, &self.st).await
    }

    async fn take_job(&self, name: &str, owner: &str, lease_ms: i64) -> Result<bool> {
        ops::audit::take_job(
            &self.write,
            &self.st,
            name,
            owner,
            lease_ms,
            self.clock.now_ms(),
        )
        .await
    }

    async fn release_job(&self, name: &str, owner: &str) -> Result<()> {
        ops::audit::release_job(&self.write, &self.st, name, owner).await
    }

    async fn retention_candidates(
        &self,
        sel: &Selection,
        tombstones: bool,
    ) -> Result<Vec<RunStamp>> {
        ops::audit::candidates(&self.read, sel, tombstones).await
    }

    async fn run_material(&self, stamp: &RunStamp) -> Result<Option<RunMaterial>> {
        ops::audit::material(&self.read, &self.st, stamp).await
    }

    async fn slim_runs(&self, runs: &[RunMaterial], archive_file: &str, now: i64) -> Result<u64> {
        ops::audit::slim(&self.cx(), runs, archive_file, now).await
    }

    async fn scrub_effect_bodies(&self, limit: i64, now: i64) -> Result<u64> {
        ops::audit::scrub(&self.cx(), limit, now).await
    }

    async fn backup(&self, dest: &std::path::Path) -> Result<()> {
        super::backup::sqlite(&self.read, dest).await
    }

    async fn close(&self) {
        self.write.close().await;
        self.read.close().await;
    }

    // ---- Dead letters and replay (issue 6, branch dlq) ----

    async fn dead_letters(&self, filter: &DeadLetterFilter) -> Result<Vec<DeadLetter>> {
        ops::deadletter::list(&self.read, filter).await
    }

    async fn dead_letter(&self, id: &str) -> Result<Option<DeadLetter>> {
        ops::deadletter::fetch(&self.read, &self.st, id).await
    }

    async fn assign_dead_letter(&self, id: &str, owner: &str) -> Result<Option<DeadLetter>> {
        ops::deadletter::assign(&self.write, &self.st, id, owner).await
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
        ops::deadletter::links(&self.read, &self.st, namespace, key).await
    }

    async fn raw_event(&self, id: &str) -> Result<Option<RawEvent>> {
        ops::deadletter::raw_event(&self.read, &self.st, id).await
    }

    async fn create_replay_job(&self, job: &NewReplayJob) -> Result<ReplayJob> {
        ops::replay::create_job(&self.cx(), job).await
    }

    async fn replay_job(&self, id: &str) -> Result<Option<ReplayJob>> {
        ops::replay::job(&self.read, &self.st, id).await
    }

    async fn replay_jobs(&self, limit: i64) -> Result<Vec<ReplayJob>> {
        ops::replay::jobs(&self.read, &self.st, limit).await
    }

    async fn replay_job_items(&self, id: &str, after_seq: i64, limit: i64) -> Result<Vec<JobItem>> {
        ops::replay::items(&self.read, &self.st, id, after_seq, limit).await
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
        ops::replay::next_item(&self.read, &self.st, job_id).await
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
