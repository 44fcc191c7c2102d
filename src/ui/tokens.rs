//! API tokens (admins): `GET /ui/tokens` lists every token (the config
//! file's as read-only) with a revoke button for stored ones and a form to
//! make one; `POST /ui/tokens` makes it and answers with a page that shows
//! the token this once (never a redirect: the token must not travel in a
//! URL); `POST /ui/tokens/{id}/revoke` revokes. Both forms carry CSRF
//! tokens bound to the session and their purpose. The use cases are
//! [`crate::tokens::Tokens`]'s, as the API's.

use axum::extract::{Query, State};
use axum::response::Response;
use axum::Form;
use maud::{html, Markup};
use secrecy::ExposeSecret;
use serde::Deserialize;

use super::error::{Result, UiError};
use super::frame::{badge, when, Nav};
use super::purpose;
use super::session::Operator;
use crate::approval::pages::urlencode;
use crate::config::Scope;
use crate::state::AppState;
use crate::tokens::manage::{Source, TokenView};
use crate::tokens::{NamespacePattern, NewToken};

const SCOPES: [Scope; 5] = [
    Scope::Workflow,
    Scope::Operator,
    Scope::Approver,
    Scope::Proxy,
    Scope::Admin,
];

fn require_admin(viewer: &Operator) -> Result<()> {
    if viewer.has(Scope::Admin) {
        Ok(())
    } else {
        Err(UiError::Forbidden("tokens need the admin scope".into()))
    }
}

/// What the last revocation did.
#[derive(Debug, Deserialize)]
pub struct Done {
    /// The id revoked.
    pub revoked: Option<String>,
}

/// Every token, and the form that makes one.
///
/// # Errors
/// Not an admin, or the store failed.
pub async fn show(
    State(app): State<AppState>,
    viewer: Operator,
    Query(done): Query<Done>,
) -> Result<Response> {
    require_admin(&viewer)?;
    let tokens = app.tokens().list().await?;
    let body = html! {
        h1 { "API tokens" }
        @if let Some(id) = &done.revoked {
            p.flash.ok role="status" { "Token " code { (id) } " is revoked: every instance refuses it within seconds." }
        }
        p.note { "Only a digest of each token is stored; a token is shown once, when it is made. Tokens of the config file are listed read-only: change them there." }
        div.scroll { table {
            thead { tr { th scope="col" { "Id" } th scope="col" { "Subject" } th scope="col" { "Scopes" }
                th scope="col" { "Namespaces" } th scope="col" { "Source" } th scope="col" { "Expires" }
                th scope="col" { "State" } th scope="col" { span.muted { "Revoke" } } } }
            tbody { @for t in &tokens { (row(&viewer, t)) } }
        } }
        (create_form(&viewer))
    };
    Ok(viewer.page("Tokens", Nav::Tokens, body))
}

fn row(viewer: &Operator, t: &TokenView) -> Markup {
    html! {
        tr {
            td { code { (t.id) } }
            th scope="row" { (t.subject) }
            td { (t.scopes.join(", ")) @if !t.roles.is_empty() { br; span.muted { "roles: " (t.roles.join(", ")) } } }
            td { @match &t.namespaces { Some(l) => { (l.join(", ")) }, None => span.muted { "every namespace" } } }
            td { @match t.source { Source::Config => { "config file" }, Source::Stored => {
                @match &t.created_by { Some(by) => { "made by " (by) }, None => { "first start" } } } } }
            td { @match t.expires_at { Some(at) => { (when(at)) }, None => span.muted { "never" } } }
            td { (badge(t.state)) }
            td { @if t.source == Source::Stored && t.revoked_at.is_none() {
                form method="post" action=(format!("/ui/tokens/{}/revoke", urlencode(&t.id))) {
                    input type="hidden" name="csrf" value=(viewer.csrf(&purpose("revoke-token", &t.id)));
                    button.danger type="submit" { "Revoke" }
                }
            } }
        }
    }
}

fn create_form(viewer: &Operator) -> Markup {
    html! {
        h2 { "Make a token" }
        form method="post" action="/ui/tokens" {
            input type="hidden" name="csrf" value=(viewer.csrf(&purpose("create-token", "")));
            label for="subject" { "Subject (the person or workflow it speaks for)" }
            input #subject type="text" name="subject" required maxlength="200";
            fieldset { legend { "Scopes (only scopes you hold)" }
                @for s in SCOPES { label { input type="checkbox" name=(format!("scope_{}", s.as_str())) value="on"; " " (s.as_str()) } } }
            label for="roles" { "Roles (comma-separated, only roles you hold; optional)" }
            input #roles type="text" name="roles";
            label for="namespaces" { "Namespaces (comma-separated, e.g. crm, billing:*; empty: every namespace you reach)" }
            input #namespaces type="text" name="namespaces";
            label for="expires_at" { "Expires at (RFC 3339, e.g. 2030-01-01T00:00:00Z; empty: never)" }
            input #expires_at type="text" name="expires_at";
            p { button.good type="submit" { "Make the token" } }
        }
    }
}

/// The form that makes a token (one checkbox per scope).
#[derive(Debug, Deserialize)]
pub struct CreateForm {
    subject: String,
    scope_workflow: Option<String>,
    scope_operator: Option<String>,
    scope_approver: Option<String>,
    scope_proxy: Option<String>,
    scope_admin: Option<String>,
    #[serde(default)]
    roles: String,
    #[serde(default)]
    namespaces: String,
    #[serde(default)]
    expires_at: String,
    csrf: Option<String>,
}

fn list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The form's fields as a new token.
fn parse_form(form: CreateForm) -> Result<NewToken> {
    let boxes = [
        &form.scope_workflow,
        &form.scope_operator,
        &form.scope_approver,
        &form.scope_proxy,
        &form.scope_admin,
    ];
    let scopes = SCOPES
        .into_iter()
        .zip(boxes)
        .filter(|(_, checked)| checked.is_some())
        .map(|(s, _)| s)
        .collect();
    let namespaces = list(&form.namespaces)
        .iter()
        .map(|p| NamespacePattern::parse(p).map_err(UiError::Invalid))
        .collect::<Result<Vec<_>>>()?;
    let expires_at = match form.expires_at.trim() {
        "" => None,
        at => Some(
            chrono::DateTime::parse_from_rfc3339(at)
                .map_err(|e| UiError::Invalid(format!("expires at: not an RFC 3339 time: {e}")))?
                .timestamp_millis(),
        ),
    };
    Ok(NewToken {
        subject: form.subject,
        scopes,
        roles: list(&form.roles),
        namespaces: (!namespaces.is_empty()).then_some(namespaces),
        expires_at,
    })
}

/// Makes a token and shows it, once.
///
/// # Errors
/// Not an admin, bad CSRF, a malformed field, more than the viewer holds,
/// or a store failure: nothing was made.
pub async fn create(
    State(app): State<AppState>,
    viewer: Operator,
    Form(form): Form<CreateForm>,
) -> Result<Response> {
    require_admin(&viewer)?;
    viewer.check_csrf(&purpose("create-token", ""), form.csrf.as_deref())?;
    let new = parse_form(form)?;
    let creator = viewer.principal(&app).await?;
    let created = app.tokens().create(&creator, new).await?;
    let v = &created.view;
    let body = html! {
        h1 { "Token made for " (v.subject) }
        p.card.warn role="status" { "Copy the token now: only its digest is kept, so it is shown this once." }
        label for="token" { "Token " code { (v.id) } }
        input #token type="text" readonly value=(created.secret.expose_secret());
        p { "Scopes: " (v.scopes.join(", "))
            @if let Some(at) = v.expires_at { ". Expires " (when(at)) } "." }
        p { a.button href="/ui/tokens" { "Back to the tokens" } }
    };
    Ok(viewer.page("Token made", Nav::Tokens, body))
}

/// The revoke form.
#[derive(Debug, Deserialize)]
pub struct RevokeForm {
    csrf: Option<String>,
}

/// Revokes a stored token; `303` back to the list.
///
/// # Errors
/// Not an admin, bad CSRF, an unknown, configured or revoked token, or a
/// store failure: nothing changed.
pub async fn revoke(
    State(app): State<AppState>,
    viewer: Operator,
    axum::extract::Path(id): axum::extract::Path<String>,
    Form(form): Form<RevokeForm>,
) -> Result<Response> {
    require_admin(&viewer)?;
    viewer.check_csrf(&purpose("revoke-token", &id), form.csrf.as_deref())?;
    let actor = viewer.principal(&app).await?;
    let view = app.tokens().revoke(&actor, &id).await?;
    Ok(viewer.see_other(&format!("/ui/tokens?revoked={}", urlencode(&view.id))))
}
