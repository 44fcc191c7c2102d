//! `GET /ui/dead-letters/{id}`: one dead letter with its evidence and what
//! to do next; `POST …/replay`, `POST …/release` and `POST …/resolve`
//! (CSRF, a reason or a note required), each answered by a `303` back to the record with what
//! happened. The commands are the API's: the same store transaction, the
//! signed-in subject as the actor in the audit log.

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::Form;
use maud::{html, Markup};
use serde::Deserialize;

use super::error::{Result, UiError};
use super::form::{required, Card, ReasonForm};
use super::frame::{at, badge, json_block, or_dash, run_link, Nav};
use super::purpose;
use super::session::Operator;
use crate::clock::Millis;
use crate::deadletter::replay::{replay_one, ReplayError};
use crate::deadletter::request::as_sent;
use crate::deadletter::{
    ActionOutcome, DeadLetter, DeadLetterClass, ReplayCommand, Resolution, ResolveCommand,
};
use crate::ledger::RunState;
use crate::outbox::TargetConfig;
use crate::state::AppState;

/// What the last command did (shown once after the redirect).
#[derive(Debug, Deserialize)]
pub struct Done {
    /// `replayed`, `gated`, `released` or `resolved`.
    pub done: Option<String>,
    /// Effects re-queued.
    pub effects: Option<u64>,
}

/// The record's page.
///
/// # Errors
/// No such record, or a store failure.
pub async fn show(
    State(app): State<AppState>,
    viewer: Operator,
    Path(id): Path<String>,
    Query(done): Query<Done>,
) -> Result<Response> {
    let dl = find(&app, &id).await?;
    let now = app.clock.now_ms();
    let body = html! {
        h1 { "Dead letter " code { (dl.id) } }
        (flash(&done))
        p { (badge(dl.class.as_str())) " "
            @if dl.is_open() { (badge("open")) } @else { (badge("resolved")) }
            " Run " (run_link(&dl.namespace, &dl.key)) " · "
            a href={ "/ui/run?namespace=" (crate::approval::pages::urlencode(&dl.namespace)) "&key=" (crate::approval::pages::urlencode(&dl.key)) "#timeline" } { "its timeline, effects and attempts" } }
        @if dl.is_open() {
            p.card { strong { "Next: " } (dl.next_action.as_deref().unwrap_or(dl.class.next_action())) }
            (commands(&viewer, &dl))
            @if dl.current_state == Some(RunState::DeadLettered) { (super::fix::form(&app, &dl)) }
        } @else {
            (resolution(&dl, now))
        }
        h2 { "Evidence" }
        (evidence(&dl, now, &app.config.targets))
    };
    Ok(viewer.page(&format!("Dead letter {}", dl.id), Nav::DeadLetters, body))
}

async fn find(app: &AppState, id: &str) -> Result<DeadLetter> {
    if id.len() > 64 {
        return Err(UiError::NotFound("no such dead letter".into()));
    }
    app.store
        .dead_letter(id)
        .await?
        .ok_or_else(|| UiError::NotFound(format!("no dead letter {id}")))
}

fn flash(done: &Done) -> Markup {
    html! {
        @match done.done.as_deref() {
            Some("replayed") => p.flash.ok role="status" { "Replayed. " (done.effects.unwrap_or(0))
                " effect(s) are back in the outbox under their original idempotency keys; the dispatcher sends each once. (None: the run went back to failed_retryable for the workflow to re-run.)" },
            Some("gated") => p.flash.ok role="status" { "Replayed through the gate: the run waits for a new approval. "
                a href="/ui/approvals" { "Approvals inbox" } },
            Some("released") => p.flash.ok role="status" { "Released. The run is failed_retryable with a fresh reclaim budget: the workflow's next claim of the key re-runs it." },
            Some("resolved") => p.flash.ok role="status" { "Resolved. The run is closed as failed_terminal; nothing will be sent." },
            _ => {}
        }
    }
}

fn commands(viewer: &Operator, dl: &DeadLetter) -> Markup {
    let replayable = dl.class.stops_run() && dl.current_state == Some(RunState::DeadLettered);
    let page = format!("/ui/dead-letters/{}", dl.id);
    let card = |action, id, title, note, text, button, danger| Card {
        page: &page,
        object: &dl.id,
        action,
        id,
        title,
        note,
        text,
        button,
        danger,
    };
    if replayable && dl.namespace.starts_with(crate::proxy::NAMESPACE_PREFIX) {
        // An unknown key of the Idempotency-Key proxy: the operator checked
        // the upstream and says whether the request happened (docs/proxy.md).
        let found = card("resolve", "found", "Found upstream",
            "The upstream carried the request out: the key closes and is never forwarded again (resolved as compensated).",
            ("note", "What you found (required)"), "Found: close the key", true);
        let absent = card("release", "absent", "Not found upstream",
            "The upstream has no trace of it: the key is released, and the next request with it is forwarded.",
            ("reason", "What you checked (required)"), "Not found: forward on the next request", false);
        return html! { div.charts {
            (found.render(viewer, html! { input type="hidden" name="resolution" value="compensated"; }))
            (absent.render(viewer, html! {}))
        } };
    }
    let replay = card("replay", "replay", "Replay",
        "Sends the same effects again under the same idempotency keys (a gated operation asks for a new approval first). Recorded with your name and reason.",
        ("reason", "Reason (required)"), "Replay", false);
    let release = card("release", "release", "Release",
        "Gives a run that queued no effect back to the workflow: the run goes to failed_retryable with its reclaim budget restarted, and the next claim of the key re-runs it. A run with effects is refused; replay it instead.",
        ("reason", "Reason (required)"), "Release", false);
    let resolve = card(
        "resolve",
        "resolve",
        "Resolve",
        "Closes it for good: the run ends failed_terminal and nothing more is sent.",
        ("note", "Note (required)"),
        "Resolve",
        true,
    );
    html! {
        div.charts {
            @if replayable { (replay.render(viewer, html! {})) }
            @if replayable && releasable(dl.class) { (release.render(viewer, html! {})) }
            (resolve.render(viewer, html! {
                fieldset {
                    legend { "Resolution" }
                    label { input type="radio" name="resolution" value="reject" checked; " reject (nothing more is done)" }
                    label { input type="radio" name="resolution" value="compensated"; " compensated (handled by hand)" }
                }
            }))
        }
    }
}

/// The classes whose runs stop before any effect: a release is offered.
fn releasable(class: DeadLetterClass) -> bool {
    matches!(
        class,
        DeadLetterClass::Stranded
            | DeadLetterClass::ReclaimBudgetExhausted
            | DeadLetterClass::WorkflowError
    )
}

fn resolution(dl: &DeadLetter, now: Millis) -> Markup {
    html! {
        p.card {
            "Resolved as " strong { (dl.resolution.map(|r| r.as_str()).unwrap_or("?")) }
            @if let Some(by) = &dl.resolved_by { " by " strong { (by) } }
            @if let Some(t) = dl.resolved_at { " at " (at(t, now)) }
            @if let Some(note) = &dl.resolution_note { ": " (note) }
            @if let Some((ns, key)) = &dl.replaced_by { ". Replaced by " (run_link(ns, key)) }
        }
    }
}

/// The request the failed effect sent, as its target received it (the
/// credential headers named, never valued).
fn request_sent(dl: &DeadLetter, targets: &[TargetConfig]) -> Markup {
    let Some(stored) = &dl.last_request else {
        return html! {};
    };
    let shown = as_sent(stored, &dl.namespace, &dl.key, targets);
    let field = |name: &str| {
        shown
            .get(name)
            .and_then(|v| v.as_str())
            .unwrap_or("?")
            .to_owned()
    };
    html! {
        h3 { "Request sent" }
        p { code { (field("method")) " " (field("url")) } }
        @if let Some(headers) = shown.get("headers").and_then(|h| h.as_object()) {
            div.scroll { table.kv { @for (name, value) in headers {
                tr { th scope="row" { (name) } td { (value.as_str().unwrap_or("")) } }
            } } }
        }
        @if let Some(body) = shown.get("body").filter(|b| !b.is_null()) { (json_block(body)) }
    }
}

fn evidence(dl: &DeadLetter, now: Millis, targets: &[TargetConfig]) -> Markup {
    let row = |name: &str, value: Markup| html! { tr { th scope="row" { (name) } td { (value) } } };
    let text = |v: &Option<String>| or_dash(v.as_deref());
    html! {
        div.scroll { table.kv {
            (row("Recorded", at(dl.created_at, now)))
            (row("Component", html! { (dl.component) }))
            (row("Error", text(&dl.error)))
            (row("Operation", text(&dl.operation)))
            (row("Run state at record → now", html! { (dl.run_state.as_deref().unwrap_or("?")) " → "
                @match dl.current_state { Some(s) => (badge(s.as_str())), None => "gone" } }))
            (row("Event id", text(&dl.event_id)))
            (row("Correlation id", text(&dl.correlation_id)))
            (row("Workflow / schema version", html! { (dl.workflow_version.as_deref().unwrap_or("—")) " / " (dl.schema_version.as_deref().unwrap_or("—")) }))
            (row("Payload", html! { (dl.payload_ref.as_deref().unwrap_or("—")) " " code { (dl.payload_hash.as_deref().unwrap_or("")) } }))
            (row("Stored delivery", text(&dl.raw_event_id)))
            (row("Owner", text(&dl.owner)))
            (row("Replays so far", html! { (dl.replay_count) }))
            (row("Previous record", html! { @if let Some(p) = &dl.previous_id { a href={ "/ui/dead-letters/" (p) } { (p) } } @else { "—" } }))
            (row("Kept until", html! { @if let Some(t) = dl.retain_until { (at(t, now)) } @else { "—" } }))
        } }
        (request_sent(dl, targets))
        @if let Some(e) = &dl.last_evidence { h3 { "The target's answer" } (json_block(e)) }
        h3 { "Attempt history" }
        (json_block(&dl.attempts))
        h3 { "Detail" }
        (json_block(&dl.detail))
    }
}

/// Replays the record; `303` back to it.
///
/// # Errors
/// Bad CSRF, no reason, a refusal, or a store failure: nothing changed.
pub async fn replay(
    State(app): State<AppState>,
    viewer: Operator,
    Path(id): Path<String>,
    Form(form): Form<ReasonForm>,
) -> Result<Response> {
    let reason = form.reason(&viewer, "replay", &id, "say why it is safe to replay")?;
    let (run_state, effects) = run_replay(&app, &viewer, &id, reason, false).await?;
    tracing::info!(dead_letter = %id, actor = viewer.subject(), effects, "dead letter replayed from the console");
    let code = if run_state == Some(RunState::AwaitingHuman) {
        "gated"
    } else {
        "replayed"
    };
    Ok(viewer.see_other(&format!(
        "/ui/dead-letters/{id}?done={code}&effects={effects}"
    )))
}

/// Releases the record's run to the workflow's re-run; `303` back to it.
///
/// # Errors
/// Bad CSRF, no reason, a refusal (a run with effects), or a store
/// failure: nothing changed.
pub async fn release(
    State(app): State<AppState>,
    viewer: Operator,
    Path(id): Path<String>,
    Form(form): Form<ReasonForm>,
) -> Result<Response> {
    let reason = form.reason(&viewer, "release", &id, "say why")?;
    run_replay(&app, &viewer, &id, reason, true).await?;
    tracing::info!(dead_letter = %id, actor = viewer.subject(), "dead letter released from the console");
    Ok(viewer.see_other(&format!("/ui/dead-letters/{id}?done=released")))
}

/// Runs the viewer's replay (or release) of `id`: the run's state after
/// it and the effects re-queued.
async fn run_replay(
    app: &AppState,
    viewer: &Operator,
    id: &str,
    reason: String,
    release: bool,
) -> Result<(Option<RunState>, u64)> {
    let retain_ms = app.config.dead_letters.retain_ms();
    let actor = viewer.subject().to_owned();
    let cmd = ReplayCommand::by_operator(id.to_owned(), actor, reason, retain_ms, release);
    let outcome = replay_one(&app.replay, cmd).await.map_err(|e| match e {
        ReplayError::Store(e) => UiError::Store(e),
        other => UiError::Refused(format!("{other}; nothing was changed")),
    })?;
    done(outcome)
}

fn done(outcome: ActionOutcome) -> Result<(Option<RunState>, u64)> {
    match outcome {
        ActionOutcome::Done { run, effects, .. } => Ok((run.map(|r| r.state), effects)),
        ActionOutcome::Refused(r) => Err(UiError::Refused(format!(
            "{}; nothing was changed",
            r.describe()
        ))),
    }
}

/// The resolve form.
#[derive(Debug, Deserialize)]
pub struct ResolveForm {
    csrf: Option<String>,
    resolution: Option<String>,
    note: Option<String>,
}

/// Resolves the record; `303` back to it.
///
/// # Errors
/// Bad CSRF, a bad resolution, no note, a refusal, or a store failure:
/// nothing changed.
pub async fn resolve(
    State(app): State<AppState>,
    viewer: Operator,
    Path(id): Path<String>,
    Form(form): Form<ResolveForm>,
) -> Result<Response> {
    viewer.check_csrf(&purpose("resolve", &id), form.csrf.as_deref())?;
    let resolution = match form.resolution.as_deref() {
        Some("reject") => Resolution::Reject,
        Some("compensated") => Resolution::Compensated,
        _ => return Err(UiError::Invalid("choose reject or compensated".into())),
    };
    let note = required("note", form.note, "say why")?;
    let cmd = ResolveCommand {
        id: id.clone(),
        resolution,
        actor: viewer.subject().to_owned(),
        note,
        retain_ms: app.config.dead_letters.retain_ms(),
    };
    done(app.store.resolve_dead_letter(&cmd).await?)?;
    tracing::info!(dead_letter = %id, actor = viewer.subject(), "dead letter resolved from the console");
    Ok(viewer.see_other(&format!("/ui/dead-letters/{id}?done=resolved")))
}
