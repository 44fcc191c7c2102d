//! Storage: one [`Store`] trait, two first-class backends.
//!
//! - [`sqlite::SqliteStore`]: the embedded default for one node. WAL mode and
//!   `synchronous=FULL` on every connection, so an acknowledged write
//!   survives a crash or a power loss; writes go through one connection,
//!   group-committed ([`group_commit`]): one durable transaction for every
//!   write that arrived while the previous one was syncing.
//! - [`postgres::PgStore`]: many oncegate processes against one database;
//!   lease times are compared with the database's clock.
//!
//! Both run the same SQL (see [`sql`]): the claim is one
//! `INSERT … ON CONFLICT … DO UPDATE … WHERE <reclaimable> RETURNING`, every
//! move a guarded `UPDATE … WHERE state IN (…) AND lease_owner = … AND
//! version = … AND lease_expires_at > now RETURNING`, and each writes its
//! audit entry in the same transaction. One conformance suite
//! (`tests/it/conformance.rs`) proves the backends behave the same.

use std::sync::Arc;

use async_trait::async_trait;

use crate::audit::checkpoint::{ChainHead, Checkpoint, CheckpointWrite, HeadRow};
use crate::audit::{AuditRecord, ChainAnchor, ScanRow, Verification};
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

// Dead letters and replay (issue 6, branch dlq).
mod deadletter_ops;
pub(crate) mod deadletter_rows;
pub mod deadletter_sql;
mod replace_ops;
mod replay_ops;

pub use ops_sql::OpenDeadLetters;

// Operator console (issue 7, branch console): run search and dashboard reads.
pub mod console;
pub mod console_sql;
// Chaos tests (issue 9): which database failures mean "try again later" (503).
mod availability;

pub mod approval;
mod approval_ops;
mod approval_row;
pub mod approval_sql;
mod audit_ops;
mod audit_row;
pub mod audit_sql;
pub mod backup;
pub mod group_commit;
mod json_row;
pub mod ops_sql;
mod outbox_ops;
pub mod outbox_sql;
mod pg_claim;
pub mod postgres;
mod row;
pub mod sql;
pub mod sqlite;

/// Errors of the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused or failed a statement.
    #[error("database error")]
    Database(#[from] sqlx::Error),
    /// A migration could not be applied.
    #[error("database migration failed")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The caller's lease is not the run's current live lease.
    #[error("the lease is no longer the run's owner")]
    LostOwnership {
        /// The run as it is now, if it exists.
        current: Option<Box<Run>>,
        /// Why ownership is gone, in words for the caller.
        why: String,
    },
    /// A stored row could not be read back as a domain value.
    #[error("stored row is corrupt: {0}")]
    Corrupt(String),
    /// The backend cannot do this (e.g. an online backup of PostgreSQL).
    #[error("{0}")]
    Unsupported(String),
    /// A backup could not be written or checked.
    #[error("backup failed: {0}")]
    Backup(String),
    /// The database URL names no supported backend.
    #[error("unsupported database URL {0:?}: use sqlite://PATH or postgres://…")]
    UnsupportedUrl(String),
}

/// `Result` of the storage layer.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// An API token as stored: only its digest, never the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredToken {
    /// `sha256:<hex>` of the token.
    pub digest: String,
    /// Who the token speaks for (the actor in the audit log).
    pub subject: String,
    /// Scope names (`workflow`, `operator`, `approver`, `admin`).
    pub scopes: Vec<String>,
    /// Role names, for approval policies.
    pub roles: Vec<String>,
}

/// Everything the service keeps. Both backends implement every call with
/// the same observable behaviour. Each part's calls beyond the ledger and
/// outbox live in a supertrait of their own ([`approval::ApprovalStore`],
/// [`console::ConsoleStore`]).
#[async_trait]
pub trait Store:
    approval::ApprovalStore + console::ConsoleStore + Send + Sync + std::fmt::Debug + 'static
{
    /// `"sqlite"` or `"postgres"`.
    fn backend(&self) -> &'static str;

    /// Applies pending migrations.
    ///
    /// # Errors
    /// [`StoreError::Migrate`] when a migration fails or the database holds
    /// migrations this binary does not know.
    async fn migrate(&self) -> Result<()>;

    /// Checks that the database answers.
    ///
    /// # Errors
    /// [`StoreError::Database`] when it does not.
    async fn ping(&self) -> Result<()>;

    /// Claims `(namespace, key)` in one atomic statement (DESIGN.md §2).
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure; every business answer
    /// (duplicate, in flight, conflict, `duplicate_of`) is an `Ok`.
    async fn claim(&self, req: &ClaimRequest) -> Result<ClaimOutcome>;

    /// Extends the caller's lease by `lease_ms`, never past
    /// `max_life_ms` after the lease was first taken.
    ///
    /// # Errors
    /// [`StoreError::LostOwnership`] when the lease is not live and current.
    async fn renew(&self, call: &OwnerCall, lease_ms: i64, max_life_ms: i64) -> Result<Moved>;

    /// Moves the caller's run out of `processing`.
    ///
    /// # Errors
    /// [`StoreError::LostOwnership`] when the lease is not live and current.
    async fn finish(&self, call: &OwnerCall, mv: &OwnerMove) -> Result<Moved>;

    /// Accepts a webhook delivery: claims its ingress run and, in the same
    /// transaction, moves it to `approved`, stores the raw event and
    /// inserts the forward effect. A claim that does not win changes
    /// nothing and returns its answer as [`Store::claim`] would.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn accept_event(
        &self,
        req: &ClaimRequest,
        event: &RawEvent,
        forward: &NewEffect,
    ) -> Result<ClaimOutcome>;

    /// Stores a delivery whose body conflicts with the run's payload as
    /// evidence (never forwarded) and records a `payload_conflict` dead letter.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn quarantine_event(&self, event: &RawEvent, run: &Run) -> Result<()>;

    /// The owner's decision: queues `effects` and moves the run to
    /// `approved` (or `completed` when there are none) with its result, by
    /// compare-and-set, in one transaction. An effect already queued for
    /// the same (run, effect type, target) is not queued twice.
    ///
    /// # Errors
    /// [`StoreError::LostOwnership`] when the lease is not live and current.
    async fn commit(
        &self,
        call: &OwnerCall,
        result: Option<&Value>,
        effects: &[NewEffect],
    ) -> Result<Moved>;

    /// Leases, in one transaction, up to `limit` due effects of approved
    /// runs on enabled targets: of each target in `rooms`, in turn, up to
    /// its own limit (each target's oldest due first). Targets not named
    /// are left alone.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn lease_effects(
        &self,
        owner: &str,
        lease_ms: i64,
        limit: i64,
        rooms: &[TargetRoom],
    ) -> Result<Vec<Leased>>;

    /// Records decisions in one transaction (one durable commit for a
    /// batch): each effect's verdict by compare-and-set on its lease, its
    /// attempt evidence and its run's resulting move. One [`Recorded`] per
    /// decision, in order: [`Recorded::Lost`] when its lease was lost
    /// (nothing written for it), else whether its run reached a final state.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure; nothing is written.
    async fn record_decisions(&self, decisions: &[Decision]) -> Result<Vec<Recorded>>;

    /// Marks `sending` effects whose lease expired as `unknown` (never back
    /// to `pending`: the dead dispatcher may have sent them).
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn expire_sending(&self) -> Result<u64>;

    /// Cancels a pending effect; `None` when it is not pending.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn cancel_effect(&self, id: &str, actor: &str) -> Result<Option<Effect>>;

    /// One effect by id.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn effect(&self, id: &str) -> Result<Option<Effect>>;

    /// An effect's attempts, in order.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn attempts(&self, effect_id: &str) -> Result<Vec<AttemptView>>;

    /// Sets the kill switch for `scope` (`*` or a target), audited with the actor.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn set_actions(&self, scope: &str, enabled: bool, actor: &str) -> Result<()>;

    /// Every kill-switch scope that was ever set.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn action_switches(&self) -> Result<Vec<ActionSwitch>>;

    /// Outstanding effects by target and state.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn backlog(&self) -> Result<Vec<(String, String, i64)>>;

    /// A run's effects, oldest first.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn effects_of(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Vec<Effect>>;

    /// Reads one run.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn get_run(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Option<Run>>;

    /// The audit trail of one run, in chain order.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn audit_trail(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
    ) -> Result<Vec<AuditRecord>>;

    /// API tokens created by the service itself (the first-start admin token).
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn stored_tokens(&self) -> Result<Vec<StoredToken>>;

    /// Stores a token digest.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn insert_token(&self, token: &StoredToken) -> Result<()>;

    // --- ops (metrics): the scrape-time gauges ---

    /// Runs still in `processing` whose lease expired and that nobody
    /// reclaimed, counted per namespace. "Expired" uses the same clock as
    /// the claim's reclaim check (the database's on PostgreSQL).
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn stale_processing(&self) -> Result<Vec<(String, i64)>>;

    /// Unresolved dead letters per namespace, with the oldest one's age.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn open_dead_letters(&self) -> Result<Vec<OpenDeadLetters>>;
    // ---- Audit integrity, retention and backup (issue 6: audit) ----

    /// Every chain's current head (its run row, or its last event for a
    /// run-less chain) and its checkpointed head, sorted bytewise by
    /// (namespace, key), current first; one statement, one snapshot.
    fn head_scan(&self) -> BoxStream<'_, Result<HeadRow>>;

    /// Per key (one namespace, or all): the run row's head, the
    /// checkpointed head, then the events by sequence; one snapshot.
    fn audit_scan<'a>(&'a self, namespace: Option<&'a str>) -> BoxStream<'a, Result<ScanRow>>;

    /// The latest checkpoint's head list, sorted bytewise.
    fn checkpointed_heads(&self) -> BoxStream<'_, Result<ChainHead>>;

    /// Every checkpoint, by id.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn checkpoints(&self) -> Result<Vec<Checkpoint>>;

    /// The latest checkpoint.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn latest_checkpoint(&self) -> Result<Option<Checkpoint>>;

    /// Writes a checkpoint with its moved heads, deleting its removals
    /// (guarded tombstones) in the same transaction; `false` when another
    /// checkpoint took the id first (nothing written).
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn commit_checkpoint(&self, write: &CheckpointWrite) -> Result<bool>;

    /// A key's run-row head and checkpointed head.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn chain_anchor(&self, namespace: &str, key: &str) -> Result<ChainAnchor>;

    /// Stores a verification result.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn record_verification(&self, verification: &Verification) -> Result<()>;

    /// The latest stored verification result.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn last_verification(&self) -> Result<Option<Verification>>;

    /// Takes (or renews) the lease of a periodic job for `lease_ms`; `false`
    /// when another live holder has it.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn take_job(&self, name: &str, owner: &str, lease_ms: i64) -> Result<bool>;

    /// Releases a job lease held by `owner`.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn release_job(&self, name: &str, owner: &str) -> Result<()>;

    /// Terminal runs due for archiving (`tombstones`: slimmed runs due for
    /// deletion) under a selection, oldest first. Never an active run.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn retention_candidates(
        &self,
        sel: &Selection,
        tombstones: bool,
    ) -> Result<Vec<RunStamp>>;

    /// Every stored row of a run and of the tables that belong to it.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn run_material(&self, stamp: &RunStamp) -> Result<Option<RunMaterial>>;

    /// Slims archived runs to tombstones by compare-and-set on their
    /// version, deleting the rows the material holds, in one transaction.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure; nothing is slimmed.
    async fn slim_runs(&self, runs: &[RunMaterial], archive_file: &str, now: i64) -> Result<u64>;

    /// Replaces up to `limit` verbatim bodies of finished effects (in
    /// namespaces with redaction rules) by their redacted form.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn scrub_effect_bodies(&self, limit: i64, now: i64) -> Result<u64>;

    /// Writes a consistent copy of the database to `dest` while serving.
    ///
    /// # Errors
    /// [`StoreError::Unsupported`] on PostgreSQL (use `pg_dump`); the
    /// database's or the file system's error otherwise.
    async fn backup(&self, dest: &std::path::Path) -> Result<()>;

    /// Closes the pools, waiting for checked-out connections.
    async fn close(&self);

    // ---- Dead letters and replay (issue 6 items 1-4, branch dlq) ----

    /// Dead letters matching `filter`, oldest first, with their runs' states.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn dead_letters(&self, filter: &DeadLetterFilter) -> Result<Vec<DeadLetter>>;

    /// One dead letter.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn dead_letter(&self, id: &str) -> Result<Option<DeadLetter>>;

    /// Assigns a dead letter to an owner; `None` when it does not exist.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn assign_dead_letter(&self, id: &str, owner: &str) -> Result<Option<DeadLetter>>;

    /// Resolves a dead letter (`reject` / `compensated`): its run moves
    /// `dead_lettered → failed_terminal`, audited with the operator, in one
    /// transaction. A refusal writes nothing.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn resolve_dead_letter(&self, cmd: &ResolveCommand) -> Result<ActionOutcome>;

    /// Replays a dead letter whose operation is not gated: the run's
    /// unfinished effects go back to `pending` under the same idempotency
    /// keys with a fresh attempt budget and the run `dead_lettered →
    /// approved` (or `→ failed_retryable` when it never queued an effect),
    /// audited with operator and reason, in one transaction. With a job
    /// item, only while the job runs under that runner, marking the item in
    /// the same transaction (a refusal marks it refused).
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn replay_dead_letter(&self, cmd: &ReplayCommand) -> Result<ActionOutcome>;

    /// Replaces a dead letter with a new run under the operator's key,
    /// approved with `cmd.effects`, linked both ways; the original run (if
    /// stopped) moves to `failed_terminal`. One transaction.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn replace_dead_letter(&self, cmd: &ReplaceCommand) -> Result<ActionOutcome>;

    /// Fails every `processing` run holding an execution ref, without a
    /// lease: `failed_retryable`, or `dead_lettered` with a `workflow_error`
    /// dead letter.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn fail_by_execution(&self, failure: &ExecutionFailure) -> Result<ExecutionFailed>;

    /// Replacement links from or to a run.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn run_links(&self, namespace: &str, key: &str) -> Result<Vec<RunLink>>;

    /// One stored raw delivery.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn raw_event(&self, id: &str) -> Result<Option<RawEvent>>;

    /// Creates a running bulk replay job with its frozen items.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn create_replay_job(&self, job: &NewReplayJob) -> Result<ReplayJob>;

    /// One bulk replay job with its progress.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn replay_job(&self, id: &str) -> Result<Option<ReplayJob>>;

    /// The newest bulk replay jobs.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn replay_jobs(&self, limit: i64) -> Result<Vec<ReplayJob>>;

    /// A job's items after position `after_seq`, in order.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn replay_job_items(&self, id: &str, after_seq: i64, limit: i64) -> Result<Vec<JobItem>>;

    /// Stops (`running → stopped`, dropping its lease) or resumes
    /// (`stopped → running`) a job; the job afterwards, `None` if unknown.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn set_replay_job_state(
        &self,
        id: &str,
        stop: bool,
        actor: &str,
    ) -> Result<Option<ReplayJob>>;

    /// Leases the oldest running job whose lease is free or expired.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn lease_replay_job(&self, owner: &str, lease_ms: i64) -> Result<Option<ReplayJob>>;

    /// A job's next pending item.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn next_replay_item(&self, job_id: &str) -> Result<Option<JobItem>>;

    /// Marks a job item refused while its runner holds the running job.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn refuse_replay_item(&self, item: &JobItemRef, why: &str) -> Result<bool>;

    /// Completes the runner's job when no item is pending.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn complete_replay_job(&self, id: &str, owner: &str) -> Result<bool>;

    /// Drops the runner's lease on a job (at shutdown).
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn release_replay_job(&self, id: &str, owner: &str) -> Result<()>;
}

/// A shared store handle.
pub type SharedStore = Arc<dyn Store>;

/// Options shared by both backends.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Most connections in a pool.
    pub max_connections: u32,
    /// How long SQLite waits on a locked database, in milliseconds.
    pub busy_timeout_ms: u64,
    /// The clock for SQLite, and for PostgreSQL when `use_db_clock` is off.
    pub clock: SharedClock,
    /// PostgreSQL: compare lease times with the database's `now()` (the
    /// production setting). Off only in tests that move time by hand.
    pub use_db_clock: bool,
    /// Redaction rules applied before anything is stored (issue 6: audit).
    pub redaction: Arc<crate::audit::Redactor>,
}

/// Opens (creating if needed) the store a URL names, with the default
/// SQLite group commit.
///
/// # Errors
/// [`StoreError::UnsupportedUrl`] for an unknown scheme, or the backend's
/// connection error.
pub async fn connect(url: &str, options: StoreOptions) -> Result<SharedStore> {
    connect_with(url, options, group_commit::GroupCommitOptions::default()).await
}

/// Opens the store a URL names; `group` sets SQLite's group-commit
/// batching (PostgreSQL batches concurrent commits itself and ignores it).
///
/// # Errors
/// As [`connect`].
pub async fn connect_with(
    url: &str,
    options: StoreOptions,
    group: group_commit::GroupCommitOptions,
) -> Result<SharedStore> {
    if url.starts_with("sqlite:") {
        Ok(Arc::new(
            sqlite::SqliteStore::connect_with(url, options, group).await?,
        ))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(postgres::PgStore::connect(url, options).await?))
    } else {
        Err(StoreError::UnsupportedUrl(url.to_owned()))
    }
}

/// Redacts the password of a database URL for logs and errors.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn redacts_passwords_only() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("sqlite://oncegate.db"), "sqlite://oncegate.db");
    }
}
