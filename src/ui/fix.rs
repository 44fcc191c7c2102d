//! Replay after a fix in the console: `GET /ui/dead-letters/{id}/fix?
//! transform=NAME@VERSION` shows what a declared transform would send (the
//! bodies before and after through the redaction rules, their diff, the
//! hashes and the key); `POST …/replay-fixed` (CSRF, a reason required)
//! replays with it, through the same use case as the API.

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::Form;
use maud::{html, Markup};
use serde::Deserialize;

use super::error::{Result, UiError};
use super::frame::{json_block, Nav};
use super::purpose;
use super::session::Operator;
use crate::deadletter::correct::{Correction, Preview};
use crate::deadletter::fix::{preview, replay_fixed, Fix};
use crate::deadletter::replay::ReplayError;
use crate::deadletter::transform::TransformConfig;
use crate::deadletter::{ActionOutcome, DeadLetter, ReplayCommand};
use crate::state::AppState;

/// The transforms that may correct the record's failed effect.
pub fn transforms_for<'a>(app: &'a AppState, dl: &DeadLetter) -> Vec<&'a TransformConfig> {
    let operation = dl
        .last_request
        .as_ref()
        .and_then(|r| r.get("operation"))
        .and_then(|o| o.as_str())
        .or(dl.operation.as_deref());
    app.config
        .dead_letters
        .transforms
        .iter()
        .filter(|t| Some(t.operation.as_str()) == operation)
        .collect()
}

/// The form on the record's page that asks for a preview.
pub fn form(app: &AppState, dl: &DeadLetter) -> Markup {
    let transforms = transforms_for(app, dl);
    if transforms.is_empty() {
        return html! {};
    }
    html! {
        form.card.stack method="get" action={ "/ui/dead-letters/" (dl.id) "/fix" } aria-labelledby="fix-h" {
            h2 #fix-h { "Replay after a fix" }
            p.note { "Corrects the failed request's body with a transform declared in the configuration; the next page shows the diff before anything is sent." }
            label for="fix-transform" { "Transform" }
            select #fix-transform name="transform" required {
                @for t in &transforms {
                    option value=(t.label()) { (t.label()) @if let Some(d) = &t.description { " — " (d) } }
                }
            }
            button type="submit" { "Preview the correction" }
        }
    }
}

/// The transform a page or form names.
#[derive(Debug, Deserialize)]
pub struct Named {
    transform: Option<String>,
    csrf: Option<String>,
    reason: Option<String>,
}

fn fix_of(named: Option<&str>) -> Result<Fix> {
    let text = named.ok_or_else(|| UiError::Invalid("choose a transform".into()))?;
    let (name, version) = text
        .rsplit_once('@')
        .and_then(|(n, v)| Some((n.to_owned(), v.parse::<u32>().ok()?)))
        .ok_or_else(|| UiError::Invalid(format!("{text:?} is not NAME@VERSION")))?;
    Ok(Fix {
        correction: Correction::Transform { name, version },
        effect_id: None,
    })
}

fn refused(e: ReplayError) -> UiError {
    match e {
        ReplayError::Store(e) => UiError::Store(e),
        other => UiError::Refused(other.to_string()),
    }
}

/// The preview page.
///
/// # Errors
/// A malformed transform, a correction that cannot be made, a store failure.
pub async fn show(
    State(app): State<AppState>,
    viewer: Operator,
    Path(id): Path<String>,
    Query(named): Query<Named>,
) -> Result<Response> {
    let fix = fix_of(named.transform.as_deref())?;
    let p = preview(&app.replay, &id, &fix).await.map_err(refused)?;
    let label = named.transform.unwrap_or_default();
    let body = html! {
        h1 { "Replay after a fix" }
        p { "Dead letter " a href={ "/ui/dead-letters/" (id) } { code { (id) } } ", transform " code { (label) } }
        (summary(&p))
        form.card.stack method="post" action={ "/ui/dead-letters/" (id) "/replay-fixed" } aria-labelledby="go-h" {
            h2 #go-h { "Replay with this correction" }
            input type="hidden" name="csrf" value=(viewer.csrf(&purpose("replay-fixed", &id)));
            input type="hidden" name="transform" value=(label);
            label for="fix-reason" { "Reason (required)" }
            textarea #fix-reason name="reason" required maxlength="2000" {}
            button.good type="submit" { "Replay" }
        }
    };
    Ok(viewer.page("Replay after a fix", Nav::DeadLetters, body))
}

fn summary(p: &Preview) -> Markup {
    let c = &p.corrected;
    html! {
        div.scroll { table.kv {
            tr { th scope="row" { "Effect" } td { code { (c.effect_id) } } }
            tr { th scope="row" { "Body hash before → after" } td { code { (c.hash_before) } " → " code { (c.hash_after) } } }
            tr { th scope="row" { "Idempotency key" } td { code { (c.key_after) } " (" (c.key_rule) ")" } }
        } }
        h3 { "Diff (RFC 6902)" }
        (json_block(&p.diff))
        h3 { "Before" }
        (json_block(&p.before))
        h3 { "After" }
        (json_block(&p.after))
    }
}

/// Replays with the transform; `303` back to the record.
///
/// # Errors
/// Bad CSRF, no reason, a correction that cannot be made, a refusal (four
/// eyes, already resolved), a store failure: nothing changed.
pub async fn replay(
    State(app): State<AppState>,
    viewer: Operator,
    Path(id): Path<String>,
    Form(form): Form<Named>,
) -> Result<Response> {
    viewer.check_csrf(&purpose("replay-fixed", &id), form.csrf.as_deref())?;
    let fix = fix_of(form.transform.as_deref())?;
    let reason = super::form::required("reason", form.reason, "say why the correction is right")?;
    let retain_ms = app.config.dead_letters.retain_ms();
    let actor = viewer.subject().to_owned();
    let cmd = ReplayCommand::by_operator(id.clone(), actor, reason, retain_ms, false);
    let outcome = replay_fixed(&app.replay, cmd, &fix)
        .await
        .map_err(refused)?;
    let effects = match outcome {
        ActionOutcome::Done { effects, .. } => effects,
        ActionOutcome::Refused(r) => {
            return Err(UiError::Refused(format!(
                "{}; nothing was changed",
                r.describe()
            )))
        }
    };
    tracing::info!(dead_letter = %id, actor = viewer.subject(), "dead letter replayed with a correction from the console");
    Ok(viewer.see_other(&format!(
        "/ui/dead-letters/{id}?done=replayed&effects={effects}"
    )))
}
