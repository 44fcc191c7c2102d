//! Four eyes for replays (DESIGN.md §7): an operation listed in
//! `dead_letters.four_eyes` is replayed only through a replay job, which
//! one operator creates and another starts.

use super::jobs::ReplayJob;
use super::DeadLetterConfig;

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
/// created it.
///
/// # Errors
/// [`FourEyes::SameOperator`].
pub fn check_start(job: &ReplayJob, actor: &str) -> Result<(), FourEyes> {
    if job.four_eyes && job.started_by.is_none() && job.created_by == actor {
        return Err(FourEyes::SameOperator {
            job_id: job.id.clone(),
            actor: actor.to_owned(),
        });
    }
    Ok(())
}
