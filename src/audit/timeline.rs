//! One key's history, arranged to answer the four audit questions: did we
//! process this key, did we send, who approved, which model drafted.
//!
//! Events are read by kind, generically: any `approval_*`, `gate`,
//! `replay*` or `resolve` event is a decision with its actor; any
//! `output_*` or `validation*` event is a model output with the provider,
//! model and revision its detail names. A kind added later shows up in the
//! raw event list at once, and in a section when its name fits.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::verify::Finding;
use super::AuditRecord;
use crate::clock::{to_datetime, Millis};
use crate::ledger::Run;
use crate::outbox::{AttemptView, Effect};

/// Did we process this key.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Processed {
    /// Whether a run exists for the key.
    pub known: bool,
    /// Its state now.
    pub state: Option<String>,
    /// Times it was claimed.
    pub claims: i64,
    /// When retention slimmed it to a tombstone (its history is archived).
    pub archived_at: Option<String>,
    /// Every state change, oldest first.
    pub states: Vec<Step>,
}

/// One audited move.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Step {
    /// Event sequence number.
    pub seq: i64,
    /// When (RFC 3339).
    pub at: String,
    /// Event kind (`claim`, `complete`, …).
    pub kind: String,
    /// Who caused it.
    pub actor: String,
    /// State before.
    pub from: Option<String>,
    /// State after.
    pub to: Option<String>,
}

/// Did we send.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Sent {
    /// Whether any effect reached its target at least once.
    pub any_sent: bool,
    /// Whether every effect completed.
    pub all_completed: bool,
    /// Each effect with its attempts.
    pub effects: Vec<EffectLine>,
}

/// One effect.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EffectLine {
    /// Effect id.
    pub id: String,
    /// Declared operation.
    pub operation: String,
    /// Effect type.
    pub effect_type: String,
    /// Target name.
    pub target: String,
    /// State now.
    pub state: String,
    /// The downstream idempotency key.
    pub idempotency_key: String,
    /// The target's id for what it created.
    pub external_ref: Option<String>,
    /// When it was first sent (RFC 3339).
    pub first_sent_at: Option<String>,
    /// Every attempt, in order.
    pub attempts: Vec<AttemptLine>,
}

/// One attempt (its evidence is at `GET /v1/runs/effects`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AttemptLine {
    /// 1-based.
    pub attempt: i64,
    /// When it started (RFC 3339).
    pub at: String,
    /// Outcome class.
    pub class: String,
    /// HTTP status.
    pub status: Option<i64>,
    /// Error text.
    pub error: Option<String>,
}

/// A decision by a person or an operator (gate, approval, replay, resolve).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DecisionLine {
    /// Event sequence number.
    pub seq: i64,
    /// When (RFC 3339).
    pub at: String,
    /// Event kind.
    pub kind: String,
    /// The token subject who acted.
    pub actor: String,
    /// The approver the event names (its `approver`, else the actor).
    pub approver: String,
    /// `approve`, `reject`, `expired`, `requested`, `replay`, or the detail's `decision`.
    pub decision: String,
    /// The event's detail.
    #[schema(value_type = Object)]
    pub detail: Value,
}

/// A recorded model output.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ModelLine {
    /// Event sequence number.
    pub seq: i64,
    /// When (RFC 3339).
    pub at: String,
    /// Event kind.
    pub kind: String,
    /// Provider class (`openai`, `anthropic`, …).
    pub provider: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// Model revision.
    pub revision: Option<String>,
    /// Whether the output validated.
    pub valid: Option<bool>,
    /// The event's detail.
    #[schema(value_type = Object)]
    pub detail: Value,
}

/// Whether the key's hash chain verifies.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChainStatus {
    /// True when no row is bad.
    pub ok: bool,
    /// Events present.
    pub length: i64,
    /// The run row's head sequence number.
    pub head_seq: Option<i64>,
    /// The run row's head hash.
    pub head: Option<String>,
    /// The first bad row, in words.
    pub problem: Option<String>,
}

/// One raw audit event with its chain links.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventLine {
    /// Sequence number.
    pub seq: i64,
    /// When (RFC 3339).
    pub at: String,
    /// Kind.
    pub kind: String,
    /// Actor.
    pub actor: String,
    /// State before.
    pub from_state: Option<String>,
    /// State after.
    pub to_state: Option<String>,
    /// Fencing version after.
    pub version: Option<i64>,
    /// Redacted detail.
    #[schema(value_type = Object)]
    pub detail: Value,
    /// Previous event's hash.
    pub prev_hash: Option<String>,
    /// This event's hash.
    pub hash: String,
    /// False from the first bad row on.
    pub chain_ok: bool,
}

/// The whole answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Timeline {
    /// Namespace.
    pub namespace: String,
    /// Key.
    pub key: String,
    /// Did we process this key.
    pub processed: Processed,
    /// Did we send.
    pub sent: Sent,
    /// Who approved (and every other human decision).
    pub approvals: Vec<DecisionLine>,
    /// Which model drafted.
    pub model_outputs: Vec<ModelLine>,
    /// The hash chain's status.
    pub chain: ChainStatus,
    /// Every event, oldest first.
    pub events: Vec<EventLine>,
}

/// What the timeline is built from.
#[derive(Debug)]
pub struct Material {
    /// Namespace asked for.
    pub namespace: String,
    /// Key asked for.
    pub key: String,
    /// The run, if any.
    pub run: Option<Run>,
    /// The run row's head (seq, hash).
    pub head: Option<(i64, Option<String>)>,
    /// Effects with their attempts.
    pub effects: Vec<(Effect, Vec<AttemptView>)>,
    /// Events in sequence order.
    pub events: Vec<AuditRecord>,
    /// The chain's first bad row, from [`super::verify::check_one`].
    pub problem: Option<Finding>,
}

fn at(ms: Millis) -> String {
    to_datetime(ms).to_rfc3339()
}

fn text(detail: &Value, names: &[&str]) -> Option<String> {
    names.iter().find_map(|n| match detail.get(*n)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    })
}

/// Arranges the material into the four answers and the raw list.
pub fn build(m: Material) -> Timeline {
    let bad_from = m.problem.as_ref().and_then(|f| f.row).unwrap_or(i64::MAX);
    let chain_ok = m.problem.is_none();
    let events: Vec<EventLine> = m
        .events
        .iter()
        .map(|r| event_line(r, !chain_ok && r.entry.seq >= bad_from))
        .collect();
    let states = m
        .events
        .iter()
        .filter(|r| r.entry.to_state.is_some())
        .map(|r| Step {
            seq: r.entry.seq,
            at: at(r.entry.created_at),
            kind: r.entry.kind.clone(),
            actor: r.entry.actor.clone(),
            from: r.entry.from_state.clone(),
            to: r.entry.to_state.clone(),
        })
        .collect();
    let effects: Vec<EffectLine> = m.effects.iter().map(|(e, a)| effect_line(e, a)).collect();
    Timeline {
        processed: Processed {
            known: m.run.is_some(),
            state: m.run.as_ref().map(|r| r.state.as_str().to_owned()),
            claims: m.run.as_ref().map_or(0, |r| r.attempts),
            archived_at: m.run.as_ref().and_then(|r| r.archived_at).map(at),
            states,
        },
        sent: Sent {
            any_sent: effects.iter().any(|e| e.first_sent_at.is_some()),
            all_completed: !effects.is_empty() && effects.iter().all(|e| e.state == "completed"),
            effects,
        },
        approvals: m.events.iter().filter_map(decision_line).collect(),
        model_outputs: m.events.iter().filter_map(model_line).collect(),
        chain: ChainStatus {
            ok: chain_ok,
            length: m.events.len() as i64,
            head_seq: m.head.as_ref().map(|h| h.0),
            head: m.head.and_then(|h| h.1),
            problem: m.problem.map(|f| f.to_string()),
        },
        events,
        namespace: m.namespace,
        key: m.key,
    }
}

fn event_line(r: &AuditRecord, bad: bool) -> EventLine {
    EventLine {
        seq: r.entry.seq,
        at: at(r.entry.created_at),
        kind: r.entry.kind.clone(),
        actor: r.entry.actor.clone(),
        from_state: r.entry.from_state.clone(),
        to_state: r.entry.to_state.clone(),
        version: r.entry.version,
        detail: r.entry.detail.clone(),
        prev_hash: r.prev_hash.clone(),
        hash: r.hash.clone(),
        chain_ok: !bad,
    }
}

fn effect_line(e: &Effect, attempts: &[AttemptView]) -> EffectLine {
    EffectLine {
        id: e.id.clone(),
        operation: e.new.operation.clone(),
        effect_type: e.new.effect_type.clone(),
        target: e.new.target.clone(),
        state: e.state.as_str().into(),
        idempotency_key: e.new.idempotency_key.clone(),
        external_ref: e.external_ref.clone(),
        first_sent_at: e.first_sent_at.map(at),
        attempts: attempts
            .iter()
            .map(|a| AttemptLine {
                attempt: a.attempt,
                at: at(a.started_at),
                class: a.class.to_string(),
                status: a.status,
                error: a.error.clone(),
            })
            .collect(),
    }
}

fn decision_line(r: &AuditRecord) -> Option<DecisionLine> {
    let kind = r.entry.kind.as_str();
    let by_kind = match kind {
        "approval_granted" | "approval_consumed" => "approve",
        "approval_rejected" => "reject",
        "approval_expired" => "expired",
        "gate" => "requested",
        k if k.starts_with("replay") => "replay",
        "resolve" => "resolve",
        k if k.starts_with("approval") => k,
        _ => return None,
    };
    let d = &r.entry.detail;
    Some(DecisionLine {
        seq: r.entry.seq,
        at: at(r.entry.created_at),
        kind: kind.into(),
        actor: r.entry.actor.clone(),
        approver: text(d, &["approver"]).unwrap_or_else(|| r.entry.actor.clone()),
        decision: text(d, &["decision", "resolution"]).unwrap_or_else(|| by_kind.into()),
        detail: d.clone(),
    })
}

fn model_line(r: &AuditRecord) -> Option<ModelLine> {
    let kind = r.entry.kind.as_str();
    if !(kind.starts_with("output_") || kind.starts_with("validation")) {
        return None;
    }
    let d = &r.entry.detail;
    let model = d.get("model").filter(|m| m.is_object()).unwrap_or(d);
    Some(ModelLine {
        seq: r.entry.seq,
        at: at(r.entry.created_at),
        kind: kind.into(),
        // The output contract records `provider_class`.
        provider: text(model, &["model_provider", "provider", "provider_class"]),
        model: text(model, &["model", "name"]),
        revision: text(model, &["model_revision", "revision"]),
        valid: d.get("valid").and_then(Value::as_bool),
        detail: d.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::AuditEntry;
    use serde_json::json;

    fn record(seq: i64, kind: &str, actor: &str, detail: Value) -> AuditRecord {
        AuditRecord {
            entry: AuditEntry {
                namespace: "crm".into(),
                key: "k".into(),
                seq,
                kind: kind.into(),
                actor: actor.into(),
                from_state: None,
                to_state: None,
                version: None,
                detail,
                created_at: 1_000 * seq,
            },
            prev_hash: None,
            hash: format!("h{seq}"),
        }
    }

    #[test]
    fn decisions_and_models_are_read_by_kind() {
        let events = vec![
            record(
                1,
                "output_recorded",
                "n8n",
                json!({"model_provider": "openai", "model": "gpt-x", "model_revision": "2024-05", "valid": true}),
            ),
            record(
                2,
                "approval_granted",
                "alice",
                json!({"approver": "alice", "decision": "approve"}),
            ),
            record(3, "approval_rejected", "bob", json!({})),
            record(4, "renew", "n8n", json!({})),
        ];
        let t = build(Material {
            namespace: "crm".into(),
            key: "k".into(),
            run: None,
            head: None,
            effects: vec![],
            events,
            problem: None,
        });
        assert_eq!(t.model_outputs.len(), 1);
        assert_eq!(t.model_outputs[0].model.as_deref(), Some("gpt-x"));
        assert_eq!(t.model_outputs[0].revision.as_deref(), Some("2024-05"));
        assert_eq!(t.approvals.len(), 2);
        assert_eq!(t.approvals[0].approver, "alice");
        assert_eq!(t.approvals[1].decision, "reject");
        assert_eq!(t.approvals[1].approver, "bob");
        assert!(t.chain.ok && !t.processed.known && !t.sent.any_sent);
    }
}
