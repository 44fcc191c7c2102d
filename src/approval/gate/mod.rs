//! The owner's side of a gate (DESIGN.md §5): model output recorded
//! against its schema ([`Gate::record_output`], in `output.rs`), and the
//! run gated under its operation's policy ([`Gate::gate`]): cleared by
//! policy (`act_with_window`, `approve_by_exception`), or sent to a person
//! with a new challenge (`human.rs`).

use serde_json::{json, Value};
use tokio::sync::Notify;

use super::port::ApprovalStore;
use super::{callback_effect, callback_for, secs_ms, Callback, Eligibility};
use super::{GatePolicy, OperationConfig};
use crate::clock::{Clock, Millis};
use crate::ledger::port::LedgerStore;
use crate::ledger::storage::StoreError;
use crate::ledger::{Moved, OwnerCall, RunState};
use crate::metrics::Metrics;
use crate::outbox::{NewEffect, TargetConfig};
use crate::validate::port::{OutputStore, StoredOutput};
use crate::validate::{OutputSchemas, Violation};

use super::server_key::ServerKey;

mod human;
mod output;

pub use output::{ModelOutput, OutputAccepted};

/// What the owner's gate calls need.
#[derive(Debug, Clone)]
pub struct Gate<'a> {
    /// Challenges, and runs cleared by policy.
    pub approvals: &'a dyn ApprovalStore,
    /// The runs (their metadata for the card).
    pub runs: &'a dyn LedgerStore,
    /// Model outputs.
    pub outputs: &'a dyn OutputStore,
    /// The declared operations and their gates.
    pub operations: &'a [OperationConfig],
    /// The configured targets (where a callback may point).
    pub targets: &'a [TargetConfig],
    /// The operations' output schemas.
    pub schemas: &'a OutputSchemas,
    /// The base of approval links (`server.public_base_url`).
    pub public_base: Option<String>,
    /// Gate, validation and run metrics.
    pub metrics: &'a Metrics,
    /// Challenge expiry and windows.
    pub clock: &'a dyn Clock,
    /// Wakes the dispatcher when a run is cleared by policy.
    pub wake: &'a Notify,
    /// Keys `approve_by_exception`'s human sample.
    pub sample: &'a ServerKey,
}

/// Why a gate call did nothing.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// A field of the request is wrong.
    #[error("{problem}")]
    Invalid {
        /// The field at fault.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// The operation requires validated output and the run has none.
    #[error("operation {0:?} requires validated model output: POST /v1/runs/output first")]
    OutputNotValidated(String),
    /// The output broke its operation's schema (it was recorded).
    #[error("the output does not satisfy the operation's schema ({} violations)", violations.len())]
    OutputInvalid {
        /// Each violation with its JSON path.
        violations: Vec<Violation>,
        /// Which attempt this was.
        attempt: i64,
        /// Further invalid outputs allowed before the run fails for good.
        repairs_left: i64,
        /// The repair bound was passed: the run is `failed_terminal`.
        exhausted: bool,
    },
    /// Something the config checks should have caught.
    #[error("{0}")]
    Misconfigured(&'static str),
    /// The store failed, or the lease lost the run.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl GateError {
    fn invalid(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

/// A gate as the owner asks for it (effects already checked for the gate).
#[derive(Debug, Clone)]
pub struct GateRequest {
    /// The proposed effects, all of one gated operation.
    pub effects: Vec<NewEffect>,
    /// Called through the outbox when the decision is made.
    pub callback_url: Option<String>,
    /// One line for the approver.
    pub summary: Option<String>,
}

/// What a gate did.
#[derive(Debug, Clone)]
pub struct Gated {
    /// `awaiting_human`, or `approved` when policy cleared the run.
    pub state: RunState,
    /// `human`, `auto` or `window`.
    pub decision: &'static str,
    /// The challenge's id (human decisions).
    pub challenge_id: Option<String>,
    /// The approval link, shown this once (human decisions).
    pub approval_url: Option<String>,
    /// When the challenge expires.
    pub expires_at: Option<Millis>,
    /// Why a person decides, or the rule set that cleared the run.
    pub reason: Option<String>,
    /// When the effects may be sent (act_with_window).
    pub not_before: Option<Millis>,
}

impl Gated {
    fn cleared(
        moved: &Moved,
        decision: &'static str,
        reason: Option<String>,
        not_before: Option<Millis>,
    ) -> Self {
        Self {
            state: moved.run.state,
            decision,
            challenge_id: None,
            approval_url: None,
            expires_at: None,
            reason,
            not_before,
        }
    }
}

impl Gate<'_> {
    /// Gates the owner's run under its operation's policy.
    ///
    /// # Errors
    /// [`GateError`]: mixed or undeclared operations, a callback outside
    /// every target, output not validated, a lost lease.
    pub async fn gate(&self, call: &OwnerCall, req: GateRequest) -> Result<Gated, GateError> {
        let mut effects = req.effects;
        let op = self.single_operation(&effects)?;
        let callback = match req.callback_url {
            Some(url) => Some(callback_for(self.targets, &url).ok_or_else(|| {
                GateError::invalid(
                    "callback_url",
                    "must lie inside a configured target (oncegate is no open relay)",
                )
            })?),
            None => None,
        };
        let output = self.validated_output(call, op).await?;
        let now = self.clock.now_ms();
        let eligibility = match op.gate() {
            Some(GatePolicy::ActWithWindow) => {
                let not_before = now + secs_ms(op.window_secs.unwrap_or(0));
                for e in &mut effects {
                    e.not_before = Some(e.not_before.map_or(not_before, |t| t.max(not_before)));
                }
                let detail = json!({ "policy": "act_with_window", "decision": "window",
                    "not_before": not_before, "effects": types(&effects) });
                let moved = self
                    .clear(call, effects, callback.as_ref(), "window", detail)
                    .await?;
                return Ok(Gated::cleared(&moved, "window", None, Some(not_before)));
            }
            Some(GatePolicy::ApproveByException) => {
                let rules = op.exception.as_ref().ok_or(GateError::Misconfigured(
                    "approve_by_exception without rules passed config checks",
                ))?;
                let out = output
                    .as_ref()
                    .map(|o| &o.output)
                    .ok_or(GateError::Misconfigured(
                        "approve_by_exception without an output schema",
                    ))?;
                match unjudged_effect(rules, out, &effects) {
                    Some(why) => Eligibility::RuleFailed(why),
                    None => {
                        rules.decide(out, call.namespace.as_str(), call.key.as_str(), self.sample)
                    }
                }
            }
            _ => Eligibility::RuleFailed(String::new()),
        };
        let reason = match eligibility {
            Eligibility::Auto => {
                let labels: Vec<String> = op
                    .exception
                    .iter()
                    .flat_map(|e| &e.rules)
                    .map(|r| r.label())
                    .collect();
                let detail = json!({ "policy": "approve_by_exception", "decision": "auto",
                    "rules_held": labels, "effects": types(&effects) });
                let moved = self
                    .clear(call, effects, callback.as_ref(), "auto", detail)
                    .await?;
                let reason = format!("all rules held: {}", labels.join(", "));
                return Ok(Gated::cleared(&moved, "auto", Some(reason), None));
            }
            Eligibility::Sampled => Some("eligible, but sampled for human review".to_owned()),
            Eligibility::RuleFailed(rule) if rule.is_empty() => None,
            Eligibility::RuleFailed(rule) => Some(format!("rule {rule:?} did not hold")),
        };
        let human = human::Human {
            op,
            effects,
            callback,
            output,
            summary: req.summary,
            reason,
        };
        self.human(call, human).await
    }

    /// The one gated operation every effect belongs to.
    fn single_operation(&self, effects: &[NewEffect]) -> Result<&OperationConfig, GateError> {
        let Some(first) = effects.first() else {
            return Err(GateError::invalid(
                "effects",
                "a gate needs the effects a person approves",
            ));
        };
        let name = &first.operation;
        if let Some(i) = effects.iter().position(|e| &e.operation != name) {
            return Err(GateError::invalid(
                format!("effects[{i}].operation"),
                "all effects of one gate must belong to one operation",
            ));
        }
        self.operations
            .iter()
            .find(|o| &o.name == name)
            .ok_or_else(|| GateError::invalid("effects[0].operation", "not declared"))
    }

    /// The run's latest output when the operation has a schema; it must be
    /// valid and for this operation.
    async fn validated_output(
        &self,
        call: &OwnerCall,
        op: &OperationConfig,
    ) -> Result<Option<StoredOutput>, GateError> {
        if op.output.is_none() {
            return Ok(None);
        }
        let latest = self
            .outputs
            .latest_output(&call.namespace, &call.key)
            .await?;
        match latest {
            Some(out) if out.valid && out.operation == op.name => Ok(Some(out)),
            _ => Err(GateError::OutputNotValidated(op.name.clone())),
        }
    }

    /// Clears the run by policy, with the callback told at once.
    async fn clear(
        &self,
        call: &OwnerCall,
        mut effects: Vec<NewEffect>,
        callback: Option<&Callback>,
        decision: &str,
        detail: Value,
    ) -> Result<Moved, GateError> {
        if let Some(cb) = callback {
            let (ns, key) = (call.namespace.as_str(), call.key.as_str());
            effects.push(callback_effect(ns, key, "policy", cb, decision, "approved"));
        }
        let moved = self
            .approvals
            .approve_by_policy(call, &effects, detail)
            .await?;
        self.metrics.gate_auto_acted(&effects[0].operation);
        self.metrics.run_moved(&moved.run);
        self.wake.notify_one();
        Ok(moved)
    }
}

fn types(effects: &[NewEffect]) -> Vec<&str> {
    effects.iter().map(|e| e.effect_type.as_str()).collect()
}

/// Why the rules, judged over the validated output, would not judge what
/// is sent: `approve_by_exception` acts on rules over validated fields
/// (DESIGN.md §5), and effect bodies are not validated, so a field a rule
/// judges that an effect sends must be the validated output's value at the
/// same pointer, and a body that is not JSON cannot be judged at all.
fn unjudged_effect(
    rules: &super::ExceptionPolicy,
    output: &Value,
    effects: &[NewEffect],
) -> Option<String> {
    for e in effects {
        let Some(raw) = &e.body else { continue };
        let Ok(body) = serde_json::from_slice::<Value>(raw) else {
            return Some(format!(
                "effect {} sends a body that is not JSON",
                e.effect_type
            ));
        };
        for rule in &rules.rules {
            let Some(sent) = body.pointer(&rule.pointer) else {
                continue;
            };
            if output.pointer(&rule.pointer) != Some(sent) {
                return Some(format!(
                    "{}: effect {} sends {sent}, not the validated output's value",
                    rule.label(),
                    e.effect_type
                ));
            }
        }
    }
    None
}
