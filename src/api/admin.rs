//! The kill switch over HTTP (admin scope to change, operator to read).

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::{ApiError, Result};
use super::{auth, ApiJson, Caller};
use crate::api::auth::Scoped;
use crate::outbox::killswitch::scope_for;
use crate::outbox::ActionSwitch;
use crate::state::AppState;

pub(super) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/admin/actions", get(list).post(set))
        .only(state, auth::OPERATOR_OR_ADMIN)
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

/// One scope of the kill switch as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SwitchView {
    /// `*` (every target) or a target name.
    pub scope: String,
    /// False: effects to this scope are held.
    pub enabled: bool,
    /// Who changed it last.
    pub changed_by: String,
    /// When (RFC 3339).
    pub changed_at: String,
}

impl From<ActionSwitch> for SwitchView {
    fn from(s: ActionSwitch) -> Self {
        Self {
            scope: s.scope,
            enabled: s.enabled,
            changed_by: s.changed_by,
            changed_at: crate::clock::to_datetime(s.changed_at).to_rfc3339(),
        }
    }
}

fn views(switches: Vec<ActionSwitch>) -> Json<Vec<SwitchView>> {
    Json(switches.into_iter().map(SwitchView::from).collect())
}

/// Engages or releases the kill switch, globally or for one target.
#[utoipa::path(post, path = "/v1/admin/actions", tag = "ops", request_body = ActionsBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every switch after the change", body = [SwitchView]),
        (status = 400, description = "No such target", body = super::Problem),
        (status = 403, description = "The token lacks the admin scope", body = super::Problem),
    ))]
pub(super) async fn set(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<ActionsBody>,
) -> Result<Json<Vec<SwitchView>>> {
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
    Ok(views(switches))
}

/// Every kill-switch scope.
#[utoipa::path(get, path = "/v1/admin/actions", tag = "ops", operation_id = "list_actions", security(("bearer" = [])),
    responses((status = 200, description = "Every switch ever set", body = [SwitchView])))]
pub(super) async fn list(State(app): State<AppState>) -> Result<Json<Vec<SwitchView>>> {
    Ok(views(app.kill_switch.switches().await?))
}
