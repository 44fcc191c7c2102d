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
use axum::Router;

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

/// Routes a workflow engine calls.
pub const WORKFLOW: &[Scope] = &[Scope::Workflow];
/// Read routes that workflows and operators both use.
pub const WORKFLOW_OR_OPERATOR: &[Scope] = &[Scope::Workflow, Scope::Operator];
/// Operator routes (admins hold every scope).
pub const OPERATOR_OR_ADMIN: &[Scope] = &[Scope::Operator];
/// The approvals inbox: approvers and operators.
pub const APPROVER_OR_OPERATOR: &[Scope] = &[Scope::Approver, Scope::Operator];
/// The admin routes (tokens).
pub const ADMIN: &[Scope] = &[Scope::Admin];
/// The Idempotency-Key proxy (`/proxy/{name}/…`): tokens with the proxy
/// scope (admins hold every scope).
pub const PROXY: &[Scope] = &[Scope::Proxy];

/// A router whose routes admit only callers holding one of the scopes.
pub trait Scoped {
    /// The routes so far, behind [`scoped`] with `scopes`.
    #[must_use]
    fn only(self, state: AppState, scopes: &'static [Scope]) -> Self;
}

impl Scoped for Router<AppState> {
    fn only(self, state: AppState, scopes: &'static [Scope]) -> Self {
        self.route_layer(axum::middleware::from_fn_with_state(
            (state, scopes),
            scoped,
        ))
    }
}

/// Middleware for routes that need one of a set of scopes (one of the
/// sets above), as [`Scoped::only`] adds it.
///
/// # Errors
/// As [`require`].
pub async fn scoped(
    State((app, needed)): State<(AppState, &'static [Scope])>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    require(&app, needed, req, next).await
}
