//! Liveness, readiness and the metrics scrape.

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::error::ApiError;
use crate::state::AppState;

/// `/healthz` and `/readyz` (no token: probes).
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

/// `/metrics` (no token: scrapers; one when `[server]
/// metrics_token_digest` is set), on the main listener or on
/// `[metrics] listen`.
pub(crate) fn metrics_router() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "ops", responses((status = 200, description = "Alive")))]
pub(super) async fn healthz() -> impl IntoResponse {
    Json(json!({ "status": "ok" }))
}

/// The database answers and takes writes (a read-only database is not
/// ready: every claim and delivery would be refused), and so does Redis
/// when a namespace is on the Redis tier (`"redis"` in the answer).
#[utoipa::path(get, path = "/readyz", tag = "ops", responses(
    (status = 200, description = "Ready"),
    (status = 503, description = "The database does not answer, or takes no writes, or (with a Redis-tier namespace) Redis does not answer"),
))]
pub(super) async fn readyz(State(app): State<AppState>) -> impl IntoResponse {
    let database = app.store.ping().await;
    if let Err(err) = &database {
        tracing::warn!(error = %err, "readiness check failed");
    }
    let mut body = json!({ "database": app.store.backend_name() });
    let mut ready = database.is_ok();
    if let Some(redis) = &app.redis {
        let answer = redis.ping().await;
        if let Err(err) = &answer {
            tracing::warn!(error = %err, "readiness check failed: the Redis tier");
        }
        ready &= answer.is_ok();
        body["redis"] = json!(if answer.is_ok() {
            "ready"
        } else {
            "unavailable"
        });
    }
    body["status"] = json!(if ready { "ready" } else { "unavailable" });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body))
}

/// Prometheus text format: the counters and histograms, and the gauges
/// read from the database now (backlog, held effects, stale leases, dead
/// letters, kill switch).
#[utoipa::path(get, path = "/metrics", tag = "ops", responses(
    (status = 200, description = "Prometheus text format"),
    (status = 401, description = "`[server] metrics_token_digest` is set and the bearer token is not that token", body = super::Problem),
))]
pub(super) async fn metrics(
    State(app): State<AppState>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    if let Some(digest) = &app.config.server.metrics_token_digest {
        if !bearer_has_digest(&headers, digest) {
            return Err(ApiError::Unauthorized);
        }
    }
    Ok((
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.scrape(app.store.as_ref()).await,
    ))
}

/// Whether the bearer token's digest is `digest` (compared in constant time).
fn bearer_has_digest(headers: &HeaderMap, digest: &str) -> bool {
    use subtle::ConstantTimeEq;
    let Some(token) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    crate::tokens::digest(token.trim())
        .as_bytes()
        .ct_eq(digest.as_bytes())
        .into()
}
