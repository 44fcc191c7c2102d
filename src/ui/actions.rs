//! The kill switch: `GET /ui/actions` shows every scope (all targets, and
//! each configured target) with its state and how many effects it holds;
//! a change goes through a confirmation page (`GET /ui/actions/confirm`,
//! which changes nothing and says what will happen) and then
//! `POST /ui/actions`. As in the API, operators read and admins change.

use axum::extract::{Query, State};
use axum::response::Response;
use axum::Form;
use maud::{html, Markup};
use serde::Deserialize;

use super::error::{Result, UiError};
use super::frame::{at, badge, Nav};
use super::purpose;
use super::session::Operator;
use crate::approval::pages::urlencode;
use crate::clock::Millis;
use crate::config::Scope;
use crate::outbox::killswitch::scope_for;
use crate::outbox::ActionSwitch;
use crate::state::AppState;

/// One scope as the page shows it.
struct Line {
    scope: String,
    switch: Option<ActionSwitch>,
    enabled: bool,
    pending: i64,
    held: i64,
    in_flight: i64,
}

async fn lines(app: &AppState) -> Result<Vec<Line>> {
    let backlog = app.store.backlog().await?;
    let switches = app.store.action_switches().await?;
    let global_off = switches.iter().any(|s| s.scope == "*" && !s.enabled);
    let count = |target: Option<&str>, states: &[&str]| -> i64 {
        backlog
            .iter()
            .filter(|(t, s, _)| target.is_none_or(|x| x == t) && states.contains(&s.as_str()))
            .map(|(_, _, n)| n)
            .sum()
    };
    let scopes =
        std::iter::once("*".to_owned()).chain(app.config.targets.iter().map(|t| t.name.clone()));
    Ok(scopes
        .map(|scope| {
            let switch = switches.iter().find(|s| s.scope == scope).cloned();
            let enabled = switch.as_ref().is_none_or(|s| s.enabled);
            let target = (scope != "*").then_some(scope.as_str());
            let pending = count(target, &["pending"]);
            let held = if !enabled || (target.is_some() && global_off) {
                pending
            } else {
                0
            };
            Line {
                in_flight: count(target, &["sending", "unknown"]),
                scope,
                switch,
                enabled,
                pending,
                held,
            }
        })
        .collect())
}

fn scope_name(scope: &str) -> String {
    if scope == "*" {
        "every target (global)".into()
    } else {
        format!("target {scope}")
    }
}

/// What the last change did.
#[derive(Debug, Deserialize)]
pub struct Done {
    /// `enabled` or `disabled`.
    pub done: Option<String>,
    /// The scope changed.
    pub scope: Option<String>,
}

/// The switches.
///
/// # Errors
/// The store failed.
pub async fn show(
    State(app): State<AppState>,
    viewer: Operator,
    Query(done): Query<Done>,
) -> Result<Response> {
    let lines = lines(&app).await?;
    let now = app.clock.now_ms();
    let admin = viewer.has(Scope::Admin);
    let body = html! {
        h1 { "Actions (kill switch)" }
        @if let (Some(d), Some(s)) = (done.done.as_deref(), done.scope.as_deref()) {
            @if d == "enabled" || d == "disabled" {
                p.flash.ok role="status" { "Actions " (d) " for " (scope_name(s)) "." }
            }
        }
        p.note { "While actions are disabled for a scope, its effects wait in the outbox (held) and nothing is sent; effects already being sent finish. Enabling releases them: each is sent once, under its idempotency key." }
        p.note { "Targets paused or disabled by their own failures (429, 503, 410) are on " a href="/ui/targets" { "Targets" } "." }
        @if !admin { p.flash.warn { "You can read the switches; changing them needs the admin scope." } }
        div.scroll { table {
            thead { tr { th scope="col" { "Scope" } th scope="col" { "Actions" } th.num scope="col" { "Held" }
                th.num scope="col" { "Pending" } th.num scope="col" { "Sending / unknown" } th scope="col" { "Last change" }
                @if admin { th scope="col" { span.muted { "Change" } } } } }
            tbody { @for l in &lines { (row(l, admin, now)) } }
        } }
    };
    Ok(viewer.page("Actions", Nav::Actions, body))
}

fn row(l: &Line, admin: bool, now: Millis) -> Markup {
    let to = !l.enabled;
    let href = format!(
        "/ui/actions/confirm?scope={}&enabled={to}",
        urlencode(&l.scope)
    );
    html! {
        tr {
            th scope="row" { (scope_name(&l.scope)) }
            td { @if l.enabled { (badge("enabled")) } @else { (badge("held")) " disabled" } }
            td.num { (l.held) } td.num { (l.pending) } td.num { (l.in_flight) }
            td { @match &l.switch { Some(s) => { (at(s.changed_at, now)) " by " (s.changed_by) }, None => span.muted { "never set (enabled)" } } }
            @if admin { td { a.button.(if to { "good" } else { "danger" }) href=(href) {
                @if to { "Enable…" } @else { "Disable…" } } } }
        }
    }
}

/// Which change to confirm or make.
#[derive(Debug, Deserialize)]
pub struct Change {
    scope: String,
    enabled: String,
    csrf: Option<String>,
}

impl Change {
    fn parse(&self, app: &AppState) -> Result<(String, bool)> {
        let enabled = parse_enabled(&self.enabled)?;
        let target = (self.scope != "*").then_some(self.scope.as_str());
        let scope = scope_for(target, &app.config.targets).map_err(UiError::Invalid)?;
        Ok((scope, enabled))
    }
}

/// A form's `enabled` field: `true` or `false`.
pub(super) fn parse_enabled(text: &str) -> Result<bool> {
    match text {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(UiError::Invalid("enabled must be true or false".into())),
    }
}

/// Refuses a viewer without the admin scope: `what` needs it.
pub(super) fn require_admin(viewer: &Operator, what: &str) -> Result<()> {
    if viewer.has(Scope::Admin) {
        Ok(())
    } else {
        Err(UiError::Forbidden(format!("{what} needs the admin scope")))
    }
}

/// The confirmation step: what will happen. Changes nothing.
///
/// # Errors
/// Not an admin, a bad scope, or a store failure.
pub async fn confirm(
    State(app): State<AppState>,
    viewer: Operator,
    Query(change): Query<Change>,
) -> Result<Response> {
    require_admin(&viewer, "changing the kill switch")?;
    let (scope, enabled) = change.parse(&app)?;
    let line = lines(&app).await?.into_iter().find(|l| l.scope == scope);
    let pending = line.as_ref().map_or(0, |l| l.pending);
    let held = line.as_ref().map_or(0, |l| l.held);
    let verb = if enabled { "Enable" } else { "Disable" };
    let body = html! {
        h1 { (verb) " actions for " (scope_name(&scope)) "?" }
        @if enabled {
            p.card { strong { (held) } " held effect(s) will be released and sent, each once under its idempotency key."
                @if scope != "*" { " (A global switch that is off still holds them.)" } }
        } @else {
            p.card.warn { "Nothing more will be sent to " (scope_name(&scope)) ". "
                strong { (pending) } " pending effect(s) will be held, and new ones wait too, until actions are enabled again. Effects already being sent finish." }
        }
        form.row method="post" action="/ui/actions" {
            input type="hidden" name="scope" value=(scope);
            input type="hidden" name="enabled" value=(enabled);
            input type="hidden" name="csrf" value=(viewer.csrf(&purpose("actions", &format!("{scope}:{enabled}"))));
            button.(if enabled { "good" } else { "danger" }) type="submit" { "Yes, " (verb.to_lowercase()) " actions" }
            a.button.secondary href="/ui/actions" { "Cancel" }
        }
    };
    Ok(viewer.page("Confirm the kill switch", Nav::Actions, body))
}

/// Sets the switch; `303` back to the switches.
///
/// # Errors
/// Not an admin, bad CSRF, a bad scope, or a store failure: nothing changed.
pub async fn change(
    State(app): State<AppState>,
    viewer: Operator,
    Form(change): Form<Change>,
) -> Result<Response> {
    require_admin(&viewer, "changing the kill switch")?;
    let (scope, enabled) = change.parse(&app)?;
    viewer.check_csrf(
        &purpose("actions", &format!("{scope}:{enabled}")),
        change.csrf.as_deref(),
    )?;
    app.kill_switch
        .set(&scope, enabled, viewer.subject(), &app.wake)
        .await?;
    let done = if enabled { "enabled" } else { "disabled" };
    Ok(viewer.see_other(&format!(
        "/ui/actions?done={done}&scope={}",
        urlencode(&scope)
    )))
}
