//! The bulk replay runner inside `oncegate serve`: leases one running job
//! at a time, replays its items in order under the job's rate limit, and
//! stops between items when the job is stopped, its lease is lost, or the
//! process shuts down.
//!
//! Each item is replayed (or refused) in a transaction that first extends
//! the runner's lease on the still-running job and marks the item, so a
//! stop takes effect before the next item, and a runner that crashed
//! mid-job leaves every item either done or pending: the next runner
//! leases the job once the lease expires and works only what is pending.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::commands::{ActionOutcome, JobItemRef, ReplayCommand};
use super::fix::replay_fixed;
use super::jobs::{JobItem, ReplayJob};
use super::replay::{replay_one, ReplayContext, ReplayError};
use super::{DeadLetterConfig, Refusal};
use crate::ledger::storage::StoreError;

/// Works bulk replay jobs.
#[derive(Debug)]
pub struct ReplayRunner {
    ctx: ReplayContext,
    owner: String,
    lease_ms: i64,
    poll: Duration,
}

/// What to do after an item.
enum Next {
    Continue,
    Halt,
}

impl ReplayRunner {
    /// A runner with a fresh owner name and the configured lease and poll.
    pub fn new(ctx: ReplayContext, config: &DeadLetterConfig) -> Self {
        let owner = format!(
            "replayer-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        Self {
            ctx,
            owner,
            lease_ms: config.job_lease_ms,
            poll: Duration::from_millis(config.job_poll_ms),
        }
    }

    /// This runner's lease owner name.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Works jobs until `shutdown`; a job in progress is released (its
    /// lease dropped) so another process resumes it at once.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        tracing::info!(owner = %self.owner, "replay runner started");
        loop {
            let worked = match self.work_once(&shutdown).await {
                Ok(worked) => worked,
                Err(err) => {
                    tracing::warn!(error = %err, "replay runner step failed; retrying");
                    false
                }
            };
            if worked && !shutdown.is_cancelled() {
                continue;
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(self.poll) => {}
            }
        }
        tracing::info!(owner = %self.owner, "replay runner stopped");
    }

    /// Leases one job and works it until it completes, is stopped, loses
    /// its lease, or `shutdown`; `true` when a job was leased.
    ///
    /// # Errors
    /// The store failed; the job keeps its lease until it expires or this
    /// runner leases it again.
    pub async fn work_once(&self, shutdown: &CancellationToken) -> Result<bool, StoreError> {
        let store = &self.ctx.store;
        let Some(job) = store.lease_replay_job(&self.owner, self.lease_ms).await? else {
            return Ok(false);
        };
        tracing::info!(job = %job.id, rate = job.rate_per_sec, pending = job.progress.pending, "replay job leased");
        let interval =
            Duration::from_secs(1) / u32::try_from(job.rate_per_sec.max(1)).unwrap_or(u32::MAX);
        // The first item waits one interval too: at most `rate` items start
        // in any second, and n items take at least n / rate seconds.
        let mut next = Instant::now() + interval;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => {
                    store.release_replay_job(&job.id, &self.owner).await?;
                    return Ok(true);
                }
                () = tokio::time::sleep_until(next) => {}
            }
            let Some(item) = store.next_replay_item(&job.id).await? else {
                if store.complete_replay_job(&job.id, &self.owner).await? {
                    tracing::info!(job = %job.id, "replay job completed");
                }
                return Ok(true);
            };
            if let Next::Halt = self.work_item(&job, &item).await? {
                tracing::info!(job = %job.id, seq = item.seq, "replay job halted (stopped or lease lost)");
                return Ok(true);
            }
            next = next.max(Instant::now()) + interval;
        }
    }

    async fn work_item(&self, job: &ReplayJob, item: &JobItem) -> Result<Next, StoreError> {
        let item_ref = JobItemRef {
            job_id: job.id.clone(),
            seq: item.seq,
            owner: self.owner.clone(),
            lease_ms: self.lease_ms,
            started_by: job.started_by.clone(),
        };
        let cmd = ReplayCommand {
            id: item.dead_letter_id.clone(),
            actor: job.created_by.clone(),
            reason: job.reason.clone(),
            retain_ms: self.ctx.retain_ms,
            job_item: Some(item_ref.clone()),
            challenge: None,
            release: false,
            correction: None,
        };
        // A job with a fix sends it with every item (planned now, against
        // the body as it is when the item is worked).
        let replayed = match &job.fix {
            Some(fix) => replay_fixed(&self.ctx, cmd, fix).await,
            None => replay_one(&self.ctx, cmd).await,
        };
        let refused = match replayed {
            Ok(ActionOutcome::Refused(Refusal::JobNotRunning)) => return Ok(Next::Halt),
            Ok(_) => return Ok(Next::Continue),
            Err(ReplayError::Store(err)) => return Err(err),
            Err(other) => other.to_string(),
        };
        // Refused before the store was asked (a gate, an undeclared
        // operation): record why on the item.
        if self
            .ctx
            .store
            .refuse_replay_item(&item_ref, &refused)
            .await?
        {
            Ok(Next::Continue)
        } else {
            Ok(Next::Halt)
        }
    }
}
