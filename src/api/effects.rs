//! The outbox over HTTP: the owner's commit, the effects of a run, cancel.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::routing::{get, post};
use axum::{middleware, Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::error::{ApiError, Result};
use super::runs::{MoveResponse, OwnerFields, RunRef};
use super::{auth, ApiJson, Caller};
use crate::approval::GatePolicy;
use crate::clock::to_datetime;
use crate::ledger::{IdempotencyKey, Namespace, OwnerCall};
use crate::outbox::{Effect, EffectSpec, ExternalIdAt, NewEffect, RejectRule};
use crate::state::AppState;

pub(super) fn router(state: AppState) -> Router<AppState> {
    let owner = Router::new()
        .route("/v1/runs/commit", post(commit))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::workflow,
        ));
    let read = Router::new()
        .route("/v1/runs/effects", get(list))
        .route("/v1/effects/{id}/cancel", post(cancel))
        .route_layer(middleware::from_fn_with_state(
            state,
            auth::workflow_or_operator,
        ));
    owner.merge(read)
}

/// One intended HTTP write.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EffectBody {
    /// A declared operation.
    pub operation: String,
    /// What kind of effect; unique per run and target (`send_email`).
    pub effect_type: String,
    /// A configured target.
    pub target: String,
    /// HTTP method (default POST).
    pub method: Option<String>,
    /// Path under the target's base URL…
    pub path: Option<String>,
    /// …or a full URL inside it.
    pub url: Option<String>,
    /// Non-secret headers (credentials live in the target's config).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// JSON body.
    #[schema(value_type = Object)]
    pub body: Option<Value>,
    /// A 2xx whose body has `equals` at `pointer` is a business rejection.
    #[schema(value_type = Object)]
    pub reject: Option<RejectRule>,
    /// Where the target's id is: `{"header": "Location"}` or `{"pointer": "/id"}`.
    #[schema(value_type = Object)]
    pub external_id: Option<ExternalIdAt>,
    /// GET URL template (`{external_ref}`, `{idempotency_key}`) that tells
    /// whether an unknown effect happened.
    pub probe_url: Option<String>,
    /// Not before (RFC 3339).
    pub not_before: Option<String>,
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
    pub effects: Vec<EffectBody>,
}

/// Headers an effect may never carry: credentials, and the ones the
/// dispatcher sets itself.
const FORBIDDEN_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-oncegate-key",
    "x-oncegate-namespace",
    "x-oncegate-version",
    "x-correlation-id",
    "host",
    "content-length",
];

/// Which endpoint an effect arrives through: gated operations only through
/// the gate, ungated ones only through the commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// `POST /v1/runs/commit`.
    Commit,
    /// `POST /v1/runs/gate`.
    Gate,
}

impl EffectBody {
    pub(super) fn into_new(
        self,
        i: usize,
        app: &AppState,
        call: &OwnerCall,
        route: Route,
    ) -> Result<NewEffect> {
        let (namespace, key) = (call.namespace.as_str(), call.key.as_str());
        let field = |f: &str| format!("effects[{i}].{f}");
        let op = app.config.operation(&self.operation).ok_or_else(|| {
            ApiError::invalid(
                field("operation"),
                format!(
                    "operation {:?} is not declared in the config",
                    self.operation
                ),
            )
        })?;
        match (route, op.gate()) {
            (Route::Commit, Some(gate)) if gate != GatePolicy::None => {
                return Err(ApiError::Gated(format!(
                    "operation {:?} is gated ({}): send its effects through POST /v1/runs/gate",
                    op.name,
                    gate.as_str()
                )));
            }
            (Route::Gate, Some(GatePolicy::None)) => {
                return Err(ApiError::invalid(
                    field("operation"),
                    format!(
                        "operation {:?} has no gate: commit its effects with POST /v1/runs/commit",
                        op.name
                    ),
                ));
            }
            _ => {}
        }
        let target = app.config.target(&self.target).ok_or_else(|| {
            ApiError::invalid(
                field("target"),
                format!("no target is named {:?}", self.target),
            )
        })?;
        let ok_type = !self.effect_type.is_empty()
            && self.effect_type.len() <= 64
            && self
                .effect_type
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        if !ok_type {
            return Err(ApiError::invalid(
                field("effect_type"),
                "must be 1-64 letters, digits, '_', '.' or '-'",
            ));
        }
        let url = match (self.path, self.url) {
            (Some(path), None) => target
                .join(&path)
                .map_err(|e| ApiError::invalid(field("path"), e))?,
            (None, Some(url)) if target.allows(&url) => url,
            (None, Some(url)) => {
                return Err(ApiError::invalid(
                    field("url"),
                    format!("{url} is outside target {}", target.name),
                ))
            }
            _ => {
                return Err(ApiError::invalid(
                    field("path"),
                    "give path or url, not both",
                ))
            }
        };
        let method = self
            .method
            .unwrap_or_else(|| "POST".into())
            .to_ascii_uppercase();
        if !matches!(method.as_str(), "GET" | "POST" | "PUT" | "PATCH" | "DELETE") {
            return Err(ApiError::invalid(
                field("method"),
                "must be GET, POST, PUT, PATCH or DELETE",
            ));
        }
        let mut headers = BTreeMap::new();
        for (name, value) in self.headers {
            let lower = name.to_ascii_lowercase();
            let secret = target
                .secret_headers
                .keys()
                .any(|s| s.eq_ignore_ascii_case(&lower));
            if secret
                || FORBIDDEN_HEADERS.contains(&lower.as_str())
                || lower == target.idempotency_header.to_ascii_lowercase()
            {
                return Err(ApiError::invalid(
                    field("headers"),
                    format!("header {name:?} may not be set on an effect: credentials live only in the target's config"),
                ));
            }
            headers.insert(lower, value);
        }
        if let Some(probe) = &self.probe_url {
            let sample = probe
                .replace("{external_ref}", "x")
                .replace("{idempotency_key}", "x");
            if !target.allows(&sample) {
                return Err(ApiError::invalid(
                    field("probe_url"),
                    "must lie inside the target's base URL",
                ));
            }
        }
        let body = self.body.map(|b| b.to_string().into_bytes());
        if body.is_some() {
            headers
                .entry("content-type".into())
                .or_insert_with(|| "application/json".into());
        }
        let not_before = self
            .not_before
            .map(|t| chrono::DateTime::parse_from_rfc3339(&t).map(|d| d.timestamp_millis()))
            .transpose()
            .map_err(|e| {
                ApiError::invalid(field("not_before"), format!("not an RFC 3339 time: {e}"))
            })?;
        Ok(NewEffect {
            idempotency_key: op.key_for(namespace, key, &self.effect_type),
            operation: self.operation,
            effect_type: self.effect_type,
            target: self.target,
            method,
            url,
            headers,
            body,
            spec: EffectSpec {
                reject: self.reject,
                external_id: self.external_id,
                probe_url: self.probe_url,
            },
            not_before,
            role: crate::outbox::EffectRole::Act,
        })
    }
}

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
        (status = 409, description = "The lease lost the run, or the operation is gated", body = super::Problem),
    ))]
pub(super) async fn commit(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CommitBody>,
) -> Result<Json<CommitResponse>> {
    let fields = OwnerFields {
        namespace: body.namespace,
        key: body.key,
        lease: body.lease,
    };
    let call: OwnerCall = fields.into_call(&caller.subject)?;
    let effects = parse_effects(body.effects, &app, &call, Route::Commit)?;
    let moved = app
        .store
        .commit(&call, body.result.as_ref(), &effects)
        .await?;
    app.metrics.run_moved(&moved.run);
    if !effects.is_empty() {
        // Committed with its effects, not yet answered (chaos tests).
        crate::chaos::point("after_effect_insert");
        app.wake.notify_one();
    }
    let listed = app.store.effects_of(&call.namespace, &call.key).await?;
    Ok(Json(CommitResponse {
        run: moved.into(),
        effects: listed.into_iter().map(EffectView::from).collect(),
    }))
}

/// Checks and converts a request's effects; an effect type and target may
/// appear once.
pub(super) fn parse_effects(
    bodies: Vec<EffectBody>,
    app: &AppState,
    call: &OwnerCall,
    route: Route,
) -> Result<Vec<NewEffect>> {
    let mut effects = Vec::with_capacity(bodies.len());
    for (i, effect) in bodies.into_iter().enumerate() {
        let new = effect.into_new(i, app, call, route)?;
        if effects
            .iter()
            .any(|e: &NewEffect| e.effect_type == new.effect_type && e.target == new.target)
        {
            return Err(ApiError::invalid(
                format!("effects[{i}]"),
                "the same effect_type and target appear twice",
            ));
        }
        effects.push(new);
    }
    Ok(effects)
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
    #[schema(value_type = Vec<Object>)]
    pub history: Vec<crate::outbox::AttemptView>,
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
#[utoipa::path(get, path = "/v1/runs/effects", tag = "outbox", params(RunRef),
    security(("bearer" = [])),
    responses((status = 200, description = "The run's effects", body = [EffectView])))]
pub(super) async fn list(
    State(app): State<AppState>,
    Query(q): Query<RunRef>,
) -> Result<Json<Vec<EffectView>>> {
    let namespace = Namespace::parse(q.namespace)?;
    let key = IdempotencyKey::parse(q.key)?;
    let mut views = Vec::new();
    for effect in app.store.effects_of(&namespace, &key).await? {
        let history = app.store.attempts(&effect.id).await?;
        views.push(EffectView {
            history,
            ..EffectView::from(effect)
        });
    }
    Ok(Json(views))
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
    Path(id): Path<String>,
) -> Result<Json<EffectView>> {
    match app.store.cancel_effect(&id, &caller.subject).await? {
        Some(effect) => Ok(Json(effect.into())),
        None => match app.store.effect(&id).await? {
            Some(effect) => Err(ApiError::InFlight(format!(
                "effect {id} is {} and can no longer be cancelled",
                effect.state
            ))),
            None => Err(ApiError::NotFound(format!("no effect {id}"))),
        },
    }
}
