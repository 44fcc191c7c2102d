//! API views of stored records that the parts keep with epoch-millisecond
//! times: an effect's attempts, a run's audit events and its replacement
//! links. The API serves every point in time as an RFC 3339 UTC string
//! (durations such as `lease_ms` stay in milliseconds), so these views
//! carry the same fields with their times converted.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::audit::AuditRecord;
use crate::clock::{to_datetime, Millis};
use crate::deadletter::RunLink;
use crate::outbox::AttemptView;

/// A stored time as the API shows it: RFC 3339, UTC.
pub(crate) fn rfc3339(ms: Millis) -> String {
    to_datetime(ms).to_rfc3339()
}

/// One delivery attempt of an effect.
#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptItem {
    /// 1-based attempt number.
    pub attempt: i64,
    /// The dispatcher that made it.
    pub dispatcher: String,
    /// When it started (RFC 3339).
    #[schema(format = DateTime)]
    pub started_at: String,
    /// When it ended (RFC 3339).
    #[schema(format = DateTime)]
    pub finished_at: String,
    /// Its class (`success`, `transient`, `permanent`, …).
    #[schema(value_type = String)]
    pub class: crate::outbox::AttemptClass,
    /// HTTP status.
    pub status: Option<i64>,
    /// Error text.
    pub error: Option<String>,
    /// Selected headers and truncated body.
    #[schema(value_type = Object)]
    pub evidence: Value,
}

impl From<AttemptView> for AttemptItem {
    fn from(a: AttemptView) -> Self {
        Self {
            attempt: a.attempt,
            dispatcher: a.dispatcher,
            started_at: rfc3339(a.outcome.started_at),
            finished_at: rfc3339(a.outcome.finished_at),
            class: a.outcome.class,
            status: a.outcome.status,
            error: a.outcome.error,
            evidence: a.outcome.evidence,
        }
    }
}

/// One audit event of a run, with its chain links.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditEventView {
    /// The run's namespace.
    pub namespace: String,
    /// The run's key.
    pub key: String,
    /// Position in the key's chain, from 1.
    pub seq: i64,
    /// What happened (`claim`, `complete`, …).
    pub kind: String,
    /// The token subject or component that caused it.
    pub actor: String,
    /// The state before, if the run existed.
    pub from_state: Option<String>,
    /// The state after.
    pub to_state: Option<String>,
    /// The fencing version after.
    pub version: Option<i64>,
    /// Event details, already redacted.
    #[schema(value_type = Object)]
    pub detail: Value,
    /// When it happened (RFC 3339; the chain hashes the stored milliseconds).
    #[schema(format = DateTime)]
    pub created_at: String,
    /// The previous entry's hash, if any.
    pub prev_hash: Option<String>,
    /// This entry's hash.
    pub hash: String,
}

impl From<AuditRecord> for AuditEventView {
    fn from(r: AuditRecord) -> Self {
        let e = r.entry;
        Self {
            namespace: e.namespace,
            key: e.key,
            seq: e.seq,
            kind: e.kind,
            actor: e.actor,
            from_state: e.from_state,
            to_state: e.to_state,
            version: e.version,
            detail: e.detail,
            created_at: rfc3339(e.created_at),
            prev_hash: r.prev_hash,
            hash: r.hash,
        }
    }
}

/// A run replaced by another after a dead letter.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunLinkView {
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
    /// When (RFC 3339).
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl From<RunLink> for RunLinkView {
    fn from(l: RunLink) -> Self {
        Self {
            namespace: l.namespace,
            key: l.key,
            replaced_by_namespace: l.replaced_by_namespace,
            replaced_by_key: l.replaced_by_key,
            dead_letter_id: l.dead_letter_id,
            actor: l.actor,
            reason: l.reason,
            created_at: rfc3339(l.created_at),
        }
    }
}

/// Stored JSON evidence (a dead letter's attempts, written when it was
/// recorded) with every integer field named `*_at` turned into RFC 3339,
/// at any depth; the stored rows keep their milliseconds.
pub(crate) fn stored_times(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(name, v)| {
                    let v = match v.as_i64() {
                        Some(ms) if name.ends_with("_at") => Value::String(rfc3339(ms)),
                        _ => stored_times(v),
                    };
                    (name, v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(stored_times).collect()),
        other => other,
    }
}

/// Converts a list of records into their views.
pub(crate) fn views<T, V: From<T>>(records: Vec<T>) -> Vec<V> {
    records.into_iter().map(V::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stored_times_turn_into_rfc3339_and_nothing_else_changes() {
        let stored = json!([{"attempts": [{"attempt": 2, "status": 503,
            "started_at": 1_000, "finished_at": 1_500, "lease_ms": 30_000}]}]);
        assert_eq!(
            stored_times(stored),
            json!([{"attempts": [{"attempt": 2, "status": 503,
                "started_at": "1970-01-01T00:00:01+00:00",
                "finished_at": "1970-01-01T00:00:01.500+00:00", "lease_ms": 30_000}]}])
        );
    }
}
