//! The operator's commands on a dead letter, the workflow's failure report,
//! and what the store answers. Each command runs as one transaction in the
//! store: the record's resolution, the run's move, the audit entry and any
//! re-queued effects commit together or not at all.

use serde_json::Value;

use super::record::DeadLetter;
use super::Resolution;
use crate::clock::Millis;
use crate::ingress::RawEvent;
use crate::ledger::{IdempotencyKey, PayloadHash, Run, RunMetadata, RunState};
use crate::outbox::NewEffect;

/// `resolve`: the run `dead_lettered → failed_terminal` with the note.
#[derive(Debug, Clone)]
pub struct ResolveCommand {
    /// The dead letter.
    pub id: String,
    /// `Reject` or `Compensated`.
    pub resolution: Resolution,
    /// The operator.
    pub actor: String,
    /// Why (required).
    pub note: String,
    /// How long the resolved record is kept, in milliseconds.
    pub retain_ms: i64,
}

/// A bulk job's item that a replay belongs to: the replay commits only while
/// the job is `running` under this runner's lease, and marks the item in the
/// same transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobItemRef {
    /// The job.
    pub job_id: String,
    /// The item's position.
    pub seq: i64,
    /// The runner holding the job's lease.
    pub owner: String,
    /// The lease is extended by this much, in milliseconds.
    pub lease_ms: i64,
    /// The second operator who started the job (four eyes), audited with
    /// the replay beside its creator.
    pub started_by: Option<String>,
}

/// `replay`: the same effects under the same idempotency keys.
#[derive(Debug, Clone)]
pub struct ReplayCommand {
    /// The dead letter.
    pub id: String,
    /// The operator (for a job: its creator).
    pub actor: String,
    /// Why (required).
    pub reason: String,
    /// How long the resolved record is kept, in milliseconds.
    pub retain_ms: i64,
    /// The bulk job item this replay is, if any.
    pub job_item: Option<JobItemRef>,
    /// For a gated operation: the new approval challenge the run waits on
    /// (`dead_lettered → awaiting_human`); its effects are re-queued only
    /// when it is approved.
    pub challenge: Option<crate::approval::NewChallenge>,
    /// An operator release: only a run that queued no effect may go back
    /// to the workflow's re-run (`dead_lettered → failed_retryable`, its
    /// reclaim budget restarted); a run with effects is refused
    /// ([`Refusal::RunHasEffects`]) instead of replayed.
    pub release: bool,
    /// Replay after a fix: one effect's corrected body (and, when the
    /// target may hold a request under the old key, its new key).
    pub correction: Option<EffectCorrection>,
}

/// One effect's corrected body, written in the replay's transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct EffectCorrection {
    /// The effect.
    pub effect_id: String,
    /// Its corrected body.
    pub body: Vec<u8>,
    /// The key it goes out under (its own, or a new one).
    pub idempotency_key: String,
    /// What the audit entry records (transform, hashes, keys).
    pub audit: Value,
}

impl ReplayCommand {
    /// One operator's replay of dead letter `id` (or, with `release`, its
    /// release to the workflow's re-run), outside any bulk job.
    pub fn by_operator(
        id: String,
        actor: String,
        reason: String,
        retain_ms: i64,
        release: bool,
    ) -> Self {
        Self {
            id,
            actor,
            reason,
            retain_ms,
            job_item: None,
            challenge: None,
            release,
            correction: None,
        }
    }
}

/// `replace`: a new event under a new upstream key, linked to the original.
#[derive(Debug, Clone)]
pub struct ReplaceCommand {
    /// The dead letter.
    pub id: String,
    /// The operator.
    pub actor: String,
    /// Why (required).
    pub reason: String,
    /// How long the resolved record is kept, in milliseconds.
    pub retain_ms: i64,
    /// The upstream-issued key of the replacement (same namespace).
    pub new_key: IdempotencyKey,
    /// The replacement's payload hash.
    pub payload_hash: PayloadHash,
    /// Its metadata (operation, workflow version, source link).
    pub metadata: RunMetadata,
    /// Its effects, keyed for the new key.
    pub effects: Vec<NewEffect>,
    /// The raw delivery stored under the new key (ingress replacements).
    pub raw_event: Option<RawEvent>,
}

/// Why the store refused an operator command; nothing was written.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// No dead letter has this id.
    NotFound,
    /// The record was already resolved.
    AlreadyResolved(Resolution),
    /// The record's run is not `dead_lettered` any more (or never was).
    RunNotDeadLettered(Option<RunState>),
    /// A payload-conflict record stands for a quarantined delivery, not a
    /// stopped run: there is nothing to replay (replace it instead).
    NothingToReplay,
    /// The replacement key is already taken by a run in this state.
    KeyTaken(RunState),
    /// The bulk job is stopped, completed, or its lease is held by another runner.
    JobNotRunning,
    /// The bulk job item was already worked.
    ItemDone,
    /// A release was asked for a run that queued this many effects: its
    /// effects must be replayed (same keys) or the record resolved.
    RunHasEffects(i64),
    /// The effect a correction names finished or left the run meanwhile.
    EffectNotReplayable(String),
}

impl Refusal {
    /// The refusal in words, for operators and job items.
    pub fn describe(&self) -> String {
        match self {
            Self::NotFound => "no such dead letter".into(),
            Self::AlreadyResolved(r) => format!("already resolved ({r})"),
            Self::RunNotDeadLettered(Some(state)) => {
                format!("the run is {state}, not dead_lettered")
            }
            Self::RunNotDeadLettered(None) => "the run no longer exists".into(),
            Self::NothingToReplay => {
                "a payload conflict quarantined a delivery and stopped no run: replace it under a new key, or resolve it".into()
            }
            Self::KeyTaken(state) => format!("the replacement key is already a run ({state})"),
            Self::JobNotRunning => "the job is not running under this runner".into(),
            Self::ItemDone => "the job item was already worked".into(),
            Self::RunHasEffects(n) => format!(
                "the run queued {n} effect(s), so it cannot go back to the workflow's re-run: \
                 replay it (the same effects under the same keys) or resolve it; nothing was changed"
            ),
            Self::EffectNotReplayable(id) => format!(
                "effect {id} is no longer an unfinished effect of this run; nothing was changed"
            ),
        }
    }
}

/// What the store did with an operator command.
#[derive(Debug, Clone)]
pub enum ActionOutcome {
    /// Done: the record after it, and the run that moved (the replayed run,
    /// or the replacement run).
    Done {
        /// The dead letter after the command.
        dead_letter: Box<DeadLetter>,
        /// The run the command moved or created.
        run: Option<Box<Run>>,
        /// Effects put back to `pending` (replay) or queued (replacement).
        effects: u64,
    },
    /// Refused; nothing was written (except a refused job item's outcome).
    Refused(Refusal),
}

/// `POST /v1/runs/fail-by-execution`: a workflow's error handler reports a
/// failure of the runs its execution holds.
#[derive(Debug, Clone)]
pub struct ExecutionFailure {
    /// The workflow engine's execution id.
    pub execution_ref: String,
    /// The error message (sanitised).
    pub message: String,
    /// The node that failed, when known.
    pub node: Option<String>,
    /// The engine's error class, when known.
    pub error_class: Option<String>,
    /// `true`: the runs become `failed_retryable`; `false`: `dead_lettered`.
    pub retryable: bool,
    /// The token subject reporting it.
    pub actor: String,
    /// Only runs this subject claimed (`None`: any run, for an admin).
    /// Execution ids are sequential in n8n, so one workflow's token could
    /// otherwise fail another's runs by guessing its id.
    pub claimed_by: Option<String>,
}

impl ExecutionFailure {
    /// The evidence stored with the runs' audit entries and dead letters.
    pub fn evidence(&self) -> Value {
        serde_json::json!({
            "execution_ref": self.execution_ref,
            "message": self.message,
            "node": self.node,
            "class": self.error_class,
        })
    }
}

/// What a failure report did.
#[derive(Debug, Clone)]
pub enum ExecutionFailed {
    /// These runs were in `processing` and moved.
    Moved(Vec<Run>),
    /// No run holds this execution ref.
    NoRun,
    /// Runs hold it, none in `processing`: here they are, unchanged.
    NotProcessing(Vec<Run>),
}

/// A replacement link: `namespace/key` was replaced by `replaced_by`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RunLink {
    /// The original run's namespace.
    pub namespace: String,
    /// The original run's key.
    pub key: String,
    /// The replacement's namespace.
    pub replaced_by_namespace: String,
    /// The replacement's key.
    pub replaced_by_key: String,
    /// The dead letter that was replaced.
    pub dead_letter_id: String,
    /// The operator.
    pub actor: String,
    /// Why.
    pub reason: String,
    /// When.
    pub created_at: Millis,
}
