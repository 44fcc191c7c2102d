//! `POST /v1/noop`: the server's floor, behind the claim route's stack.
//!
//! It authenticates like `POST /v1/claims` (workflow scope), passes the
//! same tracing, body-limit and timeout layers, reads and parses the JSON
//! body the same way, and then touches nothing: no database, no metrics.
//! Benchmarks compare the claim route with it to see what the ledger
//! itself costs; operators can use it to check a token and the path to
//! oncegate without writing anything.

use axum::routing::post;
use axum::{extract::State, Json, Router};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::error::Result;
use super::{auth, ApiJson, Caller};
use crate::api::auth::Scoped;
use crate::state::AppState;

pub(super) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/noop", post(noop))
        .only(state, auth::WORKFLOW)
}

/// The answer of the no-op route.
#[derive(Debug, Serialize, ToSchema)]
pub struct NoopResponse {
    /// Always true: the request was authenticated and its body parsed.
    pub ok: bool,
    /// The token's subject.
    pub subject: String,
}

/// Does nothing, through exactly the claim route's middleware.
#[utoipa::path(post, path = "/v1/noop", tag = "ops",
    request_body(content = Object, description = "Any JSON value; parsed, then dropped"),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Authenticated and parsed; nothing written", body = NoopResponse),
        (status = 400, description = "The body is not JSON", body = super::Problem),
        (status = 401, description = "No valid token", body = super::Problem),
        (status = 403, description = "Token lacks the workflow scope", body = super::Problem),
    ))]
pub(super) async fn noop(
    State(_app): State<AppState>,
    caller: Caller,
    ApiJson(_body): ApiJson<Value>,
) -> Result<Json<NoopResponse>> {
    Ok(Json(NoopResponse {
        ok: true,
        subject: caller.subject.clone(),
    }))
}
