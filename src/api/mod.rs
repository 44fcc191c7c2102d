//! The versioned JSON API (DESIGN.md §1 "api").
//!
//! Each resource module owns its request and response types and a
//! `router()`; [`router`] only merges them. The shared layers (the request
//! span and duration of [`telemetry`], the body limit, the request timeout)
//! are added by the root router, [`crate::app::router`]. The run's identity always
//! travels in the JSON body or query string, never in the path, because
//! keys may hold `/`, `?` or `#`.

use std::sync::Arc;

use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::Router;
use serde::de::DeserializeOwned;

use crate::state::AppState;
use crate::tokens::Principal;

mod access;
mod admin;
pub mod approvals;
pub mod approve;
mod audit_status;
pub mod auth;
mod claims;
pub mod client;
mod deadletters;
mod deliveries;
mod effects;
pub mod error;
mod gate;
pub(crate) mod health;
pub(crate) mod hooks;
/// OpenID Connect sign-in: `/auth/oidc/start` and the callback.
pub mod oidc;
// The benchmark floor (POST /v1/noop).
mod noop;
pub mod openapi;
mod part_errors;
mod proxy;
pub mod records;
pub mod runs;
// The request span and the duration histogram.
mod targets;
pub mod telemetry;
mod timeline;
mod tokens;

pub use admin::SwitchView;
pub use error::{ApiError, Problem};
pub use runs::RunView;
pub use targets::TargetView;

/// The JSON resources, each behind its own scope check. The root router
/// ([`crate::app::router`]) merges them with the other routes and adds the
/// shared layers.
pub fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .merge(claims::router(state.clone()))
        .merge(runs::router(state.clone()))
        .merge(effects::router(state.clone()))
        .merge(admin::router(state.clone()))
        .merge(targets::router(state.clone()))
        .merge(deadletters::router(state.clone()))
        .merge(deliveries::router(state.clone()))
        .merge(timeline::router(state.clone()))
        .merge(audit_status::router(state.clone()))
        .merge(gate::router(state.clone()))
        .merge(approvals::router(state.clone()))
        .merge(proxy::router(state.clone()))
        .merge(tokens::router(state.clone()))
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

/// A query string whose every rejection is a problem+json 400 naming what
/// is wrong (axum's own answers plain text).
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| Self(value))
            .map_err(|rejection| ApiError::Invalid {
                field: None,
                detail: rejection.body_text(),
            })
    }
}

/// One path segment naming a record (a dead letter, job, effect, challenge
/// or source), refused with a problem+json 400 when it holds a control
/// character: PostgreSQL cannot store a NUL in text, and no id oncegate
/// hands out holds one, so `%00` is bad input, never a database error.
#[derive(Debug)]
pub struct PathId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::invalid("path", rejection.body_text()))?;
        if id.chars().any(char::is_control) {
            return Err(ApiError::invalid(
                "path",
                "must not contain control characters",
            ));
        }
        Ok(Self(id))
    }
}

/// The principal the auth middleware put into the request.
pub type Caller = axum::Extension<Arc<Principal>>;
