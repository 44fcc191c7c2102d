//! The root router: it merges the routers of the parts and adds the layers
//! every route shares, and nothing else.

use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;

use tower_http::timeout::RequestBodyTimeoutLayer;

use super::budget::BodyBudget;
use crate::api::{self, telemetry, ApiError};
use crate::state::AppState;

/// The whole HTTP application: the JSON API, the approval pages, the
/// webhook route, the console, health and metrics, the OpenAPI document;
/// the routes that read a body before they know who sent it under the
/// unauthenticated body budget ([`super::budget`]); everything under the
/// request timeout, the body's read timeout, the body limit, the request
/// span and duration and (outermost, so the framework's own answers such
/// as 404 and 405 carry them too) the security headers.
pub fn router(state: AppState) -> Router {
    let limit = state.config.server.max_body_bytes;
    let body_timeout = Duration::from_millis(state.config.server.body_read_timeout_ms);
    let budget = BodyBudget::new(state.clone());
    let unauthenticated = Router::new()
        .merge(api::approve::router())
        .merge(api::oidc::router())
        .merge(api::hooks::router())
        .layer(middleware::from_fn_with_state(
            budget,
            super::budget::reserve,
        ));
    let mut app = Router::new()
        .merge(api::router(state.clone()))
        .merge(unauthenticated)
        .merge(crate::ui::router())
        .merge(api::health::router())
        .merge(api::openapi::router());
    if state.config.metrics.listen.is_none() {
        app = app.merge(api::health::metrics_router());
    }
    let app = app
        .layer(middleware::from_fn_with_state(state.clone(), timeout))
        .layer(RequestBodyTimeoutLayer::new(body_timeout))
        .layer(DefaultBodyLimit::max(limit))
        // The span and the duration cover every layer above.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            telemetry::observe,
        ))
        .with_state(state);
    security_headers(app)
}

/// The headers every response carries unless its handler set its own
/// (the pages set a stricter policy of theirs): no sniffing, no framing,
/// no referrer, and a policy that loads nothing.
/// The router of `[metrics] listen`: `/metrics` alone, with the request
/// timeout and the security headers.
pub fn metrics_router(state: AppState) -> Router {
    let app = api::health::metrics_router()
        .layer(middleware::from_fn_with_state(state.clone(), timeout))
        .with_state(state);
    security_headers(app)
}

fn security_headers(app: Router) -> Router {
    use axum::http::header::{
        CONTENT_SECURITY_POLICY, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
    };
    use axum::http::HeaderValue;
    use tower_http::set_header::SetResponseHeaderLayer;
    app.layer(SetResponseHeaderLayer::if_not_present(
        X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    ))
    .layer(SetResponseHeaderLayer::if_not_present(
        X_FRAME_OPTIONS,
        HeaderValue::from_static("DENY"),
    ))
    .layer(SetResponseHeaderLayer::if_not_present(
        REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    ))
    .layer(SetResponseHeaderLayer::if_not_present(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"),
    ))
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
