//! API tokens made at run time (DESIGN.md §5), admin scope: create (the
//! token in the answer, once), list (never a token, never a digest),
//! revoke. The use cases are [`crate::tokens::Tokens`]'s.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::{ApiError, Result};
use super::{auth, ApiJson, Caller, PathId};
use crate::api::auth::Scoped;
use crate::state::AppState;
use crate::tokens::manage::{Source, TokenView};
use crate::tokens::{NamespacePattern, NewToken, Scope};

pub(super) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/admin/tokens", get(list).post(create))
        .route("/v1/admin/tokens/{id}/revoke", post(revoke))
        .only(state, auth::ADMIN)
}

/// `POST /v1/admin/tokens`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTokenBody {
    /// The person or workflow the token speaks for (the actor in the audit log).
    pub subject: String,
    /// `workflow`, `operator`, `approver`, `proxy`, `admin`: each must be
    /// one the caller holds.
    pub scopes: Vec<String>,
    /// Roles for approval policies: each must be one the caller holds.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Namespaces (`crm`) or prefixes (`billing:*`) the token reaches;
    /// absent, every namespace (only for a caller that reaches every one).
    pub namespaces: Option<Vec<String>>,
    /// When the token stops working (RFC 3339, in the future); absent, never.
    pub expires_at: Option<String>,
}

impl CreateTokenBody {
    fn parse(self) -> Result<NewToken> {
        let scopes = self
            .scopes
            .iter()
            .map(|s| {
                Scope::parse(s.trim()).ok_or_else(|| {
                    ApiError::invalid(
                        "scopes",
                        format!(
                            "{s:?} is not a scope (workflow, operator, approver, proxy, admin)"
                        ),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let namespaces = self
            .namespaces
            .map(|list| {
                list.iter()
                    .map(|p| {
                        NamespacePattern::parse(p).map_err(|e| ApiError::invalid("namespaces", e))
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?;
        let expires_at = self
            .expires_at
            .map(|at| {
                chrono::DateTime::parse_from_rfc3339(&at)
                    .map(|t| t.timestamp_millis())
                    .map_err(|e| {
                        ApiError::invalid("expires_at", format!("not an RFC 3339 time: {e}"))
                    })
            })
            .transpose()?;
        Ok(NewToken {
            subject: self.subject,
            scopes,
            roles: self.roles,
            namespaces,
            expires_at,
        })
    }
}

/// A token as the API lists it: never the token, never its digest.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenInfo {
    /// Its public handle (revoke by it).
    pub id: String,
    /// `config` (the config file's `[[tokens]]`, read-only here) or `stored`.
    pub source: String,
    /// The person or workflow it speaks for.
    pub subject: String,
    /// Its scopes.
    pub scopes: Vec<String>,
    /// Its roles.
    pub roles: Vec<String>,
    /// The namespaces it reaches; null, every namespace.
    pub namespaces: Option<Vec<String>>,
    /// Who made it; null for the config file and the first-start token.
    pub created_by: Option<String>,
    /// When it was made (RFC 3339); null for the config file.
    pub created_at: Option<String>,
    /// When it stops working (RFC 3339); null, never.
    pub expires_at: Option<String>,
    /// When it was revoked (RFC 3339); null, not revoked.
    pub revoked_at: Option<String>,
    /// `active`, `expired` or `revoked`.
    pub state: String,
}

fn rfc3339(ms: Option<i64>) -> Option<String> {
    ms.map(|ms| crate::clock::to_datetime(ms).to_rfc3339())
}

impl From<TokenView> for TokenInfo {
    fn from(v: TokenView) -> Self {
        Self {
            id: v.id,
            source: match v.source {
                Source::Config => "config",
                Source::Stored => "stored",
            }
            .into(),
            subject: v.subject,
            scopes: v.scopes,
            roles: v.roles,
            namespaces: v.namespaces,
            created_by: v.created_by,
            created_at: rfc3339(v.created_at),
            expires_at: rfc3339(v.expires_at),
            revoked_at: rfc3339(v.revoked_at),
            state: v.state.into(),
        }
    }
}

/// A token just made: the token itself, shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedToken {
    /// The token (`og_…`). Only its digest is stored: it cannot be shown again.
    pub token: String,
    /// How it is listed from now on.
    #[serde(flatten)]
    pub info: TokenInfo,
}

/// Makes a token; the answer holds the token, once.
#[utoipa::path(post, path = "/v1/admin/tokens", tag = "tokens", operation_id = "create_token",
    request_body = CreateTokenBody,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "The token (shown once) and how it is listed", body = CreatedToken),
        (status = 400, description = "A malformed field, or an expiry in the past", body = super::Problem),
        (status = 403, description = "Not admin, or the token would hold a scope, role or namespace the caller does not (token-exceeds-creator)", body = super::Problem),
    ))]
pub(super) async fn create(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateTokenBody>,
) -> Result<(StatusCode, Json<CreatedToken>)> {
    let new = body.parse()?;
    let created = app.tokens().create(&caller, new).await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedToken {
            token: created.secret.expose_secret().to_owned(),
            info: created.view.into(),
        }),
    ))
}

/// Every token: the config file's (read-only) and the stored ones.
#[utoipa::path(get, path = "/v1/admin/tokens", tag = "tokens", operation_id = "list_tokens",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every token, never a token's value or digest", body = [TokenInfo]),
        (status = 403, description = "The token lacks the admin scope", body = super::Problem),
    ))]
pub(super) async fn list(State(app): State<AppState>) -> Result<Json<Vec<TokenInfo>>> {
    let views = app.tokens().list().await?;
    Ok(Json(views.into_iter().map(TokenInfo::from).collect()))
}

/// Revokes a stored token: every instance refuses it within seconds.
#[utoipa::path(post, path = "/v1/admin/tokens/{id}/revoke", tag = "tokens",
    operation_id = "revoke_token",
    params(("id" = String, Path, description = "The token's id, as listed")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The token as revoked", body = TokenInfo),
        (status = 403, description = "The token lacks the admin scope", body = super::Problem),
        (status = 404, description = "No stored token has that id", body = super::Problem),
        (status = 409, description = "A config-file token, or one already revoked (token-not-revocable)", body = super::Problem),
    ))]
pub(super) async fn revoke(
    State(app): State<AppState>,
    caller: Caller,
    PathId(id): PathId,
) -> Result<Json<TokenInfo>> {
    let view = app.tokens().revoke(&caller, &id).await?;
    Ok(Json(view.into()))
}
