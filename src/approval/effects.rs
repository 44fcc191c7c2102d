//! Which effects an owner may queue, and through which door: every effect
//! belongs to a declared operation; an ungated operation's effects are
//! committed (`POST /v1/runs/commit`), a gated one's only through the gate
//! (`POST /v1/runs/gate`); each effect is then checked against its target
//! ([`EffectRequest::check`]) under its operation's idempotency key.

use super::{GatePolicy, OperationConfig};
use crate::ledger::OwnerCall;
use crate::outbox::effect_check::{EffectInvalid, EffectRequest};
use crate::outbox::{NewEffect, TargetConfig};

/// The door an effect arrives through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The owner commits ungated effects.
    Commit,
    /// The owner asks the gate for gated ones.
    Gate,
}

/// Why an owner's effects were refused; nothing was stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EffectRefused {
    /// A field does not hold.
    #[error(transparent)]
    Invalid(#[from] EffectInvalid),
    /// The operation is gated: its effects go through the gate.
    #[error("{0}")]
    Gated(String),
}

fn invalid(field: String, problem: String) -> EffectRefused {
    EffectRefused::Invalid(EffectInvalid { field, problem })
}

/// Checks and converts an owner's effects for `route`; an effect type and
/// target may appear once.
///
/// # Errors
/// [`EffectRefused`] for the first effect that does not hold.
pub fn check_effects(
    requests: Vec<EffectRequest>,
    operations: &[OperationConfig],
    targets: &[TargetConfig],
    call: &OwnerCall,
    route: Route,
) -> Result<Vec<NewEffect>, EffectRefused> {
    let mut effects: Vec<NewEffect> = Vec::with_capacity(requests.len());
    for (i, request) in requests.into_iter().enumerate() {
        let new = check_one(
            request,
            &format!("effects[{i}]"),
            operations,
            targets,
            call,
            route,
        )?;
        if effects
            .iter()
            .any(|e| e.effect_type == new.effect_type && e.target == new.target)
        {
            return Err(invalid(
                format!("effects[{i}]"),
                "the same effect_type and target appear twice".into(),
            ));
        }
        effects.push(new);
    }
    Ok(effects)
}

fn check_one(
    request: EffectRequest,
    at: &str,
    operations: &[OperationConfig],
    targets: &[TargetConfig],
    call: &OwnerCall,
    route: Route,
) -> Result<NewEffect, EffectRefused> {
    let field = |f: &str| format!("{at}.{f}");
    let op = operations
        .iter()
        .find(|o| o.name == request.operation)
        .ok_or_else(|| {
            invalid(
                field("operation"),
                format!(
                    "operation {:?} is not declared in the config",
                    request.operation
                ),
            )
        })?;
    match (route, op.gate()) {
        (Route::Commit, Some(gate)) if gate != GatePolicy::None => {
            return Err(EffectRefused::Gated(format!(
                "operation {:?} is gated ({}): send its effects through POST /v1/runs/gate",
                op.name,
                gate.as_str()
            )));
        }
        (Route::Gate, Some(GatePolicy::None)) => {
            return Err(invalid(
                field("operation"),
                format!(
                    "operation {:?} has no gate: commit its effects with POST /v1/runs/commit",
                    op.name
                ),
            ));
        }
        _ => {}
    }
    let target = targets
        .iter()
        .find(|t| t.name == request.target)
        .ok_or_else(|| {
            invalid(
                field("target"),
                format!("no target is named {:?}", request.target),
            )
        })?;
    let key = op.key_for(
        call.namespace.as_str(),
        call.key.as_str(),
        &request.effect_type,
    );
    Ok(request.check(at, target, key)?)
}
