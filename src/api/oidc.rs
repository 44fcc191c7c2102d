//! OpenID Connect sign-in pages: `GET /auth/oidc/start` sends the browser
//! to the provider, `GET /auth/oidc/callback` takes it back. They parse,
//! call `approval::oidc` and `approval::people`, and map the answer to a
//! page; both answer 404 when no provider is configured.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::approve::{safe_next, NextQuery};
use super::error::ApiError;
use crate::approval::oidc::flow::Callback;
use crate::approval::oidc::{pending, OidcError, Pending, CALLBACK_PATH};
use crate::approval::pages::{self, see_other, with_cookie};
use crate::state::AppState;

/// The sign-in's two routes.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/auth/oidc/start", get(start))
        .route(CALLBACK_PATH, get(callback))
}

fn not_configured() -> Response {
    let page = pages::sign_in_failed(
        "Sign-in with an OpenID provider is not configured here ([approvals.oidc]).",
        "/approvals",
    );
    pages::respond(StatusCode::NOT_FOUND, page)
}

async fn start(State(app): State<AppState>, Query(q): Query<NextQuery>) -> Response {
    let Some(oidc) = app.oidc.as_deref() else {
        return not_configured();
    };
    let next = safe_next(q.next.as_deref());
    match oidc.begin(&next).await {
        Ok((url, pending)) => {
            let cookie = pending.cookie(&app.server_key, app.config.server.is_https());
            with_cookie(see_other(url.as_str()), Some(cookie))
        }
        Err(err) => refused(&app, &err, &next),
    }
}

async fn callback(
    State(app): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<Callback>,
) -> Response {
    let Some(oidc) = app.oidc.as_deref() else {
        return not_configured();
    };
    let secure = app.config.server.is_https();
    let now = app.clock.now_ms();
    let pending = Pending::from_headers(&headers, &app.server_key, secure, now);
    let next = pending
        .as_ref()
        .map_or_else(|| "/approvals".to_owned(), |p| p.next.clone());
    let answer = match oidc.finish(query, pending).await {
        Ok(identity) => match app.people().sign_in_oidc(identity).await {
            Ok((person, cookie)) => {
                tracing::info!(
                    subject = %person.session.subject,
                    "signed in through the OpenID provider"
                );
                let heading = format!("Signed in as {}", person.session.subject);
                let page = pages::onward(&heading, &next);
                with_cookie(pages::respond(StatusCode::OK, page), Some(cookie))
            }
            Err(err) => ApiError::from(err).into_response(),
        },
        Err(err) => refused(&app, &err, &next),
    };
    with_cookie(answer, Some(pending::clear_cookie(secure)))
}

/// A sign-in that did not happen, as a page; logged by its slug and text
/// (which hold no code, token, state or nonce).
fn refused(app: &AppState, err: &OidcError, next: &str) -> Response {
    let status = match err {
        OidcError::ProviderDown(_) | OidcError::Discovery(_) => StatusCode::BAD_GATEWAY,
        OidcError::State(_) | OidcError::Exchange(_) => StatusCode::BAD_REQUEST,
        OidcError::Refused(_) | OidcError::IdToken(_) | OidcError::Claims(_) => {
            StatusCode::FORBIDDEN
        }
        OidcError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    tracing::warn!(
        refusal = err.slug(),
        issuer = %app.config.approvals.oidc.as_ref().map_or("", |c| c.issuer.as_str()),
        "OpenID Connect sign-in refused: {err}"
    );
    pages::respond(status, pages::sign_in_failed(&err.to_string(), next))
}
