//! The PostgreSQL backend: any number of oncegate processes, one database.
//!
//! Lease times are compared with the database's clock (`og_now_ms`, which is
//! `now()` in milliseconds), so nodes whose clocks disagree still agree on
//! who owns a run. Migrations take PostgreSQL's advisory lock, so processes
//! starting together apply them once.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

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
    /// Writes go to the pool: PostgreSQL batches concurrent commits itself.
    pub(crate) type Writer = sqlx::PgPool;
    /// One write: a pool transaction.
    pub(crate) type WriteTx = sqlx::Transaction<'static, sqlx::Postgres>;
    crate::ledger_ops!(sqlx::Postgres);
    crate::outbox_ops!(sqlx::Postgres);
    crate::gauge_ops!(sqlx::Postgres);
    crate::deadletter_ops!(sqlx::Postgres);
    crate::replay_ops!(sqlx::Postgres);
    crate::replace_ops!(sqlx::Postgres);
    crate::audit_ops!(sqlx::Postgres);
    crate::approval_ops!(sqlx::Postgres);
    // Operator console (issue 7, branch console).
    crate::console_ops!(sqlx::Postgres, crate::store::sql::Dialect::Postgres);
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// A pooled connection idle this long is pinged before it is used again.
const IDLE_BEFORE_PING: Duration = Duration::from_secs(10);

/// The PostgreSQL store.
#[derive(Debug)]
pub struct PgStore {
    pool: PgPool,
    st: Statements,
    clock: SharedClock,
    use_db_clock: bool,
}

impl PgStore {
    /// Connects a pool to the database a `postgres://` URL names.
    ///
    /// # Errors
    /// The URL does not parse or the database cannot be reached.
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Self> {
        let connect = PgConnectOptions::from_str(url)?.application_name("oncegate");
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .acquire_timeout(Duration::from_secs(10))
            // sqlx pings every connection it hands out by default: one more
            // round trip per transaction. Only a connection idle long enough
            // to have been dropped by the server or a proxy is checked.
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= IDLE_BEFORE_PING {
                        sqlx::Connection::ping(conn).await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(connect)
            .await?;
        Ok(Self {
            pool,
            st: Statements {
                redactor: options.redaction.clone(),
                ..Statements::new(Dialect::Postgres)
            },
            clock: options.clock,
            use_db_clock: options.use_db_clock,
        })
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The time bound into statements: `None` lets the database decide.
    fn now(&self) -> Option<i64> {
        (!self.use_db_clock).then(|| self.clock.now_ms())
    }

    fn cx(&self) -> ops::Cx<'_> {
        ops::Cx {
            write: &self.pool,
            read: &self.pool,
            st: &self.st,
            now: self.now(),
            clock_now: self.clock.now_ms(),
        }
    }
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn claim(&self, req: &ClaimRequest) -> Result<ClaimOutcome> {
        // A new key or a duplicate: one autocommitted statement. Anything
        // else (a reclaim, a taken business key, a race with another
        // claim of the same key): the general transactional claim.
        let clock_now = self.clock.now_ms();
        if let Some(answer) =
            super::pg_claim::claim_new(&self.pool, self.now(), clock_now, req).await?
        {
            return Ok(answer);
        }
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
        ops::effects_of(&self.pool, &self.st, namespace, key).await
    }

    async fn commit(
        &self,
        call: &OwnerCall,
        result: Option<&Value>,
        effects: &[NewEffect],
    ) -> Result<Moved> {
        ops::outbox::commit(&self.cx(), call, result, effects).await
    }

    async fn lease_effects(
        &self,
        owner: &str,
        lease_ms: i64,
        limit: i64,
        rooms: &[TargetRoom],
    ) -> Result<Vec<Leased>> {
        ops::outbox::lease(&self.cx(), owner, lease_ms, limit, rooms).await
    }

    async fn record_decisions(&self, decisions: &[Decision]) -> Result<Vec<Recorded>> {
        // One transaction per batch; the dispatcher runs several batches
        // at once, each locking its runs first.
        ops::outbox::record_decisions(&self.cx(), decisions).await
    }

    async fn expire_sending(&self) -> Result<u64> {
        ops::outbox::expire(&self.cx()).await
    }

    async fn cancel_effect(&self, id: &str, actor: &str) -> Result<Option<Effect>> {
        ops::outbox::cancel(&self.cx(), id, actor).await
    }

    async fn effect(&self, id: &str) -> Result<Option<Effect>> {
        ops::outbox::effect(&self.pool, &self.st, id).await
    }

    async fn attempts(&self, effect_id: &str) -> Result<Vec<AttemptView>> {
        ops::outbox::attempts(&self.pool, &self.st, effect_id).await
    }

    async fn set_actions(&self, scope: &str, enabled: bool, actor: &str) -> Result<()> {
        ops::outbox::set_switch(&self.cx(), scope, enabled, actor, self.clock.now_ms()).await
    }

    async fn action_switches(&self) -> Result<Vec<ActionSwitch>> {
        ops::outbox::switches(&self.pool, &self.st).await
    }

    async fn backlog(&self) -> Result<Vec<(String, String, i64)>> {
        ops::outbox::backlog(&self.pool, &self.st).await
    }

    async fn get_run(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Option<Run>> {
        ops::fetch(&self.pool, &self.st, namespace, key).await
    }

    async fn audit_trail(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
    ) -> Result<Vec<AuditRecord>> {
        ops::audit_trail(&self.pool, &self.st, namespace, key).await
    }

    async fn stored_tokens(&self) -> Result<Vec<StoredToken>> {
        ops::stored_tokens(&self.pool, &self.st).await
    }

    async fn insert_token(&self, token: &StoredToken) -> Result<()> {
        ops::insert_token(&self.cx(), token).await
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
        ops::audit::head_scan(&self.pool, &self.st)
    }

    fn audit_scan<'a>(&'a self, namespace: Option<&'a str>) -> BoxStream<'a, Result<ScanRow>> {
        ops::audit::audit_scan(&self.pool, &self.st, namespace)
    }

    fn checkpointed_heads(&self) -> BoxStream<'_, Result<ChainHead>> {
        ops::audit::heads(&self.pool, &self.st)
    }

    async fn checkpoints(&self) -> Result<Vec<Checkpoint>> {
        ops::audit::checkpoints(&self.pool, &self.st, false).await
    }

    async fn latest_checkpoint(&self) -> Result<Option<Checkpoint>> {
        Ok(ops::audit::checkpoints(&self.pool, &self.st, true)
            .await?
            .pop())
    }

    async fn commit_checkpoint(&self, write: &CheckpointWrite) -> Result<bool> {
        ops::audit::commit_checkpoint(&self.cx(), write).await
    }

    async fn chain_anchor(&self, namespace: &str, key: &str) -> Result<ChainAnchor> {
        ops::audit::chain_anchor(&self.pool, &self.st, namespace, key).await
    }

    async fn record_verification(&self, verification: &Verification) -> Result<()> {
        ops::audit::record_verification(&self.pool, &self.st, verification).await
    }

    async fn last_verification(&self) -> Result<Option<Verification>> {
        ops::audit::last_verification(&self.pool, &self.st).await
    }

    async fn take_job(&self, name: &str, owner: &str, lease_ms: i64) -> Result<bool> {
        ops::audit::take_job(
            &self.pool,
            &self.st,
            name,
            owner,
            lease_ms,
            self.clock.now_ms(),
        )
        .await
    }

    async fn release_job(&self, name: &str, owner: &str) -> Result<()> {
        ops::audit::release_job(&self.pool, &self.st, name, owner).await
    }

    async fn retention_candidates(
        &self,
        sel: &Selection,
        tombstones: bool,
    ) -> Result<Vec<RunStamp>> {
        ops::audit::candidates(&self.pool, sel, tombstones).await
    }

    async fn run_material(&self, stamp: &RunStamp) -> Result<Option<RunMaterial>> {
        ops::audit::material(&self.pool, &self.st, stamp).await
    }

    async fn slim_runs(&self, runs: &[RunMaterial], archive_file: &str, now: i64) -> Result<u64> {
        ops::audit::slim(&self.cx(), runs, archive_file, now).await
    }

    async fn scrub_effect_bodies(&self, limit: i64, now: i64) -> Result<u64> {
        ops::audit::scrub(&self.cx(), limit, now).await
    }

    async fn backup(&self, _dest: &std::path::Path) -> Result<()> {
        Err(super::StoreError::Unsupported(
            super::backup::PG_BACKUP_PROCEDURE.into(),
        ))
    }

    async fn close(&self) {
        self.pool.close().await;
    }

    // ---- Dead letters and replay (issue 6, branch dlq) ----

    async fn dead_letters(&self, filter: &DeadLetterFilter) -> Result<Vec<DeadLetter>> {
        ops::deadletter::list(&self.pool, filter).await
    }

    async fn dead_letter(&self, id: &str) -> Result<Option<DeadLetter>> {
        ops::deadletter::fetch(&self.pool, &self.st, id).await
    }

    async fn assign_dead_letter(&self, id: &str, owner: &str) -> Result<Option<DeadLetter>> {
        ops::deadletter::assign(&self.pool, &self.st, id, owner).await
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
        ops::deadletter::links(&self.pool, &self.st, namespace, key).await
    }

    async fn raw_event(&self, id: &str) -> Result<Option<RawEvent>> {
        ops::deadletter::raw_event(&self.pool, &self.st, id).await
    }

    async fn create_replay_job(&self, job: &NewReplayJob) -> Result<ReplayJob> {
        ops::replay::create_job(&self.cx(), job).await
    }

    async fn replay_job(&self, id: &str) -> Result<Option<ReplayJob>> {
        ops::replay::job(&self.pool, &self.st, id).await
    }

    async fn replay_jobs(&self, limit: i64) -> Result<Vec<ReplayJob>> {
        ops::replay::jobs(&self.pool, &self.st, limit).await
    }

    async fn replay_job_items(&self, id: &str, after_seq: i64, limit: i64) -> Result<Vec<JobItem>> {
        ops::replay::items(&self.pool, &self.st, id, after_seq, limit).await
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
        ops::replay::next_item(&self.pool, &self.st, job_id).await
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

crate::impl_approval_store!(PgStore);
// Operator console (issue 7, branch console).
crate::impl_console_store!(PgStore);
