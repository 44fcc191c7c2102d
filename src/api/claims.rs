//! `POST /v1/claims`: the atomic claim (DESIGN.md §2).

use axum::http::header::RETRY_AFTER;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{extract::State, Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::access::{self, Access};
use super::error::{ApiError, Result};
use super::runs::{optional_text, RunRef};
use super::telemetry::{record_run, CorrelationId};
use super::{auth, ApiJson, Caller};
use crate::api::auth::Scoped;
use crate::clock::to_datetime;
use crate::ledger::{
    BusinessKey, ClaimOutcome, ClaimRequest, IdempotencyKey, PayloadHash, Run, RunMetadata,
    RunState,
};
use crate::state::AppState;
use crate::tokens::Principal;

pub(super) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/claims", post(claim))
        .only(state, auth::WORKFLOW)
}

/// A claim of `(namespace, key)`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimBody {
    /// Provider or tenant, 1–64 bytes of visible ASCII.
    pub namespace: String,
    /// Stable business identity, 1–255 bytes of visible ASCII (`/ ? # %` allowed).
    pub key: String,
    /// The event payload; the server hashes its RFC 8785 canonical form.
    pub payload: Option<Value>,
    /// Or the payload's hash, `sha256:<64 lowercase hex>`.
    pub payload_hash: Option<String>,
    /// An identity at most one run may hold, across namespaces.
    pub business_key: Option<String>,
    /// The declared operation this run performs.
    pub operation: Option<String>,
    /// Lease length in milliseconds (default from the config).
    pub lease_ms: Option<i64>,
    /// Correlation id for logs and downstream calls (generated when absent).
    pub correlation_id: Option<String>,
    /// Version of the calling workflow.
    pub workflow_version: Option<String>,
    /// Link to the source record.
    pub source_url: Option<String>,
    /// The workflow engine's execution id.
    pub execution_ref: Option<String>,
    /// The person on whose behalf the workflow acts.
    pub requested_by: Option<String>,
}

/// The answer to a claim. `claimed` is always present.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClaimResponse {
    /// Whether the caller owns the run now.
    pub claimed: bool,
    /// Whether the key already completed (its `result` is included).
    pub duplicate: bool,
    /// The run's namespace.
    pub namespace: String,
    /// The run's key.
    pub key: String,
    /// The run's state.
    #[schema(value_type = String)]
    pub state: RunState,
    /// The fencing version.
    pub version: i64,
    /// The caller's lease, when `claimed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// When the lease ends (RFC 3339), when `claimed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_expires_at: Option<String>,
    /// True when the claim took over an expired lease or a retryable failure.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reclaimed: bool,
    /// How many times the run was claimed.
    pub attempts: i64,
    /// The run's correlation id.
    pub correlation_id: String,
    /// The stored result of a completed run (or of an approved one, whose
    /// owner committed it with its effects).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why a finished run ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Seconds to wait before asking again, for runs in flight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<i64>,
    /// The run that already holds the business key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate_of: Option<RunRef>,
}

impl ClaimResponse {
    fn of(run: &Run, claimed: bool) -> Self {
        Self {
            claimed,
            duplicate: false,
            namespace: run.namespace.to_string(),
            key: run.key.to_string(),
            state: run.state,
            version: run.version.get(),
            lease: None,
            lease_expires_at: None,
            reclaimed: false,
            attempts: run.attempts,
            correlation_id: run.correlation_id().to_owned(),
            result: None,
            reason: None,
            retry_after: None,
            duplicate_of: None,
        }
    }
}

impl ClaimBody {
    /// The claim; a body without `correlation_id` takes the request's.
    fn into_request(
        mut self,
        caller: &Principal,
        app: &AppState,
        correlation: Option<CorrelationId>,
    ) -> Result<ClaimRequest> {
        if self.correlation_id.is_none() {
            self.correlation_id = correlation.map(|c| c.0);
        }
        let payload_hash = match (self.payload, self.payload_hash) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid("payload_hash", "send payload or payload_hash, not both"))
            }
            (Some(payload), None) => PayloadHash::of_json(&payload)?,
            (None, Some(hash)) => PayloadHash::parse(hash)?,
            (None, None) => {
                return Err(ApiError::invalid(
                    "payload",
                    "send payload (any JSON) or payload_hash, so a redelivery with a different body is caught",
                ))
            }
        };
        let lease_ms = app.ledger().lease(self.lease_ms)?.get();
        let namespace = access::namespace(app, caller, self.namespace, Access::Act)?;
        if self.business_key.is_some() {
            // A business key is unique across every run: only the SQL
            // tier sees them all.
            access::sql_tier(app, &namespace, "business keys")?;
        }
        Ok(ClaimRequest {
            namespace,
            key: IdempotencyKey::parse(self.key)?,
            business_key: self.business_key.map(BusinessKey::parse).transpose()?,
            payload_hash,
            lease_ms,
            metadata: RunMetadata {
                operation: optional_text("operation", self.operation, 128)?,
                correlation_id: optional_text("correlation_id", self.correlation_id, 128)?,
                workflow_version: optional_text("workflow_version", self.workflow_version, 128)?,
                source_url: optional_text("source_url", self.source_url, 2048)?,
                execution_ref: optional_text("execution_ref", self.execution_ref, 255)?,
                requested_by: optional_text("requested_by", self.requested_by, 255)?,
            },
            claimed_by: caller.subject.clone(),
        })
    }
}

/// Claims a key: the caller either owns the run now, or learns why not.
#[utoipa::path(post, path = "/v1/claims", tag = "ledger", request_body = ClaimBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Claimed, or an explicit answer why not", body = ClaimResponse),
        (status = 400, description = "Malformed request (or a business_key in a Redis-tier namespace); nothing written", body = super::Problem),
        (status = 401, description = "No valid token", body = super::Problem),
        (status = 403, description = "Token lacks the workflow scope, its namespaces do not include this one, or the namespace belongs to a webhook source", body = super::Problem),
        (status = 422, description = "Same key, different payload", body = super::Problem),
        (status = 503, description = "The database, or Redis for a Redis-tier namespace, is unavailable: nothing was accepted; retry after Retry-After", body = super::Problem),
    ))]
pub(super) async fn claim(
    State(app): State<AppState>,
    caller: Caller,
    correlation: Option<CorrelationId>,
    ApiJson(body): ApiJson<ClaimBody>,
) -> Result<Response> {
    let req = body.into_request(&caller, &app, correlation)?;
    record_run(req.namespace.as_str(), req.key.as_str(), None);
    let claimed = app.ledger().claim(&req).await?;
    let retry_after_header = claimed.retry_after_secs;
    let body = match claimed.outcome {
        ClaimOutcome::Claimed {
            run,
            lease,
            reclaimed_from,
        } => {
            tracing::Span::current().record("version", run.version.get());
            let mut body = ClaimResponse::of(&run, true);
            body.lease = Some(lease.encode());
            body.lease_expires_at = run.lease_expires_at.map(|at| to_datetime(at).to_rfc3339());
            body.reclaimed = reclaimed_from.is_some();
            body
        }
        ClaimOutcome::Duplicate(run) => {
            let mut body = ClaimResponse::of(&run, false);
            body.duplicate = true;
            body.result = run.result.clone();
            body
        }
        ClaimOutcome::InFlight(run) => {
            let mut body = ClaimResponse::of(&run, false);
            body.retry_after = retry_after_header;
            // An approved run already holds the result its owner committed:
            // a duplicate can answer with it while the effects go out.
            body.result = run.result.clone();
            body
        }
        ClaimOutcome::Finished(run) | ClaimOutcome::Exhausted(run) => {
            let mut body = ClaimResponse::of(&run, false);
            body.reason = run.reason.clone().or_else(|| run.last_error.clone());
            body
        }
        ClaimOutcome::DuplicateOf(holder) => {
            let mut body = ClaimResponse::of(&holder, false);
            body.namespace = req.namespace.to_string();
            body.key = req.key.to_string();
            body.duplicate_of = Some(RunRef {
                namespace: holder.namespace.to_string(),
                key: holder.key.to_string(),
            });
            body
        }
        // Refused as a 422 by the ledger before it reaches here.
        ClaimOutcome::Conflict(run) => {
            return Err(ApiError::PayloadConflict {
                namespace: run.namespace.to_string(),
                key: run.key.to_string(),
                stored_hash: run.payload_hash.to_string(),
                offered_hash: req.payload_hash.to_string(),
            })
        }
    };
    let mut response = Json(body).into_response();
    if let Some(secs) = retry_after_header {
        if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
            response.headers_mut().insert(RETRY_AFTER, value);
        }
    }
    Ok(response)
}
