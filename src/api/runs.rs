//! Runs: the owner's moves (`renew`, `complete`, `fail`) and the read.
//!
//! Every owner call names the run and presents its `lease`; the store's
//! compare-and-set decides. A lease that lost the run gets 409 with the
//! run's current state, and the caller must not act.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::access::{self, Access};
use super::error::{ApiError, Result};
use super::{auth, ApiJson, Caller};
use crate::api::auth::Scoped;
use crate::clock::to_datetime;
use crate::ledger::{IdempotencyKey, Lease, Moved, Namespace, OwnerCall, OwnerMove, Run, RunState};
use crate::state::AppState;
use crate::tokens::Principal;

pub(super) fn router(state: AppState) -> Router<AppState> {
    let owner = Router::new()
        .route("/v1/runs/renew", post(renew))
        .route("/v1/runs/complete", post(complete))
        .route("/v1/runs/fail", post(fail))
        .only(state.clone(), auth::WORKFLOW);
    let read = Router::new()
        .route("/v1/runs", get(get_run))
        .only(state, auth::WORKFLOW_OR_OPERATOR);
    owner.merge(read)
}

/// Names a run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RunRef {
    /// Provider or tenant.
    pub namespace: String,
    /// Business identity.
    pub key: String,
}

impl RunRef {
    /// The run identity of a look-up's query string; a malformed query or
    /// identity is a 400 naming what is wrong.
    ///
    /// # Errors
    /// [`ApiError::Invalid`]; [`ApiError::NamespaceRefused`] when
    /// `caller`'s namespaces do not reach the run's.
    pub(super) fn parse(
        self,
        app: &AppState,
        caller: &Principal,
    ) -> Result<(Namespace, IdempotencyKey)> {
        Ok((
            access::namespace(app, caller, self.namespace, Access::Read)?,
            IdempotencyKey::parse(self.key)?,
        ))
    }
}

/// Checks an optional free-text field: at most `max` bytes, no control characters.
///
/// # Errors
/// [`ApiError::Invalid`] naming the field.
pub(super) fn optional_text(
    field: &str,
    value: Option<String>,
    max: usize,
) -> Result<Option<String>> {
    let Some(value) = value else { return Ok(None) };
    if value.len() > max {
        return Err(ApiError::invalid(
            field,
            format!("{field} is longer than {max} bytes"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            field,
            format!("{field} must not hold control characters"),
        ));
    }
    Ok(Some(value))
}

pub(super) use crate::ledger::service::sanitise_error;

/// The owner call of a body's identity and lease, parsed; also records
/// the run into the request's span.
pub(super) fn owner_call(
    app: &AppState,
    caller: &Principal,
    namespace: String,
    key: String,
    lease: &str,
) -> Result<OwnerCall> {
    let call = OwnerCall {
        namespace: access::namespace(app, caller, namespace, Access::Act)?,
        key: IdempotencyKey::parse(key)?,
        lease: Lease::decode(lease)?,
        actor: caller.subject.clone(),
    };
    super::telemetry::record_run(
        call.namespace.as_str(),
        call.key.as_str(),
        Some(call.lease.version.get()),
    );
    Ok(call)
}

/// `POST /v1/runs/renew`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenewBody {
    /// Provider or tenant.
    pub namespace: String,
    /// Business identity.
    pub key: String,
    /// The current lease.
    pub lease: String,
    /// New lease length from now, in milliseconds (default from the config).
    pub lease_ms: Option<i64>,
}

/// `POST /v1/runs/complete`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteBody {
    /// Provider or tenant.
    pub namespace: String,
    /// Business identity.
    pub key: String,
    /// The current lease.
    pub lease: String,
    /// The result duplicates will receive.
    pub result: Option<Value>,
}

/// `POST /v1/runs/fail`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FailBody {
    /// Provider or tenant.
    pub namespace: String,
    /// Business identity.
    pub key: String,
    /// The current lease.
    pub lease: String,
    /// True: a later claim with the same payload may retry. False: final.
    pub retryable: bool,
    /// What went wrong (no secrets; stored, shown to operators).
    pub error: String,
}

/// The answer to an owner call.
#[derive(Debug, Serialize, ToSchema)]
pub struct MoveResponse {
    /// Provider or tenant.
    pub namespace: String,
    /// Business identity.
    pub key: String,
    /// The run's state after the move.
    #[schema(value_type = String)]
    pub state: RunState,
    /// The fencing version after the move.
    pub version: i64,
    /// The lease to present next, while the run stays `processing`.
    pub lease: Option<String>,
    /// When that lease ends (RFC 3339).
    pub lease_expires_at: Option<String>,
}

impl From<Moved> for MoveResponse {
    fn from(moved: Moved) -> Self {
        let run = moved.run;
        Self {
            namespace: run.namespace.to_string(),
            key: run.key.to_string(),
            state: run.state,
            version: run.version.get(),
            lease: moved.lease.map(|l| l.encode()),
            lease_expires_at: moved
                .lease
                .and(run.lease_expires_at)
                .map(|at| to_datetime(at).to_rfc3339()),
        }
    }
}

/// Extends the caller's lease, capped by the maximum lease life.
#[utoipa::path(post, path = "/v1/runs/renew", tag = "ledger", request_body = RenewBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Renewed; present the new lease next", body = MoveResponse),
        (status = 400, description = "Malformed request", body = super::Problem),
        (status = 403, description = "The run's namespace is outside the token's namespaces, or belongs to a webhook source", body = super::Problem),
        (status = 409, description = "The lease lost the run; do not act", body = super::Problem),
        (status = 503, description = "The database, or Redis for a Redis-tier namespace, is unavailable: nothing was accepted; retry after Retry-After", body = super::Problem),
    ))]
pub(super) async fn renew(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<RenewBody>,
) -> Result<Json<MoveResponse>> {
    let ledger = app.ledger();
    let lease = ledger.lease(body.lease_ms)?;
    let call = owner_call(&app, &caller, body.namespace, body.key, &body.lease)?;
    Ok(Json(ledger.renew(&call, lease).await?.into()))
}

/// Completes the run with the result duplicates will receive.
#[utoipa::path(post, path = "/v1/runs/complete", tag = "ledger", request_body = CompleteBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Completed", body = MoveResponse),
        (status = 400, description = "Malformed request", body = super::Problem),
        (status = 403, description = "The run's namespace is outside the token's namespaces, or belongs to a webhook source", body = super::Problem),
        (status = 409, description = "The lease lost the run", body = super::Problem),
        (status = 503, description = "The database, or Redis for a Redis-tier namespace, is unavailable: nothing was accepted; retry after Retry-After", body = super::Problem),
    ))]
pub(super) async fn complete(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CompleteBody>,
) -> Result<Json<MoveResponse>> {
    let call = owner_call(&app, &caller, body.namespace, body.key, &body.lease)?;
    let complete = OwnerMove::Complete {
        result: body.result,
    };
    Ok(Json(app.ledger().finish(&call, &complete).await?.into()))
}

/// Fails the run, retryably (a later claim may try again) or for good.
#[utoipa::path(post, path = "/v1/runs/fail", tag = "ledger", request_body = FailBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Failed", body = MoveResponse),
        (status = 400, description = "Malformed request", body = super::Problem),
        (status = 403, description = "The run's namespace is outside the token's namespaces, or belongs to a webhook source", body = super::Problem),
        (status = 409, description = "The lease lost the run", body = super::Problem),
        (status = 503, description = "The database, or Redis for a Redis-tier namespace, is unavailable: nothing was accepted; retry after Retry-After", body = super::Problem),
    ))]
pub(super) async fn fail(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<FailBody>,
) -> Result<Json<MoveResponse>> {
    if body.error.trim().is_empty() {
        return Err(ApiError::invalid(
            "error",
            "describe the failure (no secrets)",
        ));
    }
    let error = sanitise_error(&body.error);
    let mv = if body.retryable {
        OwnerMove::FailRetryable { error }
    } else {
        OwnerMove::FailTerminal { error }
    };
    let call = owner_call(&app, &caller, body.namespace, body.key, &body.lease)?;
    Ok(Json(app.ledger().finish(&call, &mv).await?.into()))
}

/// A run as the API shows it (never its lease).
#[derive(Debug, Serialize, ToSchema)]
pub struct RunView {
    /// Provider or tenant.
    pub namespace: String,
    /// Business identity.
    pub key: String,
    /// Identity unique across runs, if any.
    pub business_key: Option<String>,
    /// Current state.
    #[schema(value_type = String)]
    pub state: RunState,
    /// Fencing version.
    pub version: i64,
    /// Times claimed.
    pub attempts: i64,
    /// `sha256:<hex>` of the first payload.
    pub payload_hash: String,
    /// Declared operation.
    pub operation: Option<String>,
    /// Correlation id.
    pub correlation_id: String,
    /// Workflow version.
    pub workflow_version: Option<String>,
    /// Link to the source record.
    pub source_url: Option<String>,
    /// Workflow engine execution id.
    pub execution_ref: Option<String>,
    /// On whose behalf.
    pub requested_by: Option<String>,
    /// Token subject that claimed it last.
    pub claimed_by: String,
    /// Result of a completed run.
    pub result: Option<Value>,
    /// Last sanitised error.
    pub last_error: Option<String>,
    /// Why it ended.
    pub reason: Option<String>,
    /// When the current lease ends (RFC 3339).
    pub lease_expires_at: Option<String>,
    /// First claim (RFC 3339).
    pub created_at: String,
    /// Last change (RFC 3339).
    pub updated_at: String,
    /// When retention slimmed it (RFC 3339).
    pub archived_at: Option<String>,
}

impl From<Run> for RunView {
    fn from(run: Run) -> Self {
        let ts = |ms: i64| to_datetime(ms).to_rfc3339();
        Self {
            correlation_id: run.correlation_id().to_owned(),
            namespace: run.namespace.to_string(),
            key: run.key.to_string(),
            business_key: run.business_key.map(|b| b.to_string()),
            state: run.state,
            version: run.version.get(),
            attempts: run.attempts,
            payload_hash: run.payload_hash.to_string(),
            operation: run.metadata.operation,
            workflow_version: run.metadata.workflow_version,
            source_url: run.metadata.source_url,
            execution_ref: run.metadata.execution_ref,
            requested_by: run.metadata.requested_by,
            claimed_by: run.claimed_by,
            result: run.result,
            last_error: run.last_error,
            reason: run.reason,
            lease_expires_at: run.lease_expires_at.map(ts),
            created_at: ts(run.created_at),
            updated_at: ts(run.updated_at),
            archived_at: run.archived_at.map(ts),
        }
    }
}

/// Reads one run by namespace and key (query parameters, URL-encoded).
#[utoipa::path(get, path = "/v1/runs", tag = "ledger", params(RunRef),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The run", body = RunView),
        (status = 400, description = "Malformed namespace or key", body = super::Problem),
        (status = 403, description = "The run's namespace is outside the token's namespaces", body = super::Problem),
        (status = 404, description = "No such run", body = super::Problem),
        (status = 503, description = "The database, or Redis for a Redis-tier namespace, is unavailable: nothing was accepted; retry after Retry-After", body = super::Problem),
    ))]
pub(super) async fn get_run(
    State(app): State<AppState>,
    caller: Caller,
    crate::api::ApiQuery(query): crate::api::ApiQuery<RunRef>,
) -> Result<Json<RunView>> {
    let (namespace, key) = query.parse(&app, &caller)?;
    let run = app.ledger().run(&namespace, &key).await?.ok_or_else(|| {
        ApiError::NotFound(format!("no run with key {key} in namespace {namespace}"))
    })?;
    Ok(Json(run.into()))
}
