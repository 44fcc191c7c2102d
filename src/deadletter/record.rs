//! A dead-letter record as stored, and what a caller supplies to write one.
//! The operator's list filter and its cursor are in [`super::filter`].

use serde_json::Value;

use super::{DeadLetterClass, Resolution};
use crate::clock::Millis;
use crate::ledger::RunState;

/// What the caller of the store-level record helper supplies; the rest of
/// the record (ids, versions, payload reference, attempt history, ledger
/// state) is read from the run inside the same transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetterInput {
    /// Why automatic work stopped.
    pub class: DeadLetterClass,
    /// The error in words (sanitised, no secrets).
    pub error: String,
    /// The last evidence: a target's answer (status, selected headers,
    /// truncated body), a workflow's report, or the conflicting hashes.
    /// `None` takes the last recorded attempt of the run's effects.
    pub evidence: Option<Value>,
    /// Extra detail for the record (also kept in the 0002 `detail` column).
    pub detail: Value,
    /// The raw delivery this is about, when one is stored.
    pub raw_event_id: Option<String>,
}

impl DeadLetterInput {
    /// An input of `class` with an error text and no explicit evidence.
    pub fn new(class: DeadLetterClass, error: impl Into<String>, detail: Value) -> Self {
        Self {
            class,
            error: error.into(),
            evidence: None,
            detail,
            raw_event_id: None,
        }
    }
}

/// One dead letter with the run's current state.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    /// Stable id (UUID v7).
    pub id: String,
    /// The run's namespace.
    pub namespace: String,
    /// The run's key.
    pub key: String,
    /// The normalised error class.
    pub class: DeadLetterClass,
    /// The component that gave up (`ingress`, `dispatcher`, …).
    pub component: String,
    /// The upstream event id (the run's key; the provider's event id for ingress runs).
    pub event_id: Option<String>,
    /// The run's correlation id.
    pub correlation_id: Option<String>,
    /// The run's declared operation.
    pub operation: Option<String>,
    /// The workflow version that claimed the run.
    pub workflow_version: Option<String>,
    /// The schema version the failed effect's commit declared, if any.
    pub schema_version: Option<String>,
    /// Where the payload is: `raw_event:<id>`, or the run's source URL.
    pub payload_ref: Option<String>,
    /// The payload's hash (`sha256:…`); the body itself is never copied here.
    pub payload_hash: Option<String>,
    /// The stored raw delivery (quarantined or accepted), if any.
    pub raw_event_id: Option<String>,
    /// The error in words.
    pub error: Option<String>,
    /// Extra detail given when it was recorded.
    pub detail: Value,
    /// Each effect with its attempts, as they were when it was recorded.
    pub attempts: Value,
    /// The last target evidence (status, selected headers, truncated body).
    pub last_evidence: Option<Value>,
    /// The request the failed effect sent: method, URL, stored headers,
    /// idempotency key and body (redacted; never the target's credentials).
    pub last_request: Option<Value>,
    /// The run's state when it was recorded.
    pub run_state: Option<String>,
    /// The run's state now (`None` if the run no longer exists).
    pub current_state: Option<RunState>,
    /// What an operator should do next.
    pub next_action: Option<String>,
    /// The dead letter this run had before its last replay.
    pub previous_id: Option<String>,
    /// Who is responsible, when assigned.
    pub owner: Option<String>,
    /// When a resolved record may be archived and removed.
    pub retain_until: Option<Millis>,
    /// How often the run was replayed before (and including) this record.
    pub replay_count: i64,
    /// When it was recorded.
    pub created_at: Millis,
    /// When an operator ended it.
    pub resolved_at: Option<Millis>,
    /// How it ended.
    pub resolution: Option<Resolution>,
    /// Who ended it.
    pub resolved_by: Option<String>,
    /// The operator's note or reason.
    pub resolution_note: Option<String>,
    /// The replacement run, when it was replaced: (namespace, key).
    pub replaced_by: Option<(String, String)>,
}

impl DeadLetter {
    /// Whether an operator still has to decide.
    pub fn is_open(&self) -> bool {
        self.resolved_at.is_none()
    }
}
