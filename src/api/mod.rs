//! The versioned JSON API (DESIGN.md §1 "api").
//!
//! Each resource module owns its request and response types and a
//! `router()`; [`router`] only merges them. The shared layers (the request
//! span and duration of [`telemetry`], the body limit, the request timeout)
//! are added by the root router, [`crate::app::router`]. The run's identity always
//! travels in the JSON body or query string, never in the path, because
//! keys may hold `/`, `?` or `#`.

use std::sync::Arc;

use axum::extract::{FromRequest, Request};
use axum::Router;
use serde::de::DeserializeOwned;

use crate::state::AppState;
use crate::tokens::Principal;

mod admin;
pub mod approvals;
pub mod approve;
pub mod auth;
mod claims;
// Crate-visible: the console reuses its bulk-replay selection and dry run.
pub(crate) mod deadletters;
mod effects;
pub mod error;
mod gate;
pub(crate) mod health;
pub(crate) mod hooks;
// The benchmark floor (POST /v1/noop).
mod noop;
pub mod openapi;
mod part_errors;
pub mod runs;
// The request span and the duration histogram.
pub mod telemetry;
// Crate-visible: the console's run page reuses `load`.
pub(crate) mod timeline;

pub use error::{ApiError, Problem};
pub use runs::RunView;

/// The JSON resources, each behind its own scope check. The root router
/// ([`crate::app::router`]) merges them with the other routes and adds the
/// shared layers.
pub fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .merge(claims::router(state.clone()))
        .merge(runs::router(state.clone()))
        .merge(effects::router(state.clone()))
        .merge(admin::router(state.clone()))
        .merge(deadletters::router(state.clone()))
        .merge(timeline::router(state.clone()))
        .merge(gate::router(state.clone()))
        .merge(approvals::router(state.clone()))
        .merge(noop::router(state))
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
