//! The outbox over HTTP: the owner's commit, the effects of a run, cancel.

use crate::api::auth::Scoped;
use crate::api::PathId;
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::access;
use super::error::Result;
use super::runs::{optional_text, owner_call, MoveResponse, RunRef};
use super::{auth, ApiJson, Caller};
use crate::approval::effects::check_effects;
use crate::clock::to_datetime;
use crate::ledger::OwnerCall;
use crate::outbox::effect_check::EffectRequest;
use crate::outbox::{Effect, NewEffect};
use crate::state::AppState;

pub(super) fn router(state: AppState) -> Router<AppState> {
    let owner = Router::new()
        .route("/v1/runs/commit", post(commit))
        .only(state.clone(), auth::WORKFLOW);
    let read = Router::new()
        .route("/v1/runs/effects", get(list))
        .route("/v1/effects/{id}/cancel", post(cancel))
        .only(state, auth::WORKFLOW_OR_OPERATOR);
    owner.merge(read)
}

/// `POST /v1/runs/commit`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitBody {
    /// Provider or tenant.
    pub namespace: String,
    /// Business identity.
    pub key: String,
    /// The current lease.
    pub lease: String,
    /// The result duplicates will receive.
    pub result: Option<Value>,
    /// The effects to queue (none: the run completes now).
    #[serde(default)]
    pub effects: Vec<EffectRequest>,
    /// The version of the payload schema the workflow built these effects
    /// for (at most 64 characters); recorded on each effect, and shown on
    /// its dead letter so a fix can be matched to the shape it corrects.
    pub schema_version: Option<String>,
}

/// Which endpoint an effect arrives through (gated operations only through
/// the gate, ungated ones only through the commit).
pub(super) use crate::approval::effects::Route;

/// The answer to a commit.
#[derive(Debug, Serialize, ToSchema)]
pub struct CommitResponse {
    /// The run after the move.
    #[serde(flatten)]
    pub run: MoveResponse,
    /// The run's effects (including any queued earlier).
    pub effects: Vec<EffectView>,
}

/// The owner commits its decision: effects queued, run `approved` (or
/// `completed` with no effects), in one transaction.
#[utoipa::path(post, path = "/v1/runs/commit", tag = "outbox", request_body = CommitBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Committed", body = CommitResponse),
        (status = 400, description = "Bad effect: undeclared operation, unknown target, URL outside the allow-list, credential header; nothing stored", body = super::Problem),
        (status = 403, description = "The run's namespace is outside the token's namespaces, or belongs to a webhook source", body = super::Problem),
        (status = 409, description = "The lease lost the run, or the operation is gated", body = super::Problem),
    ))]
pub(super) async fn commit(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CommitBody>,
) -> Result<Json<CommitResponse>> {
    let call = owner_call(&app, &caller, body.namespace, body.key, &body.lease)?;
    access::sql_tier(&app, &call.namespace, "effects")?;
    let schema_version = optional_text("schema_version", body.schema_version, 64)?;
    let mut effects = parse_effects(body.effects, &app, &call, Route::Commit)?;
    for effect in &mut effects {
        effect.schema_version.clone_from(&schema_version);
    }
    let committed = app
        .outbox()
        .commit(&call, body.result.as_ref(), &effects)
        .await?;
    Ok(Json(CommitResponse {
        run: committed.moved.into(),
        effects: committed
            .effects
            .into_iter()
            .map(EffectView::from)
            .collect(),
    }))
}

/// Checks and converts a request's effects for `route`
/// ([`check_effects`]).
pub(super) fn parse_effects(
    requests: Vec<EffectRequest>,
    app: &AppState,
    call: &OwnerCall,
    route: Route,
) -> Result<Vec<NewEffect>> {
    Ok(check_effects(
        requests,
        &app.config.operations,
        &app.config.targets,
        call,
        route,
    )?)
}

/// An effect as the API shows it (never its body or credentials).
#[derive(Debug, Serialize, ToSchema)]
pub struct EffectView {
    /// Stable id.
    pub id: String,
    /// Operation.
    pub operation: String,
    /// Effect type.
    pub effect_type: String,
    /// Target.
    pub target: String,
    /// Method.
    pub method: String,
    /// URL.
    pub url: String,
    /// Downstream idempotency key.
    pub idempotency_key: String,
    /// `pending`, `sending`, `completed`, `unknown`, `failed`, `cancelled`.
    pub state: String,
    /// Attempts sent.
    pub attempts: i64,
    /// Next attempt due (RFC 3339).
    pub next_attempt_at: String,
    /// The target's id for it.
    pub external_ref: Option<String>,
    /// Last HTTP status.
    pub last_status: Option<i64>,
    /// Last outcome class.
    pub last_class: Option<String>,
    /// Last error.
    pub last_error: Option<String>,
    /// Attempt history (listing only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<super::records::AttemptItem>,
}

impl From<Effect> for EffectView {
    fn from(e: Effect) -> Self {
        Self {
            id: e.id,
            operation: e.new.operation,
            effect_type: e.new.effect_type,
            target: e.new.target,
            method: e.new.method,
            url: e.new.url,
            idempotency_key: e.new.idempotency_key,
            state: e.state.to_string(),
            attempts: e.attempts,
            next_attempt_at: to_datetime(e.next_attempt_at).to_rfc3339(),
            external_ref: e.external_ref,
            last_status: e.last_status,
            last_class: e.last_class.map(|c| c.to_string()),
            last_error: e.last_error,
            history: Vec::new(),
        }
    }
}

/// A run's effects with their attempts.
#[utoipa::path(get, path = "/v1/runs/effects", tag = "outbox", operation_id = "list_effects", params(RunRef),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The run's effects", body = [EffectView]),
        (status = 403, description = "The run's namespace is outside the token's namespaces", body = super::Problem),
    ))]
pub(super) async fn list(
    State(app): State<AppState>,
    caller: Caller,
    crate::api::ApiQuery(query): crate::api::ApiQuery<RunRef>,
) -> Result<Json<Vec<EffectView>>> {
    let (namespace, key) = query.parse(&app, &caller)?;
    access::sql_tier(&app, &namespace, "effects")?;
    let effects = app.outbox().effects(&namespace, &key).await?;
    Ok(Json(
        effects
            .into_iter()
            .map(|(effect, history)| EffectView {
                history: super::records::views(history),
                ..EffectView::from(effect)
            })
            .collect(),
    ))
}

/// Cancels an effect that is still pending.
#[utoipa::path(post, path = "/v1/effects/{id}/cancel", tag = "outbox",
    params(("id" = String, Path, description = "Effect id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Cancelled", body = EffectView),
        (status = 409, description = "Not pending any more", body = super::Problem),
        (status = 404, description = "No such effect", body = super::Problem),
    ))]
pub(super) async fn cancel(
    State(app): State<AppState>,
    caller: Caller,
    PathId(id): PathId,
) -> Result<Json<EffectView>> {
    let effect = app.outbox().cancel(&id, &caller).await?;
    Ok(Json(effect.into()))
}
