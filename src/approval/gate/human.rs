//! A gated run sent to a person: `awaiting_human` with a new challenge,
//! its card (what the person sees besides the run) frozen as of the gate.

use serde_json::json;

use super::{types, Gate, GateError, Gated};
use crate::approval::{first_challenge, Callback, GatePolicy, OperationConfig};
use crate::ledger::OwnerCall;
use crate::outbox::NewEffect;
use crate::validate::port::StoredOutput;

/// What a person is asked to decide.
pub(super) struct Human<'o> {
    pub op: &'o OperationConfig,
    pub effects: Vec<NewEffect>,
    pub callback: Option<Callback>,
    pub output: Option<StoredOutput>,
    pub summary: Option<String>,
    pub reason: Option<String>,
}

impl Gate<'_> {
    /// Sends the run to a person: `awaiting_human` with a new challenge.
    pub(super) async fn human(&self, call: &OwnerCall, h: Human<'_>) -> Result<Gated, GateError> {
        let base = self.public_base.as_deref().ok_or(GateError::Misconfigured(
            "no public_base_url passed config checks",
        ))?;
        let run = self.runs.get_run(&call.namespace, &call.key).await?;
        let meta = run.as_ref().map(|r| &r.metadata);
        let (op, output) = (h.op, h.output.as_ref());
        let card = json!({
            "summary": h.summary,
            "reason": h.reason,
            "policy": op.gate().map(GatePolicy::as_str),
            "source_url": meta.and_then(|m| m.source_url.clone()),
            "requested_by": meta.and_then(|m| m.requested_by.clone()),
            "workflow_version": meta.and_then(|m| m.workflow_version.clone()),
            "correlation_id": meta.and_then(|m| m.correlation_id.clone()),
            "output": output.map(|o| o.output.clone()),
            "model": output.map(|o| json!({
                "provider_class": o.provider_class, "model": o.model, "revision": o.revision })),
            "validation": output.map(|o| json!({ "valid": o.valid, "attempt": o.attempt,
                "violations": o.violations })),
        });
        let now = self.clock.now_ms();
        let (challenge, secret) = first_challenge(op, h.effects, h.callback, card, now);
        let detail = json!({
            "challenge_id": challenge.id,
            "operation": op.name,
            "policy": op.gate().map(GatePolicy::as_str),
            "reason": h.reason,
            "effects": types(&challenge.effects),
            "expires_at": challenge.expires_at,
        });
        let moved = self.approvals.gate(call, &challenge, detail).await?;
        self.metrics.run_moved(&moved.run);
        Ok(Gated {
            state: moved.run.state,
            decision: "human",
            challenge_id: Some(challenge.id.clone()),
            approval_url: Some(format!("{base}/approve/{}", secret.expose())),
            expires_at: Some(challenge.expires_at),
            reason: h.reason,
            not_before: None,
        })
    }
}
