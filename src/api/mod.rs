//! The versioned JSON API (DESIGN.md §1 "api").
//!
//! Each resource module owns its request and response types and a
//! `router()`; [`router`] only merges them and adds the shared layers:
//! the request span and duration ([`telemetry`]), the body limit, the
//! request timeout. The run's identity always
//! travels in the JSON body or query string, never in the path, because
//! keys may hold `/`, `?` or `#`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use serde::de::DeserializeOwned;

use crate::state::AppState;
use crate::tokens::Principal;

mod admin;
pub mod approvals;
pub mod approve;
pub mod auth;
mod claims;
// Dead letters and replay (issue 6, branch dlq); the console (issue 7)
// reuses its bulk-replay selection and dry run.
pub(crate) mod deadletters;
mod effects;
pub mod error;
mod gate;
mod health;
// The benchmark floor (POST /v1/noop).
mod noop;
pub mod openapi;
pub mod runs;
// ops (metrics and logs): the request span and the duration histogram.
pub mod telemetry;
pub(crate) mod timeline; // issue 6: audit; the console (issue 7) reuses `load`

pub use error::{ApiError, Problem};
pub use runs::RunView;

/// The whole HTTP application.
pub fn router(state: AppState) -> Router {
    let limit = state.config.server.max_body_bytes;
    Router::new()
        .merge(claims::router(state.clone()))
        .merge(runs::router(state.clone()))
        .merge(effects::router(state.clone()))
        .merge(admin::router(state.clone()))
        // Dead letters and replay (issue 6, branch dlq).
        .merge(deadletters::router(state.clone()))
        .merge(timeline::router(state.clone()))
        .merge(gate::router(state.clone()))
        .merge(approvals::router(state.clone()))
        .merge(approve::router())
        .merge(noop::router(state.clone()))
        .merge(crate::ingress::router())
        // The operator console (issue 7, branch console): HTML under /ui.
        .merge(crate::ui::router())
        .merge(health::router())
        .merge(openapi::router())
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

/// A JSON body whose every rejection is a problem+json 400 (or 413).
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(ApiError::from_json_rejection(
                rejection,
                state.config.server.max_body_bytes,
            )),
        }
    }
}

/// The principal the auth middleware put into the request.
pub type Caller = axum::Extension<Arc<Principal>>;
