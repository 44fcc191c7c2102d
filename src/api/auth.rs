//! Bearer tokens on the API: each names a subject, its scopes and roles.
//!
//! A request's token is looked up in the shared table of known tokens
//! ([`crate::tokens::Authenticator`], by digest only: the config file's in
//! memory, stored ones in the database through a cache of a few seconds). Routes declare
//! the scopes they need with [`require`]; the check runs before the body is
//! read, so a wrong token never causes a write.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;

use super::error::ApiError;
use crate::config::Scope;
use crate::state::AppState;

/// Checks the bearer token against `needed` (any one suffices) and puts the
/// [`Principal`](crate::tokens::Principal) into the request's extensions.
///
/// # Errors
/// [`ApiError::Unauthorized`] without a known token, [`ApiError::Forbidden`]
/// when it lacks every needed scope.
pub async fn require(
    app: &AppState,
    needed: &[Scope],
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let token = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .ok_or(ApiError::Unauthorized)?;
    let principal = app
        .auth
        .authenticate(token)
        .await?
        .ok_or(ApiError::Unauthorized)?;
    if !needed.iter().any(|s| principal.has(*s)) {
        let names: Vec<&str> = needed.iter().map(|s| s.as_str()).collect();
        return Err(ApiError::Forbidden {
            needed: names.join(" or "),
        });
    }
    req.extensions_mut().insert(Arc::new(principal));
    Ok(next.run(req).await)
}

/// Middleware for routes a workflow engine calls.
///
/// # Errors
/// As [`require`].
pub async fn workflow(
    State(app): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    require(&app, &[Scope::Workflow], req, next).await
}

/// Middleware for read routes that workflows and operators both use.
///
/// # Errors
/// As [`require`].
pub async fn workflow_or_operator(
    State(app): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    require(&app, &[Scope::Workflow, Scope::Operator], req, next).await
}

/// Middleware for operator routes (admins hold every scope).
///
/// # Errors
/// As [`require`].
pub async fn operator_or_admin(
    State(app): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    require(&app, &[Scope::Operator], req, next).await
}

/// Middleware for the approvals inbox: approvers and operators.
///
/// # Errors
/// As [`require`].
pub async fn approver_or_operator(
    State(app): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    require(&app, &[Scope::Approver, Scope::Operator], req, next).await
}

/// Middleware for the admin routes (tokens).
///
/// # Errors
/// As [`require`].
pub async fn admin(
    State(app): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    require(&app, &[Scope::Admin], req, next).await
}

/// Middleware for the Idempotency-Key proxy (`/proxy/{name}/…`): tokens
/// with the proxy scope (admins hold every scope).
///
/// # Errors
/// As [`require`].
pub async fn proxy(
    State(app): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    require(&app, &[Scope::Proxy], req, next).await
}
