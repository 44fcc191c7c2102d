//! A dead letter as the API shows it: times in RFC 3339, the owner routed
//! by the config when none was assigned, the evidence only in full form.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::super::runs::RunRef;
use crate::clock::{to_datetime, Millis};
use crate::deadletter::request::as_sent;
use crate::deadletter::{DeadLetter, DeadLetterClass, DeadLetterConfig};
use crate::ledger::RunState;
use crate::outbox::TargetConfig;

/// A dead letter as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetterView {
    /// Stable id.
    pub id: String,
    /// The run's namespace.
    pub namespace: String,
    /// The run's key (its idempotency key).
    pub key: String,
    /// Normalised error class.
    #[schema(value_type = String)]
    pub class: DeadLetterClass,
    /// The component that gave up.
    pub component: String,
    /// The upstream event id.
    pub event_id: Option<String>,
    /// The run's correlation id.
    pub correlation_id: Option<String>,
    /// The run's operation.
    pub operation: Option<String>,
    /// Workflow version.
    pub workflow_version: Option<String>,
    /// Schema version of validated output, when recorded.
    pub schema_version: Option<String>,
    /// Where the payload is (`raw_event:<id>` or a source link); never the body.
    pub payload_ref: Option<String>,
    /// Payload hash.
    pub payload_hash: Option<String>,
    /// The error in words.
    pub error: Option<String>,
    /// The run's state when this was recorded.
    pub run_state_at_record: Option<String>,
    /// The run's state now.
    #[schema(value_type = Option<String>)]
    pub state: Option<RunState>,
    /// What to do next (null once resolved).
    pub next_action: Option<String>,
    /// Who is responsible (assigned, or routed by namespace in the config).
    pub owner: Option<String>,
    /// When the resolved record may be archived (null while open: kept).
    pub retention_deadline: Option<String>,
    /// Replays of this run before this record.
    pub replay_count: i64,
    /// The run's previous dead letter (before its last replay).
    pub previous_id: Option<String>,
    /// When it was recorded (RFC 3339).
    pub created_at: String,
    /// Seconds since it was recorded.
    pub age_seconds: i64,
    /// Whether an operator ended it.
    pub resolved: bool,
    /// How (`reject`, `compensated`, `replayed`, `replaced`).
    pub resolution: Option<String>,
    /// Who.
    pub resolved_by: Option<String>,
    /// When (RFC 3339).
    pub resolved_at: Option<String>,
    /// The operator's note or reason.
    pub resolution_note: Option<String>,
    /// The replacement run.
    pub replaced_by: Option<RunRef>,
    /// Extra detail (show only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub detail: Option<Value>,
    /// Each effect with its attempts when recorded (show only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub attempts: Option<Value>,
    /// The last target evidence: status, selected headers, truncated body (show only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub last_evidence: Option<Value>,
    /// The request the failed effect sent: method, URL, headers (the
    /// target's credential headers named, never valued), idempotency key
    /// and body, redacted (show only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub last_request: Option<Value>,
}

impl DeadLetterView {
    /// The list form (no evidence).
    pub fn summary(dl: DeadLetter, config: &DeadLetterConfig, now: Millis) -> Self {
        let ts = |ms: Millis| to_datetime(ms).to_rfc3339();
        Self {
            owner: dl
                .owner
                .clone()
                .or_else(|| config.owner_for(&dl.namespace).map(str::to_owned)),
            age_seconds: (now - dl.created_at).max(0) / 1_000,
            resolved: dl.resolved_at.is_some(),
            retention_deadline: dl.retain_until.map(ts),
            created_at: ts(dl.created_at),
            resolved_at: dl.resolved_at.map(ts),
            resolution: dl.resolution.map(|r| r.to_string()),
            replaced_by: dl
                .replaced_by
                .map(|(namespace, key)| RunRef { namespace, key }),
            id: dl.id,
            namespace: dl.namespace,
            key: dl.key,
            class: dl.class,
            component: dl.component,
            event_id: dl.event_id,
            correlation_id: dl.correlation_id,
            operation: dl.operation,
            workflow_version: dl.workflow_version,
            schema_version: dl.schema_version,
            payload_ref: dl.payload_ref,
            payload_hash: dl.payload_hash,
            error: dl.error,
            run_state_at_record: dl.run_state,
            state: dl.current_state,
            next_action: dl.next_action,
            replay_count: dl.replay_count,
            previous_id: dl.previous_id,
            resolved_by: dl.resolved_by,
            resolution_note: dl.resolution_note,
            detail: None,
            attempts: None,
            last_evidence: None,
            last_request: None,
        }
    }

    /// The full form, with the recorded evidence and the request as sent
    /// to its target (one of `targets`).
    pub fn full(
        dl: DeadLetter,
        config: &DeadLetterConfig,
        targets: &[TargetConfig],
        now: Millis,
    ) -> Self {
        let (detail, attempts, evidence) = (
            dl.detail.clone(),
            dl.attempts.clone(),
            dl.last_evidence.clone(),
        );
        let request = dl
            .last_request
            .as_ref()
            .map(|r| as_sent(r, &dl.namespace, &dl.key, targets));
        Self {
            detail: Some(detail),
            attempts: Some(crate::api::records::stored_times(attempts)),
            last_evidence: evidence,
            last_request: request,
            ..Self::summary(dl, config, now)
        }
    }
}
