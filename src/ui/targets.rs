//! Target health: `GET /ui/targets` shows every configured target's state
//! (healthy, paused, probing, disabled), why, until when, and for how long
//! in all; an admin resumes or enables a target, or disables one, through
//! a confirmation page (`GET /ui/targets/confirm`, which changes nothing)
//! and then `POST /ui/targets`. As in the API, operators read and admins
//! change.

use axum::extract::{Query, State};
use axum::response::Response;
use axum::Form;
use maud::{html, Markup};
use serde::Deserialize;

use super::actions::{parse_enabled, require_admin};
use super::error::{Result, UiError};
use super::frame::{at, badge, Nav};
use super::purpose;
use super::session::Operator;
use crate::approval::pages::urlencode;
use crate::clock::Millis;
use crate::config::Scope;
use crate::outbox::health::{self, HealthState, TargetChangeError, TargetHealth};
use crate::state::AppState;

/// What the last change did.
#[derive(Debug, Deserialize)]
pub struct Done {
    /// `enabled` or `disabled`.
    pub done: Option<String>,
    /// The target changed.
    pub target: Option<String>,
}

/// Every target's health.
///
/// # Errors
/// The store failed.
pub async fn show(
    State(app): State<AppState>,
    viewer: Operator,
    Query(done): Query<Done>,
) -> Result<Response> {
    let now = app.clock.now_ms();
    let all = health::overview(app.store.as_ref(), &app.config.targets, now).await?;
    let admin = viewer.has(Scope::Admin);
    let body = html! {
        h1 { "Targets (health)" }
        @if let (Some(d), Some(t)) = (done.done.as_deref(), done.target.as_deref()) {
            @if d == "enabled" || d == "disabled" {
                p.flash.ok role="status" { "Target " (t) " " (d) "." }
            }
        }
        p.note { "A target that keeps failing transiently (not reachable, 429, 503) is paused for every instance for a cool-down, then one effect probes it; its effects wait meanwhile and spend none of their retry budget. A target that answers 410 Gone is disabled until someone enables it. Enabling a target resumes it at once: its waiting effects are sent, each once under its idempotency key. The kill switch (Actions) holds effects independently of this." }
        @if !admin { p.flash.warn { "You can read target health; changing it needs the admin scope." } }
        div.scroll { table {
            thead { tr { th scope="col" { "Target" } th scope="col" { "State" } th.num scope="col" { "Failures" }
                th scope="col" { "Paused until" } th.num scope="col" { "Seconds paused" } th scope="col" { "Cause" }
                th scope="col" { "Last change" } @if admin { th scope="col" { span.muted { "Change" } } } } }
            tbody { @for h in &all { (row(h, admin, now)) } }
        } }
    };
    Ok(viewer.page("Targets", Nav::Actions, body))
}

fn row(h: &TargetHealth, admin: bool, now: Millis) -> Markup {
    let enable = h.state != HealthState::Healthy;
    let href = format!(
        "/ui/targets/confirm?target={}&enabled={enable}",
        urlencode(&h.target)
    );
    html! {
        tr {
            th scope="row" { (h.target) }
            td { (badge(h.state.as_str())) }
            td.num { (h.failures) }
            td { @match h.paused_until { Some(t) => (at(t, now)), None => span.muted { "-" } } }
            td.num { (h.paused_total_ms(now) / 1000) }
            td { (h.cause.as_deref().unwrap_or("-")) }
            td { (at(h.changed_at, now)) " by " (h.changed_by) }
            @if admin { td { a.button.(if enable { "good" } else { "danger" }) href=(href) {
                @if h.state == HealthState::Disabled { "Enable…" }
                @else if enable { "Resume…" } @else { "Disable…" } } } }
        }
    }
}

/// Which change to confirm or make.
#[derive(Debug, Deserialize)]
pub struct Change {
    target: String,
    enabled: String,
    csrf: Option<String>,
}

impl Change {
    fn parse(&self, app: &AppState) -> Result<(String, bool)> {
        let enabled = parse_enabled(&self.enabled)?;
        if !app.config.targets.iter().any(|t| t.name == self.target) {
            return Err(UiError::NotFound(format!(
                "no target is named {:?}",
                self.target
            )));
        }
        Ok((self.target.clone(), enabled))
    }
}

/// The confirmation step: what will happen. Changes nothing.
///
/// # Errors
/// Not an admin, an unknown target.
pub async fn confirm(
    State(app): State<AppState>,
    viewer: Operator,
    Query(change): Query<Change>,
) -> Result<Response> {
    require_admin(&viewer, "enabling or disabling a target")?;
    let (target, enabled) = change.parse(&app)?;
    let verb = if enabled { "Enable" } else { "Disable" };
    let body = html! {
        h1 { (verb) " target " (target) "?" }
        @if enabled {
            p.card { "The target becomes healthy at once: its waiting effects are sent, each once under its idempotency key, with their retry budget intact." }
        } @else {
            p.card.warn { "Nothing more will be sent to " (target) " until someone enables it. Its effects wait in the outbox; effects already being sent finish." }
        }
        form.row method="post" action="/ui/targets" {
            input type="hidden" name="target" value=(target);
            input type="hidden" name="enabled" value=(enabled);
            input type="hidden" name="csrf" value=(viewer.csrf(&purpose("targets", &format!("{target}:{enabled}"))));
            button.(if enabled { "good" } else { "danger" }) type="submit" { "Yes, " (verb.to_lowercase()) " " (target) }
            a.button.secondary href="/ui/targets" { "Cancel" }
        }
    };
    Ok(viewer.page("Confirm the target change", Nav::Actions, body))
}

/// Enables or disables the target; `303` back to the targets.
///
/// # Errors
/// Not an admin, bad CSRF, an unknown target, or a store failure: nothing changed.
pub async fn change(
    State(app): State<AppState>,
    viewer: Operator,
    Form(change): Form<Change>,
) -> Result<Response> {
    require_admin(&viewer, "enabling or disabling a target")?;
    let (target, enabled) = change.parse(&app)?;
    viewer.check_csrf(
        &purpose("targets", &format!("{target}:{enabled}")),
        change.csrf.as_deref(),
    )?;
    let store = app.store.as_ref();
    health::set_enabled(
        store,
        &app.config.targets,
        &target,
        enabled,
        viewer.subject(),
        &app.wake,
    )
    .await
    .map_err(|err| match err {
        TargetChangeError::Unknown(_) => UiError::NotFound(err.to_string()),
        TargetChangeError::Store(err) => UiError::Store(err),
    })?;
    let done = if enabled { "enabled" } else { "disabled" };
    Ok(viewer.see_other(&format!(
        "/ui/targets?done={done}&target={}",
        urlencode(&target)
    )))
}
