//! People's pages: `GET/POST /login`, `POST /logout`, and the confirmation
//! page of a challenge, reached by its link (`/approve/{token}`) or from
//! the inbox (`/approvals/{id}`). GET never changes anything; a decision is
//! a POST from a signed-in approver with a CSRF token bound to the session
//! and the challenge. Browsers get HTML; `Accept: application/json` gets
//! problem+json. Who is signed in is `approval::people`'s; the view and
//! the decision are `approval::decide`'s.

use std::net::SocketAddr;

use crate::api::PathId;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::header::ACCEPT;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use serde::Deserialize;

use super::error::{refusal_status, ApiError};
use crate::approval::decide::{Decision, DecisionForm, Handle, Viewed};
use crate::approval::pages::{self, see_other, with_cookie, Confirm};
use crate::approval::people::posted_from_another_site;
use crate::approval::session::clear_cookie;
use crate::approval::{AuthMethod, Refusal};
use crate::state::AppState;

/// The people's pages: login, logout, and a challenge's confirmation page.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/approve/{token}", get(show_by_token).post(decide_by_token))
        .route("/approvals/{id}", get(show_by_id).post(decide_by_id))
}

fn peer_of(req: &Request) -> Option<SocketAddr> {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
}

fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/json") && !v.contains("text/html"))
}

/// A local path to return to after sign-in (never another site): one
/// slash, then visible ASCII without a backslash. A browser drops tabs
/// and newlines from a `Location`, so `/\t/evil.example` would become the
/// protocol-relative `//evil.example`; such paths go to `/approvals`.
pub(crate) fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n[1..].starts_with(['/', '\\'])
                && n.bytes().all(|b| b.is_ascii_graphic() && b != b'\\') =>
        {
            n.to_owned()
        }
        _ => "/approvals".to_owned(),
    }
}

/// `?next=` of the sign-in page.
#[derive(Debug, Deserialize)]
pub(crate) struct NextQuery {
    pub(crate) next: Option<String>,
}

/// The OpenID provider's name, for the sign-in page's link.
fn provider_name(app: &AppState) -> Option<&str> {
    app.oidc.as_deref().map(|o| o.display_name())
}

async fn login_page(
    State(app): State<AppState>,
    Query(q): Query<NextQuery>,
    req: Request,
) -> Response {
    let next = safe_next(q.next.as_deref());
    match app.people().person(req.headers(), peer_of(&req)).await {
        Ok((Some(_), cookie)) if cookie.is_some() => with_cookie(see_other(&next), cookie),
        Ok(_) => pages::respond(
            StatusCode::OK,
            pages::login(&next, None, provider_name(&app)),
        ),
        Err(err) => ApiError::from(err).into_response(),
    }
}

/// The sign-in form.
#[derive(Debug, Deserialize)]
struct LoginForm {
    token: String,
    next: Option<String>,
}

async fn login(
    State(app): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let next = safe_next(form.next.as_deref());
    // Only a configured base names the origin (the loopback default may
    // name port 0); without one the request's own Host does.
    let server = &app.config.server;
    let public_base = server.public_base_url.as_ref().and(server.public_base());
    if posted_from_another_site(&headers, public_base.as_deref()) {
        tracing::warn!("sign-in refused: the form was posted from another site");
        let page = pages::login(
            &next,
            Some("Sign in from this page: a form on another site cannot sign you in."),
            provider_name(&app),
        );
        return pages::respond(StatusCode::FORBIDDEN, page);
    }
    match app.people().sign_in(&form.token).await {
        Ok(Some((_, cookie))) => with_cookie(see_other(&next), Some(cookie)),
        Ok(None) => {
            tracing::warn!("sign-in refused: unknown token or one without approver/operator scope");
            let page = pages::login(
                &next,
                Some("That token is not an approver or operator token."),
                provider_name(&app),
            );
            pages::respond(StatusCode::UNAUTHORIZED, page)
        }
        Err(err) => ApiError::from(err).into_response(),
    }
}

/// The sign-out form.
#[derive(Debug, Deserialize)]
struct LogoutForm {
    csrf: String,
}

async fn logout(
    State(app): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LogoutForm>,
) -> Response {
    let people = app.people();
    let person = match people.session_of(&headers).await {
        Ok(p) => p,
        Err(err) => return ApiError::from(err).into_response(),
    };
    let mut single_sign_on = false;
    if let Some(p) = person {
        if !p.secret.csrf_matches("logout", &form.csrf) {
            return refused(&headers, &Refusal::BadCsrf, None);
        }
        if let Err(err) = people.sign_out(&p).await {
            return ApiError::from(err).into_response();
        }
        single_sign_on = p.session.auth == AuthMethod::Sso;
    }
    // A single-sign-on session ends at the OpenID provider too, when its
    // discovery names an end_session_endpoint (RP-initiated logout).
    let provider = match (single_sign_on, app.oidc.as_deref()) {
        (true, Some(oidc)) => oidc.logout_url().await,
        _ => None,
    };
    let answer = match provider {
        Some(url) => pages::respond(
            StatusCode::OK,
            pages::onward("Signed out; signing out at the provider", url.as_str()),
        ),
        None => see_other("/login"),
    };
    with_cookie(answer, Some(clear_cookie(people.secure)))
}

/// Answers a refusal as a page or as problem+json.
fn refused(headers: &HeaderMap, refusal: &Refusal, sign_in: Option<&str>) -> Response {
    if wants_json(headers) {
        return ApiError::ApprovalRefused(refusal.clone()).into_response();
    }
    pages::respond(refusal_status(refusal), pages::refusal(refusal, sign_in))
}

/// The page's path for a challenge.
fn path_of(handle: &Handle) -> String {
    match handle {
        Handle::Token(t) => format!("/approve/{t}"),
        Handle::Id(id) => format!("/approvals/{id}"),
    }
}

async fn show_by_token(
    State(app): State<AppState>,
    PathId(token): PathId,
    req: Request,
) -> Response {
    show(app, Handle::Token(token), req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn show_by_id(State(app): State<AppState>, PathId(id): PathId, req: Request) -> Response {
    show(app, Handle::Id(id), req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn show(app: AppState, handle: Handle, req: Request) -> Result<Response, ApiError> {
    let headers = req.headers().clone();
    let path = path_of(&handle);
    let (person, cookie) = app.people().person(&headers, peer_of(&req)).await?;
    let Some(person) = person else {
        return Ok(refused(&headers, &Refusal::NotSignedIn, Some(&path)));
    };
    let Some(Viewed { challenge, barred }) = app.decisions().view(&handle, &person).await? else {
        return Ok(with_cookie(
            refused(&headers, &Refusal::Invalid, None),
            cookie,
        ));
    };
    if wants_json(&headers) {
        let card = crate::approval::card::ApprovalCard::from(&challenge);
        return Ok(with_cookie(Json(card).into_response(), cookie));
    }
    let view = Confirm {
        challenge: &challenge,
        action: &path,
        csrf: barred
            .is_none()
            .then(|| person.secret.csrf(&challenge.new.id)),
        barred,
        subject: &person.session.subject,
    };
    Ok(with_cookie(
        pages::respond(StatusCode::OK, pages::confirm(&view)),
        cookie,
    ))
}

/// The decision form.
#[derive(Debug, Deserialize)]
struct DecisionFields {
    decision: Option<String>,
    csrf: Option<String>,
    reason: Option<String>,
    effects_digest: Option<String>,
}

async fn decide_by_token(
    State(app): State<AppState>,
    PathId(token): PathId,
    ConnectInfoOpt(peer): ConnectInfoOpt,
    headers: HeaderMap,
    Form(form): Form<DecisionFields>,
) -> Response {
    decide(app, Handle::Token(token), peer, headers, form).await
}

async fn decide_by_id(
    State(app): State<AppState>,
    PathId(id): PathId,
    ConnectInfoOpt(peer): ConnectInfoOpt,
    headers: HeaderMap,
    Form(form): Form<DecisionFields>,
) -> Response {
    decide(app, Handle::Id(id), peer, headers, form).await
}

async fn decide(
    app: AppState,
    handle: Handle,
    peer: Option<SocketAddr>,
    headers: HeaderMap,
    form: DecisionFields,
) -> Response {
    match try_decide(&app, &handle, peer, &headers, form).await {
        Ok(Ok((verdict, challenge))) => {
            if wants_json(&headers) {
                let body = serde_json::json!({ "decision": verdict.as_str(), "challenge_id": challenge.new.id });
                return Json(body).into_response();
            }
            pages::respond(StatusCode::OK, pages::decided(verdict.as_str(), &challenge))
        }
        Ok(Err(refusal)) => {
            tracing::warn!(
                refusal = refusal.slug(),
                "approval decision refused; nothing was sent"
            );
            let sign_in = matches!(refusal, Refusal::NotSignedIn).then(|| path_of(&handle));
            refused(&headers, &refusal, sign_in.as_deref())
        }
        Err(err) => err.into_response(),
    }
}

async fn try_decide(
    app: &AppState,
    handle: &Handle,
    peer: Option<SocketAddr>,
    headers: &HeaderMap,
    fields: DecisionFields,
) -> Result<Decision, ApiError> {
    let (person, _) = app.people().person(headers, peer).await?;
    let form = DecisionForm {
        decision: fields.decision,
        csrf: fields.csrf,
        reason: fields.reason,
        effects_digest: fields.effects_digest,
    };
    Ok(app
        .decisions()
        .decide(handle, person.as_ref(), form)
        .await?)
}

/// The peer address when the server records it.
#[derive(Debug)]
struct ConnectInfoOpt(Option<SocketAddr>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for ConnectInfoOpt {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Self(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::safe_next;

    #[test]
    fn next_stays_on_this_origin() {
        for local in [
            "/approvals",
            "/ui/dead-letters?class=permanent",
            "/approve/abc",
        ] {
            assert_eq!(safe_next(Some(local)), local);
        }
        for away in [
            "//evil.example",
            "/\\evil.example",
            "/\t/evil.example",
            "/\n/evil.example",
            "/ /evil.example",
            "https://evil.example",
            "evil.example",
            "/ok\\..\\x",
        ] {
            assert_eq!(safe_next(Some(away)), "/approvals", "{away:?}");
        }
        assert_eq!(safe_next(None), "/approvals");
    }
}
