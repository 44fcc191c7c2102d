//! Target health over HTTP (DESIGN.md §4): every target's state, and an
//! operator's enable or disable (admin scope to change, operator to read).

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::{ApiError, Result};
use super::{auth, ApiJson, Caller};
use crate::api::auth::Scoped;
use crate::outbox::health::{self, TargetChangeError, TargetHealth};
use crate::state::AppState;

pub(super) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/admin/targets", get(list))
        .route("/v1/admin/targets/{target}", post(set))
        .only(state, auth::OPERATOR_OR_ADMIN)
}

/// `POST /v1/admin/targets/{target}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TargetBody {
    /// True enables the target (its held effects go out, each once);
    /// false disables it until an operator enables it.
    pub enabled: bool,
}

/// One target's health as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct TargetView {
    /// The target's name.
    pub target: String,
    /// `healthy`, `paused`, `probing` (one half-open probe out) or `disabled`.
    pub state: String,
    /// Consecutive transient failures.
    pub failures: i64,
    /// When the current cool-down ends (RFC 3339), while paused.
    pub paused_until: Option<String>,
    /// Seconds paused or disabled in all, the current stretch included.
    pub paused_seconds: f64,
    /// Why it left `healthy` last.
    pub cause: Option<String>,
    /// Who changed it last (a dispatcher or an operator).
    pub changed_by: String,
    /// When (RFC 3339).
    pub changed_at: String,
}

impl TargetView {
    /// The view of `h` at `now`.
    pub fn of(h: TargetHealth, now: crate::clock::Millis) -> Self {
        let time = |ms| crate::clock::to_datetime(ms).to_rfc3339();
        Self {
            paused_seconds: h.paused_total_ms(now) as f64 / 1000.0,
            state: h.state.as_str().to_owned(),
            paused_until: h.paused_until.map(time),
            changed_at: time(h.changed_at),
            target: h.target,
            failures: h.failures,
            cause: h.cause,
            changed_by: h.changed_by,
        }
    }
}

/// Enables or disables one target, audited with the caller.
#[utoipa::path(post, path = "/v1/admin/targets/{target}", tag = "ops", operation_id = "set_target",
    request_body = TargetBody,
    params(("target" = String, Path, description = "A configured target's name")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The target's health after the change", body = TargetView),
        (status = 403, description = "The token lacks the admin scope", body = super::Problem),
        (status = 404, description = "No such target", body = super::Problem),
    ))]
pub(super) async fn set(
    State(app): State<AppState>,
    caller: Caller,
    Path(target): Path<String>,
    ApiJson(body): ApiJson<TargetBody>,
) -> Result<Json<TargetView>> {
    if !caller.has(crate::config::Scope::Admin) {
        return Err(ApiError::Forbidden {
            needed: "admin".into(),
        });
    }
    let store = app.store.as_ref();
    let changed = health::set_enabled(
        store,
        &app.config.targets,
        &target,
        body.enabled,
        &caller.subject,
        &app.wake,
    )
    .await
    .map_err(|err| match err {
        TargetChangeError::Unknown(_) => ApiError::NotFound(err.to_string()),
        TargetChangeError::Store(err) => err.into(),
    })?;
    Ok(Json(TargetView::of(changed, app.clock.now_ms())))
}

/// Every configured target's health.
#[utoipa::path(get, path = "/v1/admin/targets", tag = "ops", operation_id = "list_targets",
    security(("bearer" = [])),
    responses((status = 200, description = "Every target, configured order", body = [TargetView])))]
pub(super) async fn list(State(app): State<AppState>) -> Result<Json<Vec<TargetView>>> {
    let now = app.clock.now_ms();
    let all = health::overview(app.store.as_ref(), &app.config.targets, now).await?;
    Ok(Json(
        all.into_iter().map(|h| TargetView::of(h, now)).collect(),
    ))
}
