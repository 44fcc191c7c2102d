//! People's pages: `GET/POST /login`, `POST /logout`, and the confirmation
//! page of a challenge, reached by its link (`/approve/{token}`) or from
//! the inbox (`/approvals/{id}`). GET never changes anything; a decision is
//! a POST from a signed-in approver with a CSRF token bound to the session
//! and the challenge. Browsers get HTML; `Accept: application/json` gets
//! problem+json.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Path, Query, Request, State};
use axum::http::header::{ACCEPT, LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use serde::Deserialize;

use super::error::{refusal_status, ApiError};
use crate::approval::pages::{self, Confirm};
use crate::approval::port::Decided;
use crate::approval::session::{clear_cookie, cookie_secret, set_cookie};
use crate::approval::{
    challenge_callback, secs_ms, Approver, AuthMethod, Challenge, Refusal, Secret, StoredSession,
    Verdict,
};
use crate::config::Scope;
use crate::metrics::GateDecision;
use crate::state::AppState;

/// The people's pages: login, logout, and a challenge's confirmation page.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/approve/{token}", get(show_by_token).post(decide_by_token))
        .route("/approvals/{id}", get(show_by_id).post(decide_by_id))
}

/// A signed-in person: the session's secret (for CSRF) and its record.
#[derive(Debug, Clone)]
pub struct Person {
    /// The cookie's secret.
    pub secret: Secret,
    /// The stored session.
    pub session: StoredSession,
}

impl Person {
    fn approver(&self) -> Approver {
        Approver {
            subject: self.session.subject.clone(),
            roles: self.session.roles.clone(),
            may_approve: self.session.has(Scope::Approver),
            auth: self.session.auth,
        }
    }
}

/// The person behind a request: a trusted SSO header wins (a new session
/// is opened and its cookie returned), else the session cookie.
///
/// # Errors
/// The store failed.
pub async fn person(
    app: &AppState,
    headers: &HeaderMap,
    peer: Option<SocketAddr>,
) -> Result<(Option<Person>, Option<HeaderValue>), ApiError> {
    if let Some((subject, roles)) = app.config.approvals.sso_user(peer, headers) {
        if let Some(existing) = session_of(app, headers).await? {
            if existing.session.auth == AuthMethod::Sso && existing.session.subject == subject {
                return Ok((Some(existing), None));
            }
        }
        let scopes = app
            .config
            .approvals
            .sso_scopes
            .iter()
            .map(|s| s.as_str().to_owned());
        let (person, cookie) =
            open_session(app, subject, scopes.collect(), roles, AuthMethod::Sso).await?;
        return Ok((Some(person), Some(cookie)));
    }
    Ok((session_of(app, headers).await?, None))
}

async fn session_of(app: &AppState, headers: &HeaderMap) -> Result<Option<Person>, ApiError> {
    let Some(secret) = cookie_secret(headers) else {
        return Ok(None);
    };
    let session = app.store.session(&secret.digest()).await?;
    Ok(session.map(|session| Person { secret, session }))
}

async fn open_session(
    app: &AppState,
    subject: String,
    scopes: Vec<String>,
    roles: Vec<String>,
    auth: AuthMethod,
) -> Result<(Person, HeaderValue), ApiError> {
    let secret = Secret::generate();
    let ttl = app.config.approvals.session_ttl_secs;
    let session = StoredSession {
        id_hash: secret.digest(),
        subject,
        scopes,
        roles,
        auth,
        expires_at: app.clock.now_ms() + secs_ms(ttl),
    };
    app.store.insert_session(&session).await?;
    let cookie = set_cookie(&secret, secure(app), ttl);
    Ok((Person { secret, session }, cookie))
}

fn secure(app: &AppState) -> bool {
    app.config
        .server
        .public_base_url
        .as_deref()
        .is_some_and(|u| u.starts_with("https://"))
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

/// A local path to return to after sign-in (never another site).
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n.to_owned(),
        _ => "/approvals".to_owned(),
    }
}

fn with_cookie(mut response: Response, cookie: Option<HeaderValue>) -> Response {
    if let Some(cookie) = cookie {
        response.headers_mut().append(SET_COOKIE, cookie);
    }
    response
}

fn see_other(to: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(to) {
        response.headers_mut().insert(LOCATION, value);
    }
    response
}

/// `?next=` of the sign-in page.
#[derive(Debug, Deserialize)]
struct NextQuery {
    next: Option<String>,
}

async fn login_page(
    State(app): State<AppState>,
    Query(q): Query<NextQuery>,
    req: Request,
) -> Response {
    let next = safe_next(q.next.as_deref());
    match person(&app, req.headers(), peer_of(&req)).await {
        Ok((Some(_), cookie)) if cookie.is_some() => with_cookie(see_other(&next), cookie),
        Ok(_) => pages::respond(StatusCode::OK, pages::login(&next, None)),
        Err(err) => err.into_response(),
    }
}

/// The sign-in form.
#[derive(Debug, Deserialize)]
struct LoginForm {
    token: String,
    next: Option<String>,
}

async fn login(State(app): State<AppState>, Form(form): Form<LoginForm>) -> Response {
    let next = safe_next(form.next.as_deref());
    let principal = app.auth.authenticate(form.token.trim()).cloned();
    let Some(p) = principal.filter(|p| p.has(Scope::Approver) || p.has(Scope::Operator)) else {
        tracing::warn!("sign-in refused: unknown token or one without approver/operator scope");
        let page = pages::login(
            &next,
            Some("That token is not an approver or operator token."),
        );
        return pages::respond(StatusCode::UNAUTHORIZED, page);
    };
    let scopes = p.scopes.iter().map(|s| s.as_str().to_owned()).collect();
    match open_session(
        &app,
        p.subject.clone(),
        scopes,
        p.roles.clone(),
        AuthMethod::Token,
    )
    .await
    {
        Ok((_, cookie)) => with_cookie(see_other(&next), Some(cookie)),
        Err(err) => err.into_response(),
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
    let person = match session_of(&app, &headers).await {
        Ok(p) => p,
        Err(err) => return err.into_response(),
    };
    if let Some(p) = person {
        if !p.secret.csrf_matches("logout", &form.csrf) {
            return refused(&headers, &Refusal::BadCsrf, None);
        }
        if let Err(err) = app.store.delete_session(&p.session.id_hash).await {
            return ApiError::from(err).into_response();
        }
    }
    with_cookie(see_other("/login"), Some(clear_cookie(secure(&app))))
}

/// Answers a refusal as a page or as problem+json.
fn refused(headers: &HeaderMap, refusal: &Refusal, sign_in: Option<&str>) -> Response {
    if wants_json(headers) {
        return ApiError::ApprovalRefused(refusal.clone()).into_response();
    }
    pages::respond(refusal_status(refusal), pages::refusal(refusal, sign_in))
}

/// Which challenge a page is about.
enum Handle {
    Token(String),
    Id(String),
}

impl Handle {
    fn path(&self) -> String {
        match self {
            Self::Token(t) => format!("/approve/{t}"),
            Self::Id(id) => format!("/approvals/{id}"),
        }
    }

    async fn find(&self, app: &AppState) -> Result<Option<Challenge>, ApiError> {
        Ok(match self {
            Self::Token(t) => match Secret::parse(t) {
                Some(secret) => app.store.challenge_by_token(&secret.digest()).await?,
                None => None,
            },
            Self::Id(id) if id.len() <= 64 => app.store.challenge(id).await?,
            Self::Id(_) => None,
        })
    }
}

async fn show_by_token(
    State(app): State<AppState>,
    Path(token): Path<String>,
    req: Request,
) -> Response {
    show(app, Handle::Token(token), req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn show_by_id(State(app): State<AppState>, Path(id): Path<String>, req: Request) -> Response {
    show(app, Handle::Id(id), req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn show(app: AppState, handle: Handle, req: Request) -> Result<Response, ApiError> {
    let headers = req.headers().clone();
    let path = handle.path();
    let (person, cookie) = person(&app, &headers, peer_of(&req)).await?;
    let Some(person) = person else {
        return Ok(refused(&headers, &Refusal::NotSignedIn, Some(&path)));
    };
    let Some(challenge) = handle.find(&app).await? else {
        return Ok(with_cookie(
            refused(&headers, &Refusal::Invalid, None),
            cookie,
        ));
    };
    let barred = match app
        .store
        .get_run(&challenge.run_namespace()?, &challenge.run_key()?)
        .await?
    {
        Some(run) => challenge.check_person(&run, &person.approver()).err(),
        None => Some(Refusal::Invalid),
    };
    let expired = challenge.new.expires_at <= app.clock.now_ms();
    let barred = barred.or(expired.then_some(Refusal::Expired));
    if wants_json(&headers) {
        let card = super::approvals::ApprovalCard::from(&challenge);
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
struct DecisionForm {
    decision: Option<String>,
    csrf: Option<String>,
    reason: Option<String>,
}

async fn decide_by_token(
    State(app): State<AppState>,
    Path(token): Path<String>,
    ConnectInfoOpt(peer): ConnectInfoOpt,
    headers: HeaderMap,
    Form(form): Form<DecisionForm>,
) -> Response {
    decide(app, Handle::Token(token), peer, headers, form).await
}

async fn decide_by_id(
    State(app): State<AppState>,
    Path(id): Path<String>,
    ConnectInfoOpt(peer): ConnectInfoOpt,
    headers: HeaderMap,
    Form(form): Form<DecisionForm>,
) -> Response {
    decide(app, Handle::Id(id), peer, headers, form).await
}

async fn decide(
    app: AppState,
    handle: Handle,
    peer: Option<SocketAddr>,
    headers: HeaderMap,
    form: DecisionForm,
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
            let sign_in = matches!(refusal, Refusal::NotSignedIn).then(|| handle.path());
            refused(&headers, &refusal, sign_in.as_deref())
        }
        Err(err) => err.into_response(),
    }
}

type Decision = Result<(Verdict, Challenge), Refusal>;

async fn try_decide(
    app: &AppState,
    handle: &Handle,
    peer: Option<SocketAddr>,
    headers: &HeaderMap,
    form: DecisionForm,
) -> Result<Decision, ApiError> {
    let (person, _) = person(app, headers, peer).await?;
    let Some(person) = person else {
        return Ok(Err(Refusal::NotSignedIn));
    };
    let Some(challenge) = handle.find(app).await? else {
        return Ok(Err(Refusal::Invalid));
    };
    let csrf_ok = form
        .csrf
        .as_deref()
        .is_some_and(|t| person.secret.csrf_matches(&challenge.new.id, t));
    if !csrf_ok {
        return Ok(Err(Refusal::BadCsrf));
    }
    let Some(verdict) = form.decision.as_deref().and_then(Verdict::parse) else {
        return Ok(Err(Refusal::WrongDecision));
    };
    let Some(run) = app
        .store
        .get_run(&challenge.run_namespace()?, &challenge.run_key()?)
        .await?
    else {
        return Ok(Err(Refusal::Invalid));
    };
    let approver = person.approver();
    if let Err(refusal) = challenge.check(&run, &approver, verdict, app.clock.now_ms()) {
        return Ok(Err(refusal));
    }
    let reason = form
        .reason
        .map(|r| r.trim().chars().take(1000).collect::<String>())
        .filter(|r| !r.is_empty());
    let (decision, state) = match verdict {
        Verdict::Approve => ("approved", "approved"),
        Verdict::Reject => ("rejected", "failed_terminal"),
    };
    let mut effects = match verdict {
        Verdict::Approve => challenge.new.effects.clone(),
        Verdict::Reject => Vec::new(),
    };
    effects.extend(challenge_callback(&challenge, decision, state));
    let decided = Decided {
        challenge_id: challenge.new.id.clone(),
        verdict,
        approver: approver.subject.clone(),
        auth_method: approver.auth.as_str().into(),
        reason,
        effects,
    };
    let Some(run) = app.store.decide(&decided).await? else {
        // Someone else decided first, or it expired meanwhile.
        let now = handle.find(app).await?;
        return Ok(Err(match now {
            Some(c) if c.state != crate::approval::ChallengeState::Pending => {
                Refusal::Used(c.state.as_str())
            }
            _ => Refusal::Expired,
        }));
    };
    let outcome = match verdict {
        Verdict::Approve => GateDecision::Approved,
        Verdict::Reject => GateDecision::Rejected,
    };
    let waited = run.updated_at - challenge.created_at;
    app.metrics
        .gate_decided(&challenge.new.operation, outcome, waited);
    app.metrics.run_moved(&run);
    app.wake.notify_one();
    Ok(Ok((verdict, challenge)))
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
