//! The root router: it merges the routers of the parts and adds the layers
//! every route shares, and nothing else.

use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;

use crate::api::{self, telemetry, ApiError};
use crate::state::AppState;

/// The whole HTTP application: the JSON API, the approval pages, the
/// webhook route, the console, health and metrics, the OpenAPI document;
/// under the request timeout, the body limit and (outermost) the request
/// span and duration.
pub fn router(state: AppState) -> Router {
    let limit = state.config.server.max_body_bytes;
    Router::new()
        .merge(api::router(state.clone()))
        .merge(api::approve::router())
        .merge(api::hooks::router())
        .merge(crate::ui::router())
        .merge(api::health::router())
        .merge(api::openapi::router())
        .layer(middleware::from_fn_with_state(state.clone(), timeout))
        .layer(DefaultBodyLimit::max(limit))
        // Outermost: the span and the duration cover every layer above.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            telemetry::observe,
        ))
        .with_state(state)
}

/// Answers 408 problem+json when a request outlives the configured timeout.
async fn timeout(
    State(app): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let ms = app.config.server.request_timeout_ms;
    tokio::time::timeout(Duration::from_millis(ms), next.run(req))
        .await
        .map_err(|_| ApiError::Timeout(ms))
}
