//! The kill switch over HTTP (admin scope to change, operator to read).

use axum::extract::State;
use axum::routing::get;
use axum::{middleware, Json, Router};
use serde::Deserialize;
use utoipa::ToSchema;

use super::error::{ApiError, Result};
use super::{auth, ApiJson, Caller};
use crate::outbox::killswitch::scope_for;
use crate::outbox::ActionSwitch;
use crate::state::AppState;

pub(super) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/admin/actions", get(list).post(set))
        .route_layer(middleware::from_fn_with_state(
            state,
            auth::operator_or_admin,
        ))
}

/// `POST /v1/admin/actions`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ActionsBody {
    /// False engages the kill switch (effects wait); true releases it.
    pub enabled: bool,
    /// A target name; absent means every target.
    pub target: Option<String>,
}

/// Engages or releases the kill switch, globally or for one target.
#[utoipa::path(post, path = "/v1/admin/actions", tag = "ops", request_body = ActionsBody,
    security(("bearer" = [])),
    responses((status = 200, description = "Every switch after the change")))]
pub(super) async fn set(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<ActionsBody>,
) -> Result<Json<Vec<ActionSwitch>>> {
    if !caller.has(crate::config::Scope::Admin) {
        return Err(ApiError::Forbidden {
            needed: "admin".into(),
        });
    }
    let scope = scope_for(body.target.as_deref(), &app.config.targets)
        .map_err(|problem| ApiError::invalid("target", problem))?;
    let switches = app
        .kill_switch
        .set(&scope, body.enabled, &caller.subject, &app.wake)
        .await?;
    Ok(Json(switches))
}

/// Every kill-switch scope.
#[utoipa::path(get, path = "/v1/admin/actions", tag = "ops", security(("bearer" = [])),
    responses((status = 200, description = "Every switch ever set")))]
pub(super) async fn list(State(app): State<AppState>) -> Result<Json<Vec<ActionSwitch>>> {
    Ok(Json(app.kill_switch.switches().await?))
}
