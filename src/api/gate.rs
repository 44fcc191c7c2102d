//! Approval gates over HTTP for workflows: model output
//! (`POST /v1/runs/output`), the gate (`POST /v1/runs/gate`), and the
//! pending approvals (`GET /v1/approvals`).

use axum::extract::State;
use axum::routing::post;
use axum::{middleware, Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use super::effects::{parse_effects, EffectBody, Route};
use super::error::{ApiError, Result};
use super::runs::{optional_text, OwnerFields};
use super::{auth, ApiJson, Caller};
use crate::approval::{callback_effect, callback_for, first_challenge, Callback, Eligibility};
use crate::approval::{GatePolicy, OperationConfig};
use crate::clock::to_datetime;
use crate::ledger::{Moved, OwnerCall};
use crate::metrics::ValidationFailure;
use crate::outbox::NewEffect;
use crate::state::AppState;
use crate::validate::port::NewOutput;

pub(super) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/runs/output", post(output))
        .route("/v1/runs/gate", post(gate))
        .route_layer(middleware::from_fn_with_state(state, auth::workflow))
}

/// The model that produced an output.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelIdentity {
    /// `hosted`, `self_hosted`, `rule_based`, …
    pub provider_class: String,
    /// Model name.
    pub model: String,
    /// Model revision or version.
    pub revision: String,
}

/// `POST /v1/runs/output`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputBody {
    /// Provider or tenant.
    pub namespace: String,
    /// Business identity.
    pub key: String,
    /// The current lease.
    pub lease: String,
    /// The operation whose schema applies (default: the run's operation).
    pub operation: Option<String>,
    /// The model output.
    #[schema(value_type = Object)]
    pub output: Value,
    /// Which model drafted it.
    pub model: ModelIdentity,
}

/// The answer to a valid output.
#[derive(Debug, Serialize, ToSchema)]
pub struct OutputResponse {
    /// Always true (an invalid output is a 422).
    pub valid: bool,
    /// Which attempt this was.
    pub attempt: i64,
    /// The lease to present next (unchanged).
    pub lease: Option<String>,
}

/// Records model output after validating it against its operation's schema.
#[utoipa::path(post, path = "/v1/runs/output", tag = "approvals", request_body = OutputBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Valid and recorded", body = OutputResponse),
        (status = 400, description = "No schema for the operation, or a bad field", body = super::Problem),
        (status = 409, description = "The lease lost the run", body = super::Problem),
        (status = 422, description = "Invalid: each violation with its JSON path; past max_repairs the run is failed_terminal", body = super::Problem),
    ))]
pub(super) async fn output(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<OutputBody>,
) -> Result<Json<OutputResponse>> {
    let call = OwnerFields {
        namespace: body.namespace,
        key: body.key,
        lease: body.lease,
    }
    .into_call(&caller.subject)?;
    for (field, value) in [
        ("model.provider_class", &body.model.provider_class),
        ("model.model", &body.model.model),
        ("model.revision", &body.model.revision),
    ] {
        if value.is_empty() {
            return Err(ApiError::invalid(field, "must not be empty"));
        }
        optional_text(field, Some(value.clone()), 200)?;
    }
    let operation = match body.operation {
        Some(op) => op,
        None => app
            .store
            .get_run(&call.namespace, &call.key)
            .await?
            .and_then(|run| run.metadata.operation)
            .ok_or_else(|| {
                ApiError::invalid(
                    "operation",
                    "name the operation (the run's claim named none)",
                )
            })?,
    };
    let contract = app.schemas.contract(&operation).ok_or_else(|| {
        ApiError::invalid(
            "operation",
            format!("operation {operation:?} registers no output schema"),
        )
    })?;
    let violations = contract.violations(&body.output);
    let new = NewOutput {
        operation,
        output: body.output,
        violations: violations.clone(),
        provider_class: body.model.provider_class,
        model: body.model.model,
        revision: body.model.revision,
    };
    let recorded = app
        .store
        .record_output(&call, &new, contract.max_repairs)
        .await?;
    if !violations.is_empty() {
        let failure = if recorded.exhausted {
            app.metrics.run_moved(&recorded.moved.run);
            ValidationFailure::RepairsExhausted
        } else {
            ValidationFailure::Invalid
        };
        app.metrics.validation_failed(&new.operation, failure);
    }
    if violations.is_empty() {
        return Ok(Json(OutputResponse {
            valid: true,
            attempt: recorded.attempt,
            lease: recorded.moved.lease.map(|l| l.encode()),
        }));
    }
    let allowed = i64::from(contract.max_repairs) + 1;
    if recorded.exhausted {
        tracing::warn!(operation = %new.operation, attempts = recorded.attempt,
            "model output still invalid past max_repairs; the run failed for good");
    }
    Err(ApiError::OutputInvalid {
        violations,
        attempt: recorded.attempt,
        repairs_left: (allowed - recorded.attempt).max(0),
        exhausted: recorded.exhausted,
    })
}

/// `POST /v1/runs/gate`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GateBody {
    /// Provider or tenant.
    pub namespace: String,
    /// Business identity.
    pub key: String,
    /// The current lease.
    pub lease: String,
    /// The proposed effects, all of one gated operation.
    pub effects: Vec<EffectBody>,
    /// Called through the outbox when the decision is made (must lie inside
    /// a configured target, e.g. an n8n Wait node's resume URL).
    pub callback_url: Option<String>,
    /// One line for the approver: what is proposed and why.
    pub summary: Option<String>,
}

/// The answer to a gate.
#[derive(Debug, Serialize, ToSchema)]
pub struct GateResponse {
    /// `awaiting_human`, or `approved` when policy cleared the run.
    pub state: String,
    /// `human`, `auto` (approve_by_exception rules held) or `window` (act_with_window).
    pub decision: String,
    /// The challenge's id (human decisions).
    pub challenge_id: Option<String>,
    /// The approval link, shown this once (human decisions).
    pub approval_url: Option<String>,
    /// When the challenge expires (RFC 3339).
    pub expires_at: Option<String>,
    /// Why a person decides, or the rule set that cleared the run.
    pub reason: Option<String>,
    /// When the effects may be sent (act_with_window, RFC 3339).
    pub not_before: Option<String>,
}

/// Gates the owner's run under its operation's policy.
#[utoipa::path(post, path = "/v1/runs/gate", tag = "approvals", request_body = GateBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Awaiting a person, or cleared by policy", body = GateResponse),
        (status = 400, description = "Bad effect, ungated or mixed operations, callback outside every target", body = super::Problem),
        (status = 409, description = "The lease lost the run, or the output is not validated", body = super::Problem),
    ))]
pub(super) async fn gate(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<GateBody>,
) -> Result<Json<GateResponse>> {
    let call = OwnerFields {
        namespace: body.namespace,
        key: body.key,
        lease: body.lease,
    }
    .into_call(&caller.subject)?;
    let summary = optional_text("summary", body.summary, 500)?;
    if body.effects.is_empty() {
        return Err(ApiError::invalid(
            "effects",
            "a gate needs the effects a person approves",
        ));
    }
    let mut effects = parse_effects(body.effects, &app, &call, Route::Gate)?;
    let op = single_operation(&app, &effects)?;
    let callback = match body.callback_url {
        Some(url) => Some(callback_for(&app.config.targets, &url).ok_or_else(|| {
            ApiError::invalid(
                "callback_url",
                "must lie inside a configured target (oncegate is no open relay)",
            )
        })?),
        None => None,
    };
    let output = validated_output(&app, &call, op).await?;
    let now = app.clock.now_ms();
    let eligibility = match op.gate() {
        Some(GatePolicy::ActWithWindow) => {
            let not_before = now + crate::approval::secs_ms(op.window_secs.unwrap_or(0));
            for e in &mut effects {
                e.not_before = Some(e.not_before.map_or(not_before, |t| t.max(not_before)));
            }
            let detail = json!({ "policy": "act_with_window", "decision": "window",
                "not_before": not_before, "effects": types(&effects) });
            let moved = clear(&app, &call, effects, callback.as_ref(), "window", detail).await?;
            return Ok(Json(cleared(moved, "window", None, Some(not_before))));
        }
        Some(GatePolicy::ApproveByException) => {
            let rules = op.exception.as_ref().ok_or_else(|| {
                ApiError::Internal("approve_by_exception without rules passed config checks".into())
            })?;
            let out = output.as_ref().map(|o| &o.output).ok_or_else(|| {
                ApiError::Internal("approve_by_exception without an output schema".into())
            })?;
            rules.decide(out, call.namespace.as_str(), call.key.as_str())
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
            let moved = clear(&app, &call, effects, callback.as_ref(), "auto", detail).await?;
            return Ok(Json(cleared(
                moved,
                "auto",
                Some(format!("all rules held: {}", labels.join(", "))),
                None,
            )));
        }
        Eligibility::Sampled => Some("eligible, but sampled for human review".to_owned()),
        Eligibility::RuleFailed(rule) if rule.is_empty() => None,
        Eligibility::RuleFailed(rule) => Some(format!("rule {rule:?} did not hold")),
    };
    human(&app, &call, op, effects, callback, output, summary, reason).await
}

/// The one gated operation every effect belongs to.
fn single_operation<'a>(app: &'a AppState, effects: &[NewEffect]) -> Result<&'a OperationConfig> {
    let name = &effects[0].operation;
    if let Some(i) = effects.iter().position(|e| &e.operation != name) {
        return Err(ApiError::invalid(
            format!("effects[{i}].operation"),
            "all effects of one gate must belong to one operation",
        ));
    }
    app.config
        .operation(name)
        .ok_or_else(|| ApiError::invalid("effects[0].operation", "not declared"))
}

/// The run's latest output when the operation has a schema; it must be
/// valid and for this operation.
async fn validated_output(
    app: &AppState,
    call: &OwnerCall,
    op: &OperationConfig,
) -> Result<Option<crate::validate::port::StoredOutput>> {
    if op.output.is_none() {
        return Ok(None);
    }
    let latest = app.store.latest_output(&call.namespace, &call.key).await?;
    match latest {
        Some(out) if out.valid && out.operation == op.name => Ok(Some(out)),
        _ => Err(ApiError::Conflict {
            slug: "output-not-validated",
            detail: format!(
                "operation {:?} requires validated model output: POST /v1/runs/output first",
                op.name
            ),
        }),
    }
}

fn types(effects: &[NewEffect]) -> Vec<&str> {
    effects.iter().map(|e| e.effect_type.as_str()).collect()
}

/// Clears the run by policy, with the callback told at once.
async fn clear(
    app: &AppState,
    call: &OwnerCall,
    mut effects: Vec<NewEffect>,
    callback: Option<&Callback>,
    decision: &str,
    detail: Value,
) -> Result<Moved> {
    if let Some(cb) = callback {
        let (ns, key) = (call.namespace.as_str(), call.key.as_str());
        effects.push(callback_effect(ns, key, "policy", cb, decision, "approved"));
    }
    let moved = app.store.approve_by_policy(call, &effects, detail).await?;
    app.metrics.gate_auto_acted(&effects[0].operation);
    app.metrics.run_moved(&moved.run);
    app.wake.notify_one();
    Ok(moved)
}

fn cleared(
    moved: Moved,
    decision: &str,
    reason: Option<String>,
    not_before: Option<i64>,
) -> GateResponse {
    GateResponse {
        state: moved.run.state.to_string(),
        decision: decision.into(),
        challenge_id: None,
        approval_url: None,
        expires_at: None,
        reason,
        not_before: not_before.map(|t| to_datetime(t).to_rfc3339()),
    }
}

/// Sends the run to a person: `awaiting_human` with a new challenge.
#[allow(clippy::too_many_arguments)]
async fn human(
    app: &AppState,
    call: &OwnerCall,
    op: &OperationConfig,
    effects: Vec<NewEffect>,
    callback: Option<Callback>,
    output: Option<crate::validate::port::StoredOutput>,
    summary: Option<String>,
    reason: Option<String>,
) -> Result<Json<GateResponse>> {
    let base = app
        .config
        .server
        .public_base()
        .ok_or_else(|| ApiError::Internal("no public_base_url passed config checks".into()))?;
    let run = app.store.get_run(&call.namespace, &call.key).await?;
    let meta = run.as_ref().map(|r| &r.metadata);
    let card = json!({
        "summary": summary,
        "reason": reason,
        "policy": op.gate().map(GatePolicy::as_str),
        "source_url": meta.and_then(|m| m.source_url.clone()),
        "requested_by": meta.and_then(|m| m.requested_by.clone()),
        "workflow_version": meta.and_then(|m| m.workflow_version.clone()),
        "correlation_id": meta.and_then(|m| m.correlation_id.clone()),
        "output": output.as_ref().map(|o| o.output.clone()),
        "model": output.as_ref().map(|o| json!({
            "provider_class": o.provider_class, "model": o.model, "revision": o.revision })),
        "validation": output.as_ref().map(|o| json!({ "valid": o.valid, "attempt": o.attempt,
            "violations": o.violations })),
    });
    let now = app.clock.now_ms();
    let (challenge, secret) = first_challenge(op, effects, callback, card, now);
    let detail = json!({
        "challenge_id": challenge.id,
        "operation": op.name,
        "policy": op.gate().map(GatePolicy::as_str),
        "reason": reason,
        "effects": types(&challenge.effects),
        "expires_at": challenge.expires_at,
    });
    let moved = app.store.gate(call, &challenge, detail).await?;
    app.metrics.run_moved(&moved.run);
    Ok(Json(GateResponse {
        state: moved.run.state.to_string(),
        decision: "human".into(),
        challenge_id: Some(challenge.id.clone()),
        approval_url: Some(format!("{base}/approve/{}", secret.expose())),
        expires_at: Some(to_datetime(challenge.expires_at).to_rfc3339()),
        reason,
        not_before: None,
    }))
}
