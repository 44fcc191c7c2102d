//! The dead-letter storage ports: records and the operator's commands on
//! them ([`DeadLetterStore`]), and bulk replay jobs with their runner's
//! lease ([`JobStore`]).

use async_trait::async_trait;

use super::{
    ActionOutcome, DeadLetter, DeadLetterFilter, ExecutionFailed, ExecutionFailure, JobItem,
    JobItemRef, NewReplayJob, ReplaceCommand, ReplayCommand, ReplayJob, ResolveCommand, RunLink,
};
use crate::ledger::storage::Result;

/// Storage calls of dead letters.
#[async_trait]
pub trait DeadLetterStore: Send + Sync + std::fmt::Debug {
    /// Dead letters matching `filter`, oldest first, with their runs' states.
    ///
    /// # Errors
    /// On database failure.
    async fn dead_letters(&self, filter: &DeadLetterFilter) -> Result<Vec<DeadLetter>>;

    /// One dead letter.
    ///
    /// # Errors
    /// On database failure.
    async fn dead_letter(&self, id: &str) -> Result<Option<DeadLetter>>;

    /// Assigns a dead letter to an owner; `None` when it does not exist.
    ///
    /// # Errors
    /// On database failure.
    async fn assign_dead_letter(&self, id: &str, owner: &str) -> Result<Option<DeadLetter>>;

    /// Resolves a dead letter (`reject` / `compensated`): its run moves
    /// `dead_lettered → failed_terminal`, audited with the operator, in one
    /// transaction. A refusal writes nothing.
    ///
    /// # Errors
    /// On database failure.
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
    /// On database failure.
    async fn replay_dead_letter(&self, cmd: &ReplayCommand) -> Result<ActionOutcome>;

    /// Replaces a dead letter with a new run under the operator's key,
    /// approved with `cmd.effects`, linked both ways; the original run (if
    /// stopped) moves to `failed_terminal`. One transaction.
    ///
    /// # Errors
    /// On database failure.
    async fn replace_dead_letter(&self, cmd: &ReplaceCommand) -> Result<ActionOutcome>;

    /// Fails every `processing` run holding an execution ref, without a
    /// lease: `failed_retryable`, or `dead_lettered` with a `workflow_error`
    /// dead letter.
    ///
    /// # Errors
    /// On database failure.
    async fn fail_by_execution(&self, failure: &ExecutionFailure) -> Result<ExecutionFailed>;

    /// Replacement links from or to a run.
    ///
    /// # Errors
    /// On database failure.
    async fn run_links(&self, namespace: &str, key: &str) -> Result<Vec<RunLink>>;
}

/// Storage calls of bulk replay jobs.
#[async_trait]
pub trait JobStore: Send + Sync + std::fmt::Debug {
    /// Creates a running bulk replay job with its frozen items.
    ///
    /// # Errors
    /// On database failure.
    async fn create_replay_job(&self, job: &NewReplayJob) -> Result<ReplayJob>;

    /// One bulk replay job with its progress.
    ///
    /// # Errors
    /// On database failure.
    async fn replay_job(&self, id: &str) -> Result<Option<ReplayJob>>;

    /// The newest bulk replay jobs.
    ///
    /// # Errors
    /// On database failure.
    async fn replay_jobs(&self, limit: i64) -> Result<Vec<ReplayJob>>;

    /// A job's items after position `after_seq`, in order.
    ///
    /// # Errors
    /// On database failure.
    async fn replay_job_items(&self, id: &str, after_seq: i64, limit: i64) -> Result<Vec<JobItem>>;

    /// Stops (`running → stopped`, dropping its lease) or resumes
    /// (`stopped → running`; a four-eyes job never by its creator) a job;
    /// the job afterwards and whether this call moved it, `None` if unknown.
    ///
    /// # Errors
    /// On database failure.
    async fn set_replay_job_state(
        &self,
        id: &str,
        stop: bool,
        actor: &str,
    ) -> Result<Option<(ReplayJob, bool)>>;

    /// Leases the oldest running job whose lease is free or expired.
    ///
    /// # Errors
    /// On database failure.
    async fn lease_replay_job(&self, owner: &str, lease_ms: i64) -> Result<Option<ReplayJob>>;

    /// A job's next pending item.
    ///
    /// # Errors
    /// On database failure.
    async fn next_replay_item(&self, job_id: &str) -> Result<Option<JobItem>>;

    /// Marks a job item refused while its runner holds the running job.
    ///
    /// # Errors
    /// On database failure.
    async fn refuse_replay_item(&self, item: &JobItemRef, why: &str) -> Result<bool>;

    /// Completes the runner's job when no item is pending.
    ///
    /// # Errors
    /// On database failure.
    async fn complete_replay_job(&self, id: &str, owner: &str) -> Result<bool>;

    /// Drops the runner's lease on a job (at shutdown).
    ///
    /// # Errors
    /// On database failure.
    async fn release_replay_job(&self, id: &str, owner: &str) -> Result<()>;
}

/// What replaying, replacing and the bulk replay runner need: the records,
/// their commands and jobs, and the run, its effects and its stored
/// delivery to plan them from.
pub trait ReplayStore:
    DeadLetterStore
    + JobStore
    + crate::ledger::port::LedgerStore
    + crate::outbox::port::OutboxStore
    + crate::ingress::port::IngressStore
{
}

impl<T> ReplayStore for T where
    T: DeadLetterStore
        + JobStore
        + crate::ledger::port::LedgerStore
        + crate::outbox::port::OutboxStore
        + crate::ingress::port::IngressStore
        + ?Sized
{
}
