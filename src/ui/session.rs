//! Who is looking: the approval pages' session (cookie, or trusted single
//! sign-on), required by every console page. Nobody signed in → `303` to
//! `/login?next=<this page>`. The inbox takes approvers and operators
//! (as `GET /v1/approvals` does); every other page takes operators
//! ([`Operator`]). Forms carry a CSRF token bound to the session and to a
//! purpose naming the action and its object, checked in constant time.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::Markup;

use super::error::UiError;
use super::frame::{page, Bar, Head, Nav};
use crate::approval::pages::{respond, see_other, urlencode, with_cookie};
use crate::approval::people::Person;
use crate::config::Scope;
use crate::state::AppState;
use crate::tokens::Principal;

/// A signed-in person allowed into the console (approver or operator).
#[derive(Debug, Clone)]
pub struct Viewer {
    person: Person,
    /// A new session's cookie (single sign-on), to set with the answer.
    cookie: Option<HeaderValue>,
}

impl Viewer {
    /// The subject: the actor of every command done here.
    pub fn subject(&self) -> &str {
        &self.person.session.subject
    }

    /// Whether the session holds `scope` (admin holds every scope).
    pub fn has(&self, scope: Scope) -> bool {
        self.person.session.has(scope)
    }

    /// The principal behind the session, as the API would see it: a token
    /// session's token as it is now (its namespaces included), a single
    /// sign-on session's subject, scopes and roles (every namespace).
    ///
    /// # Errors
    /// The store failed; [`UiError::Forbidden`] when the token is gone.
    pub async fn principal(&self, app: &AppState) -> Result<Principal, UiError> {
        let s = &self.person.session;
        if let Some(credential) = &s.credential {
            return app
                .auth
                .by_digest(credential)
                .await?
                .ok_or_else(|| UiError::Forbidden("the token of this session is gone".into()));
        }
        Ok(Principal {
            subject: s.subject.clone(),
            scopes: s.scopes.iter().filter_map(|n| Scope::parse(n)).collect(),
            roles: s.roles.clone(),
            namespaces: crate::tokens::Namespaces::All,
        })
    }

    /// The CSRF token of a form about `purpose`.
    pub fn csrf(&self, purpose: &str) -> String {
        self.person.secret.csrf(purpose)
    }

    /// Checks a form's CSRF token for `purpose`.
    ///
    /// # Errors
    /// [`UiError::BadCsrf`] when it is missing or not this session's.
    pub fn check_csrf(&self, purpose: &str, presented: Option<&str>) -> Result<(), UiError> {
        match presented {
            Some(token) if self.person.secret.csrf_matches(purpose, token) => Ok(()),
            _ => {
                tracing::warn!(
                    subject = self.subject(),
                    "console form refused: bad CSRF token"
                );
                Err(UiError::BadCsrf)
            }
        }
    }

    /// A console page with the security headers of the approval pages.
    pub fn page(&self, title: &str, active: Nav, body: Markup) -> Response {
        self.page_with(title, active, &Head::default(), body)
    }

    /// [`Viewer::page`] with head extras (a refresh).
    pub fn page_with(&self, title: &str, active: Nav, head: &Head, body: Markup) -> Response {
        let bar = Bar {
            subject: self.subject(),
            operator: self.has(Scope::Operator),
            admin: self.has(Scope::Admin),
            logout_csrf: self.csrf("logout"),
        };
        let html = page(title, active, &bar, head, body);
        self.with_cookie(respond(StatusCode::OK, html))
    }

    /// `303 See Other` to a local path (after a command: post, redirect, get).
    pub fn see_other(&self, to: &str) -> Response {
        self.with_cookie(see_other(to))
    }

    fn with_cookie(&self, response: Response) -> Response {
        with_cookie(response, self.cookie.clone())
    }
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, Response> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0);
        let (found, cookie) = app
            .people()
            .person(&parts.headers, peer)
            .await
            .map_err(|e| UiError::from(e).into_response())?;
        let Some(person) = found else {
            let here = parts
                .uri
                .path_and_query()
                .map_or("/ui", |p| p.as_str())
                .to_owned();
            return Err(see_other(&format!("/login?next={}", urlencode(&here))));
        };
        let viewer = Self { person, cookie };
        if viewer.has(Scope::Operator) || viewer.has(Scope::Approver) {
            Ok(viewer)
        } else {
            Err(UiError::Forbidden(
                "the console needs the operator scope (the approvals inbox: approver or operator)"
                    .into(),
            )
            .into_response())
        }
    }
}

/// A signed-in person holding the operator scope.
#[derive(Debug, Clone)]
pub struct Operator(pub Viewer);

impl std::ops::Deref for Operator {
    type Target = Viewer;

    fn deref(&self) -> &Viewer {
        &self.0
    }
}

impl FromRequestParts<AppState> for Operator {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, Response> {
        let viewer = Viewer::from_request_parts(parts, app).await?;
        if viewer.has(Scope::Operator) {
            Ok(Self(viewer))
        } else {
            Err(UiError::Forbidden(format!(
                "{} is signed in without the operator scope: this page is for operators. The \
                 approvals inbox is at /ui/approvals.",
                viewer.subject()
            ))
            .into_response())
        }
    }
}
