//! `GET /v1/runs/timeline`: one key's audit answers (DESIGN.md §8).
//!
//! Did we process this key (claims and states), did we send (effects with
//! attempts and external ids), who approved (gate decisions with their
//! actor), which model drafted (recorded outputs with provider, model and
//! revision), and every raw event with its hash-chain status.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};

use super::auth;
use super::error::{ApiError, Result};
use super::runs::RunRef;
use crate::api::auth::Scoped;
use crate::audit::timeline::Timeline;
use crate::state::AppState;

pub(super) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/runs/timeline", get(timeline))
        .only(state, auth::WORKFLOW_OR_OPERATOR)
}

/// One key's history, arranged to answer the four audit questions.
#[utoipa::path(get, path = "/v1/runs/timeline", tag = "audit", params(RunRef),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The key's timeline; `chain.ok` says whether its hash chain verifies", body = Timeline),
        (status = 400, description = "Malformed namespace or key", body = super::Problem),
        (status = 403, description = "The run's namespace is outside the token's namespaces", body = super::Problem),
        (status = 404, description = "No run and no audit event under this key", body = super::Problem),
    ))]
pub(super) async fn timeline(
    State(app): State<AppState>,
    caller: super::Caller,
    crate::api::ApiQuery(query): crate::api::ApiQuery<RunRef>,
) -> Result<Json<Timeline>> {
    let (namespace, key) = query.parse(&app, &caller)?;
    super::access::sql_tier(&app, &namespace, "audit timelines")?;
    crate::audit::timeline::load(app.store.as_ref(), &namespace, &key)
        .await?
        .map(Json)
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "no run and no audit event with key {key} in namespace {namespace}"
            ))
        })
}
