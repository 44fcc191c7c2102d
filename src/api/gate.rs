//! Approval gates over HTTP for workflows: model output
//! (`POST /v1/runs/output`), the gate (`POST /v1/runs/gate`), and the
//! pending approvals (`GET /v1/approvals`). The use cases are
//! `approval::gate`'s; these handlers parse and map.

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::access;
use super::effects::{parse_effects, Route};
use super::error::{ApiError, Result};
use super::runs::{optional_text, owner_call};
use super::{auth, ApiJson, Caller};
use crate::api::auth::Scoped;
use crate::approval::gate::{GateRequest, ModelOutput};
use crate::clock::to_datetime;
use crate::outbox::effect_check::EffectRequest;
use crate::state::AppState;

pub(super) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/runs/output", post(output))
        .route("/v1/runs/gate", post(gate))
        .only(state, auth::WORKFLOW)
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
        (status = 403, description = "The run's namespace is outside the token's namespaces, or belongs to a webhook source", body = super::Problem),
        (status = 409, description = "The lease lost the run", body = super::Problem),
        (status = 422, description = "Invalid: each violation with its JSON path; past max_repairs the run is failed_terminal", body = super::Problem),
    ))]
pub(super) async fn output(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<OutputBody>,
) -> Result<Json<OutputResponse>> {
    let call = owner_call(&app, &caller, body.namespace, body.key, &body.lease)?;
    access::sql_tier(
        &app,
        &call.namespace,
        "the AI output contract and its effects",
    )?;
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
    let out = ModelOutput {
        operation: body.operation,
        output: body.output,
        provider_class: body.model.provider_class,
        model: body.model.model,
        revision: body.model.revision,
    };
    let accepted = app.gate().record_output(&call, out).await?;
    Ok(Json(OutputResponse {
        valid: true,
        attempt: accepted.attempt,
        lease: accepted.lease.map(|l| l.encode()),
    }))
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
    pub effects: Vec<EffectRequest>,
    /// Called through the outbox when the decision is made (must lie inside
    /// a configured target, e.g. an n8n Wait node's resume URL).
    pub callback_url: Option<String>,
    /// One line for the approver: what is proposed and why.
    pub summary: Option<String>,
    /// The version of the payload schema the workflow built these effects
    /// for (at most 64 characters); recorded on each effect.
    pub schema_version: Option<String>,
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
        (status = 403, description = "The run's namespace is outside the token's namespaces, or belongs to a webhook source", body = super::Problem),
        (status = 409, description = "The lease lost the run, or the output is not validated", body = super::Problem),
    ))]
pub(super) async fn gate(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<GateBody>,
) -> Result<Json<GateResponse>> {
    let call = owner_call(&app, &caller, body.namespace, body.key, &body.lease)?;
    access::sql_tier(&app, &call.namespace, "approval gates")?;
    let summary = optional_text("summary", body.summary, 500)?;
    let schema_version = optional_text("schema_version", body.schema_version, 64)?;
    let mut effects = parse_effects(body.effects, &app, &call, Route::Gate)?;
    for effect in &mut effects {
        effect.schema_version.clone_from(&schema_version);
    }
    let request = GateRequest {
        effects,
        callback_url: body.callback_url,
        summary,
    };
    let gated = app.gate().gate(&call, request).await?;
    let rfc3339 = |t: i64| to_datetime(t).to_rfc3339();
    Ok(Json(GateResponse {
        state: gated.state.to_string(),
        decision: gated.decision.into(),
        challenge_id: gated.challenge_id,
        approval_url: gated.approval_url,
        expires_at: gated.expires_at.map(rfc3339),
        reason: gated.reason,
        not_before: gated.not_before.map(rfc3339),
    }))
}
