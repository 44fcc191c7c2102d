//! Dead letters: where automatic work stops and an operator decides
//! (DESIGN.md §7).
//!
//! A dead letter is written in the same transaction as the move that stops
//! the run (or, for an ingress payload conflict, with the quarantined
//! delivery). It holds the evidence an operator needs: the event and
//! correlation ids, workflow version, payload reference and hash (never the
//! body), the failed component and a normalised [`DeadLetterClass`], the
//! attempt history with the last target evidence, and the ledger state.
//! Operators then resolve it (`reject` / `compensated`), replay it (the same
//! effects under the same idempotency keys), or replace it (a new event
//! under a new upstream key, linked both ways); bulk replays run as tracked
//! [`jobs`] under a rate limit.
//!
//! - [`record`]: the stored record and its input.
//! - [`filter`]: the list's criteria, checked into a store filter, and its
//!   keyset cursor.
//! - [`plan`]: a bulk replay's selection frozen into ids and its dry-run
//!   summary ([`plan::BulkReplay`], the bulk replay's context).
//! - [`bulk`]: starting a bulk replay job over a frozen selection.
//! - [`commands`]: the operator commands and their answers.
//! - [`jobs`]: bulk replay jobs and their items.
//! - [`replay`]: the replay and replacement logic shared by the API and
//!   the job runner (gate checks, effect re-keying).
//! - [`fix`]: the dry run and the replay of a correction.
//! - [`four_eyes`]: operations whose replays need a second operator.
//! - [`request`]: the request a dead-lettered effect sent, as shown.
//! - [`runner`]: the background job runner inside `oncegate serve`.
//! - [`correct`]: replay after a fix: a corrected body (whole, or by a
//!   declared [`transform`]), its diff and the key-keeping rule.
//! - [`config`]: the `[dead_letters]` section of the configuration.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub mod bulk;
pub mod commands;
pub mod config;
pub mod correct;
pub mod filter;
pub mod fix;
pub mod four_eyes;
pub mod jobs;
pub mod plan;
pub mod port;
pub mod record;
pub mod replay;
pub mod request;
pub mod runner;
pub mod transform;

pub use commands::{
    ActionOutcome, EffectCorrection, ExecutionFailed, ExecutionFailure, JobItemRef, Refusal,
    ReplaceCommand, ReplayCommand, ResolveCommand, RunLink,
};
pub use config::DeadLetterConfig;
pub use filter::{Cursor, DeadLetterFilter};
pub use jobs::{ItemState, JobItem, JobMove, JobState, NewReplayJob, ReplayJob};
pub use record::{DeadLetter, DeadLetterInput};

/// Why automatic work stopped: the normalised error class of a dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterClass {
    /// The same event id arrived with a different body (ingress quarantine).
    /// The run itself is not stopped.
    PayloadConflict,
    /// The target refused an effect permanently (3xx, 4xx).
    Permanent,
    /// An effect's retry budget is spent.
    RetryExhausted,
    /// An effect's outcome is unknown and cannot be reconciled.
    UnknownOutcome,
    /// Nobody decided an approval challenge before it expired.
    ApprovalExpired,
    /// The workflow reported a failure it does not want retried
    /// (`POST /v1/runs/fail-by-execution` with `retryable: false`).
    WorkflowError,
    /// A `processing` run's lease expired more than `stranded_after` ago
    /// and nobody reclaimed it (the recovery sweeper).
    Stranded,
    /// A `failed_retryable` run used its `max_reclaims` reclaims or outlived
    /// its `retry_window` (the recovery sweeper, or the claim that found it).
    ReclaimBudgetExhausted,
}

impl DeadLetterClass {
    /// Every class.
    pub const ALL: [Self; 8] = [
        Self::PayloadConflict,
        Self::Permanent,
        Self::RetryExhausted,
        Self::UnknownOutcome,
        Self::ApprovalExpired,
        Self::WorkflowError,
        Self::Stranded,
        Self::ReclaimBudgetExhausted,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PayloadConflict => "payload_conflict",
            Self::Permanent => "permanent",
            Self::RetryExhausted => "retry_exhausted",
            Self::UnknownOutcome => "unknown_outcome",
            Self::ApprovalExpired => "approval_expired",
            Self::WorkflowError => "workflow_error",
            Self::Stranded => "stranded",
            Self::ReclaimBudgetExhausted => "reclaim_budget_exhausted",
        }
    }

    /// Whether the record stands for a run moved to `dead_lettered` (every
    /// class but the payload conflict, which quarantines a delivery and
    /// leaves its run alone).
    pub fn stops_run(self) -> bool {
        self != Self::PayloadConflict
    }

    /// The part of oncegate that gave up.
    pub fn component(self) -> Component {
        match self {
            Self::PayloadConflict => Component::Ingress,
            Self::Permanent | Self::RetryExhausted | Self::UnknownOutcome => Component::Dispatcher,
            Self::ApprovalExpired => Component::Approval,
            Self::WorkflowError => Component::Workflow,
            Self::Stranded | Self::ReclaimBudgetExhausted => Component::Ledger,
        }
    }

    /// What an operator should do next given the record's last evidence:
    /// the class's advice, and for an unknown outcome whose target did
    /// answer (a 5xx from a target that ignores idempotency keys) the two
    /// ways it stops landing here.
    pub fn next_action_for(self, evidence: Option<&serde_json::Value>) -> String {
        let answered = evidence
            .and_then(|e| e.pointer("/evidence/status"))
            .and_then(serde_json::Value::as_u64);
        match (self, answered) {
            (Self::UnknownOutcome, Some(status)) => format!(
                "the target answered {status}, which may mean it acted: check it for the effect \
                 by its idempotency key or external reference; resolve as compensated if it \
                 happened, replay if it did not. So that the next {status} does not stop here: \
                 give the effect a probe_url (oncegate then reconciles it by itself), or, if a \
                 {status} from this target never means it acted, map it in the target's \
                 status_classes (\"{status}\" = \"transient\")"
            ),
            _ => self.next_action().to_owned(),
        }
    }

    /// What an operator should do next, in words.
    pub fn next_action(self) -> &'static str {
        match self {
            Self::PayloadConflict => {
                "compare the quarantined body with the accepted one; if it is an intended \
                 correction, replace it under a new upstream key, otherwise resolve as reject"
            }
            Self::Permanent => {
                "read the target's answer; fix the request data or the target's configuration, \
                 then replay, or resolve"
            }
            Self::RetryExhausted => {
                "check the target's health, then replay (same keys), or resolve"
            }
            Self::UnknownOutcome => {
                "check the target for the effect by its idempotency key or external reference: \
                 resolve as compensated if it happened, replay if it did not"
            }
            Self::ApprovalExpired => "replay to ask for a new approval, or resolve as reject",
            Self::WorkflowError => {
                "fix the workflow (see the reported node), then replay so it can re-run under the \
                 same key, or resolve"
            }
            Self::Stranded => {
                "find the workflow execution (execution_ref) that abandoned the run; release it so \
                 the next claim re-runs it under the same key, or resolve"
            }
            Self::ReclaimBudgetExhausted => {
                "read the last error of the failed attempts and fix its cause; release the run \
                 (its reclaim budget restarts) so the next claim re-runs it, or resolve"
            }
        }
    }
}

impl fmt::Display for DeadLetterClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DeadLetterClass {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|c| c.as_str()).collect();
                format!(
                    "unknown dead-letter class {s:?}; one of {}",
                    names.join(", ")
                )
            })
    }
}

/// The part of oncegate that recorded a dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    /// Webhook ingress.
    Ingress,
    /// The outbox dispatcher.
    Dispatcher,
    /// Approval gates.
    Approval,
    /// The workflow engine, through its error handler.
    Workflow,
    /// The ledger's recovery rules (the sweeper, or a claim past its budget).
    Ledger,
}

impl Component {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ingress => "ingress",
            Self::Dispatcher => "dispatcher",
            Self::Approval => "approval",
            Self::Workflow => "workflow",
            Self::Ledger => "ledger",
        }
    }
}

/// How a dead letter ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// An operator rejected the event: nothing more is done.
    Reject,
    /// An operator compensated by hand (the effect happened, or was undone).
    Compensated,
    /// An operator replayed it (same key, same effects).
    Replayed,
    /// An operator replaced it with a new event under a new upstream key.
    Replaced,
}

impl Resolution {
    /// Every resolution.
    pub const ALL: [Self; 4] = [
        Self::Reject,
        Self::Compensated,
        Self::Replayed,
        Self::Replaced,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reject => "reject",
            Self::Compensated => "compensated",
            Self::Replayed => "replayed",
            Self::Replaced => "replaced",
        }
    }
}

impl fmt::Display for Resolution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Resolution {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown resolution {s:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_round_trip_and_only_payload_conflicts_leave_the_run() {
        for class in DeadLetterClass::ALL {
            assert_eq!(class.as_str().parse::<DeadLetterClass>().unwrap(), class);
            assert!(!class.next_action().is_empty());
            assert_eq!(class.next_action_for(None), class.next_action());
            assert_eq!(class.stops_run(), class != DeadLetterClass::PayloadConflict);
        }
        assert_eq!(
            DeadLetterClass::Stranded.as_str(),
            crate::ledger::reclaim::STRANDED
        );
        assert_eq!(
            DeadLetterClass::ReclaimBudgetExhausted.as_str(),
            crate::ledger::reclaim::BUDGET_EXHAUSTED
        );
        let err = "oops".parse::<DeadLetterClass>().unwrap_err();
        assert!(err.contains("workflow_error"), "{err}");
        assert_eq!(
            DeadLetterClass::WorkflowError.component(),
            Component::Workflow
        );
    }

    #[test]
    fn resolutions_round_trip() {
        for r in Resolution::ALL {
            assert_eq!(r.as_str().parse::<Resolution>().unwrap(), r);
        }
        assert!("rejected".parse::<Resolution>().is_err());
    }
}
