//! The approvals inbox over the API: `GET /v1/approvals` lists challenges
//! as approval cards (built by `approval::card`, which carries their schemas).

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use utoipa::IntoParams;

use super::auth;
use super::error::Result;
use crate::api::auth::Scoped;
use crate::approval::card::{self, ApprovalCard};
use crate::state::AppState;

pub(super) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/approvals", get(list))
        .only(state, auth::APPROVER_OR_OPERATOR)
}

/// `GET /v1/approvals` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ApprovalsQuery {
    /// `pending` (default), `approved`, `rejected`, `expired`, `escalated`, or `all`.
    pub state: Option<String>,
    /// Most rows (default 100, at most 1000).
    pub limit: Option<i64>,
}

/// Approval challenges as cards, newest first.
#[utoipa::path(get, path = "/v1/approvals", tag = "approvals", operation_id = "list_approvals", params(ApprovalsQuery),
    security(("bearer" = [])),
    responses((status = 200, description = "Approval cards", body = [ApprovalCard])))]
pub(super) async fn list(
    State(app): State<AppState>,
    super::ApiQuery(q): super::ApiQuery<ApprovalsQuery>,
) -> Result<Json<Vec<ApprovalCard>>> {
    let state = card::state_filter(q.state.as_deref())?;
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let challenges = app.store.challenges(state, limit).await?;
    Ok(Json(challenges.iter().map(ApprovalCard::from).collect()))
}
