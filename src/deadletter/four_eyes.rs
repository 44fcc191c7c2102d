//! Four eyes for replays (DESIGN.md §7): an operation listed in
//! `dead_letters.four_eyes` is replayed only through a replay job, which
//! one operator creates and another starts. Starting and stopping a job
//! ([`set_job_state`]) is one use case for the API and the console.

use super::jobs::{JobState, ReplayJob};
use super::port::JobStore;
use super::DeadLetterConfig;
use crate::ledger::storage::StoreError;

/// Why a replay needs a second operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FourEyes {
    /// A direct replay of a four-eyes operation.
    #[error(
        "replays of operation {0:?} need two operators: create a replay job with this dead letter \
         (POST /v1/replay-jobs, or the console's bulk replay), and another operator \
         starts it; nothing was changed"
    )]
    JobRequired(String),
    /// The job's creator tried to start it.
    #[error(
        "job {job_id} holds replays of operation(s) needing two operators, and {actor} created it: \
         another operator must start it; nothing was changed"
    )]
    SameOperator {
        /// The job.
        job_id: String,
        /// Its creator, who asked to start it.
        actor: String,
    },
}

/// The first of `operations` whose replays need a second operator.
pub fn guarded<'a>(
    config: &DeadLetterConfig,
    operations: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    operations.into_iter().find(|op| config.four_eyes_for(op))
}

/// Refuses `actor` starting `job` when it needs four eyes and `actor`
/// created it. It reads only what never changes (the creator and the
/// four-eyes mark), never the job's state, so the creator is refused the
/// same way whether the job waits, runs, or another operator is starting
/// it at this very moment.
///
/// # Errors
/// [`FourEyes::SameOperator`].
pub fn check_start(job: &ReplayJob, actor: &str) -> Result<(), FourEyes> {
    if job.four_eyes && job.created_by == actor {
        return Err(FourEyes::SameOperator {
            job_id: job.id.clone(),
            actor: actor.to_owned(),
        });
    }
    Ok(())
}

/// Why a job's state did not change; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum JobStateError {
    /// No job has this id.
    #[error("no replay job {0}")]
    NotFound(String),
    /// The creator of a four-eyes job asked to start it.
    #[error(transparent)]
    FourEyes(#[from] FourEyes),
    /// The job is not where the change starts from: completed, or (for a
    /// four-eyes job) already started by another operator.
    #[error("{detail}")]
    NotMoved {
        /// `job-completed` or `job-already-started`.
        slug: &'static str,
        /// What is in the way.
        detail: String,
        /// The job's state now.
        state: JobState,
    },
    /// The store failed.
    #[error("store failure")]
    Store(#[from] StoreError),
}

/// Stops (`stop`) or starts/resumes a job for `actor`. A four-eyes job's
/// creator is refused before the state is looked at; of two operators
/// starting a waiting four-eyes job at once, the store's guarded move lets
/// one through and the other is told the job is already started.
///
/// # Errors
/// [`JobStateError`]; nothing was changed.
pub async fn set_job_state(
    store: &dyn JobStore,
    id: &str,
    stop: bool,
    actor: &str,
) -> Result<ReplayJob, JobStateError> {
    let not_found = || JobStateError::NotFound(id.to_owned());
    let before = store.replay_job(id).await?.ok_or_else(not_found)?;
    if !stop {
        check_start(&before, actor)?;
    }
    let (job, moved) = store
        .set_replay_job_state(id, stop, actor)
        .await?
        .ok_or_else(not_found)?;
    let wanted = if stop {
        JobState::Stopped
    } else {
        JobState::Running
    };
    if job.state != wanted {
        return Err(JobStateError::NotMoved {
            slug: "job-completed",
            detail: format!("replay job {id} is {}; nothing was changed", job.state),
            state: job.state,
        });
    }
    if !stop && !moved && job.four_eyes {
        let by = job.started_by.as_deref().unwrap_or("another operator");
        return Err(JobStateError::NotMoved {
            slug: "job-already-started",
            detail: format!("replay job {id} was already started by {by}; nothing was changed"),
            state: job.state,
        });
    }
    tracing::info!(job = %id, state = %job.state, by = actor, "replay job state changed");
    Ok(job)
}
