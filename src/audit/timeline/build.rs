//! The timeline built from what the store holds about one key.

use serde_json::Value;

use super::{
    AttemptLine, ChainStatus, DecisionLine, EffectLine, EventLine, ModelLine, Processed, Sent,
    Step, Timeline,
};
use crate::audit::verify::Finding;
use crate::audit::AuditRecord;
use crate::clock::{to_datetime, Millis};
use crate::ledger::Run;
use crate::outbox::{AttemptView, Effect};

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
    /// The chain's first bad row, from [`crate::audit::check_one`].
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
                at: at(a.outcome.started_at),
                class: a.outcome.class.to_string(),
                status: a.outcome.status,
                error: a.outcome.error.clone(),
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
            entry: AuditEntry::unmoved("crm", "k", seq, kind, actor, detail, 1_000 * seq),
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
