//! Liveness, readiness and the metrics scrape.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::AppState;

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "ops", responses((status = 200, description = "Alive")))]
pub(super) async fn healthz() -> impl IntoResponse {
    Json(json!({ "status": "ok" }))
}

/// The database answers.
#[utoipa::path(get, path = "/readyz", tag = "ops", responses(
    (status = 200, description = "Ready"),
    (status = 503, description = "The database does not answer"),
))]
pub(super) async fn readyz(State(app): State<AppState>) -> impl IntoResponse {
    match app.store.ping().await {
        Ok(()) => (
            StatusCode::OK,
            Json(json!({ "status": "ready", "database": app.store.backend() })),
        ),
        Err(err) => {
            tracing::warn!(error = %err, "readiness check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({ "status": "unavailable", "database": app.store.backend() })),
            )
        }
    }
}

/// Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = "ops", responses((status = 200, description = "Prometheus text format")))]
pub(super) async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    refresh_outbox_gauges(&app).await;
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
}

/// Reads the outbox backlog and the kill switch into their gauges.
async fn refresh_outbox_gauges(app: &AppState) {
    let (Ok(backlog), Ok(switches)) =
        (app.store.backlog().await, app.store.action_switches().await)
    else {
        tracing::warn!("cannot read the outbox backlog for /metrics");
        return;
    };
    let held = |target: &str| {
        switches
            .iter()
            .any(|s| !s.enabled && (s.scope == "*" || s.scope == target))
    };
    app.metrics.effects_outstanding.reset();
    app.metrics.effects_held.reset();
    for (target, state, count) in backlog {
        app.metrics
            .effects_outstanding
            .with_label_values(&[&target, &state])
            .set(count);
        if state == "pending" && held(&target) {
            app.metrics
                .effects_held
                .with_label_values(&[&target])
                .add(count);
        }
    }
}
