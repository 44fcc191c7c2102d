//! Bulk replay jobs: `GET /ui/replay-jobs` (newest first) and
//! `GET /ui/replay-jobs/{id}` (progress, each item's outcome; the page
//! reloads itself every two seconds while the job runs), with
//! `POST …/stop` (between items; worked items stay worked) and
//! `POST …/resume`.

use axum::extract::{Path, State};
use axum::response::Response;
use axum::Form;
use maud::{html, Markup};
use serde::Deserialize;

use super::error::{Result, UiError};
use super::frame::{at, badge, json_block, or_dash, Head, Nav};
use super::purpose;
use super::session::Operator;
use crate::clock::Millis;
use crate::deadletter::{JobState, ReplayJob};
use crate::state::AppState;

/// Items listed on a job's page.
const ITEMS: i64 = 500;

/// The newest jobs.
///
/// # Errors
/// The store failed.
pub async fn list(State(app): State<AppState>, viewer: Operator) -> Result<Response> {
    let jobs = app.store.replay_jobs(50).await?;
    let now = app.clock.now_ms();
    let body = html! {
        h1 { "Replay jobs" }
        p.note { "A job replays an explicit selection of dead letters under a rate limit. Start one from "
            a href="/ui/dead-letters" { "the dead letters" } " (dry run first)." }
        @if jobs.is_empty() { p.muted { "No job yet." } } @else {
            div.scroll { table {
                thead { tr { th scope="col" { "Job" } th scope="col" { "State" } th scope="col" { "Progress" }
                    th scope="col" { "By" } th scope="col" { "Reason" } th scope="col" { "Created" } } }
                tbody { @for j in &jobs { tr {
                    td { a href={ "/ui/replay-jobs/" (j.id) } { code { (j.id) } } }
                    td { (badge(j.state.as_str())) }
                    td { (j.progress.total - j.progress.pending) " / " (j.progress.total) }
                    td { (j.created_by) } td { (j.reason) } td { (at(j.created_at, now)) }
                } } }
            } }
        }
    };
    Ok(viewer.page("Replay jobs", Nav::Jobs, body))
}

/// One job's progress.
///
/// # Errors
/// No such job, or a store failure.
pub async fn show(
    State(app): State<AppState>,
    viewer: Operator,
    Path(id): Path<String>,
) -> Result<Response> {
    let job = find(&app, &id).await?;
    let items = app.store.replay_job_items(&id, 0, ITEMS).await?;
    let now = app.clock.now_ms();
    let p = job.progress;
    let done = p.total - p.pending;
    let running = job.state == JobState::Running;
    let body = html! {
        h1 { "Replay job " code { (job.id) } }
        p { (badge(job.state.as_str())) " · " (done) " of " (p.total) " worked: "
            strong { (p.replayed) } " replayed, " strong { (p.refused) } " refused, " (p.pending) " pending." }
        label for="job-progress" { "Progress" }
        progress #job-progress value=(done) max=(p.total.max(1)) { (done) " of " (p.total) }
        @if running {
            p.note role="status" { "This page reloads every 2 seconds while the job runs. "
                @match &job.lease_owner { Some(r) => { "Runner: " code { (r) } "." },
                    None => { "No runner holds it yet: a runner works jobs on instances with dead_letters.runner_enabled." } } }
        }
        (controls(&viewer, &job))
        (meta(&job, now))
        h2 { "Items" }
        div.scroll { table {
            thead { tr { th.num scope="col" { "#" } th scope="col" { "Dead letter" } th scope="col" { "State" }
                th scope="col" { "Outcome" } th scope="col" { "Worked" } } }
            tbody { @for i in &items { tr {
                td.num { (i.seq) }
                td { a href={ "/ui/dead-letters/" (i.dead_letter_id) } { code { (i.dead_letter_id) } } }
                td { (badge(i.state.as_str())) }
                td { (or_dash(i.outcome.as_deref())) }
                td { @if let Some(t) = i.finished_at { (at(t, now)) } }
            } } }
        } }
        @if items.len() as i64 == ITEMS { p.note { "The first " (ITEMS) " items are shown." } }
    };
    let head = Head {
        refresh_secs: running.then_some(2),
    };
    Ok(viewer.page_with(&format!("Replay job {}", job.id), Nav::Jobs, &head, body))
}

fn controls(viewer: &Operator, job: &ReplayJob) -> Markup {
    html! {
        @match job.state {
            JobState::Running => form.row method="post" action={ "/ui/replay-jobs/" (job.id) "/stop" } {
                input type="hidden" name="csrf" value=(viewer.csrf(&purpose("job-stop", &job.id)));
                button.danger type="submit" { "Stop the job" }
                span.note { "It stops between items; worked items stay worked." }
            },
            JobState::Stopped if job.four_eyes && job.started_by.is_none() => form.row method="post" action={ "/ui/replay-jobs/" (job.id) "/resume" } {
                input type="hidden" name="csrf" value=(viewer.csrf(&purpose("job-resume", &job.id)));
                button.good type="submit" { "Start the job (second operator)" }
                span.note { "It replays an operation that needs two operators: someone other than " (job.created_by) " starts it." }
            },
            JobState::Stopped => form.row method="post" action={ "/ui/replay-jobs/" (job.id) "/resume" } {
                input type="hidden" name="csrf" value=(viewer.csrf(&purpose("job-resume", &job.id)));
                button.good type="submit" { "Resume the job" }
                span.note { "Stopped by " (job.changed_by) "; pending items are worked, none twice." }
            },
            JobState::Completed => p.flash.ok role="status" { "Completed." },
        }
    }
}

fn meta(job: &ReplayJob, now: Millis) -> Markup {
    html! {
        h2 { "The job" }
        div.scroll { table.kv {
            tr { th scope="row" { "Created" } td { (at(job.created_at, now)) " by " strong { (job.created_by) } } }
            tr { th scope="row" { "Reason" } td { (job.reason) } }
            tr { th scope="row" { "Rate" } td { (job.rate_per_sec) " item(s) per second" } }
            tr { th scope="row" { "Last change" } td { (at(job.updated_at, now)) " by " (job.changed_by) } }
            @if let Some(fix) = &job.fix { tr { th scope="row" { "Correction" } td { (fix_line(fix)) } } }
            @if job.four_eyes { tr { th scope="row" { "Four eyes" } td { @match &job.started_by { Some(s) => { "started by " strong { (s) } }, None => "waits for a second operator to start it" } } } }
        } }
        details { summary { "Dry-run summary at creation" } (json_block(&job.summary)) }
    }
}

/// What a job's fix sends: a transform by name, or a whole body by hash
/// (its content is on the dead letter's dry run, redacted).
fn fix_line(fix: &crate::deadletter::fix::Fix) -> Markup {
    let shown = fix.shown();
    let text = |k: &str| shown[k].as_str().map(str::to_owned);
    html! {
        @match (text("transform"), text("body_hash")) {
            (Some(t), _) => { "transform " code { (t) } }
            (None, Some(h)) => { "a whole corrected body, SHA-256 " code { (h) } }
            (None, None) => { "-" }
        }
        @if let Some(e) = text("effect_id") { ", effect " code { (e) } }
    }
}

async fn find(app: &AppState, id: &str) -> Result<ReplayJob> {
    if id.len() > 64 {
        return Err(UiError::NotFound("no such replay job".into()));
    }
    app.store
        .replay_job(id)
        .await?
        .ok_or_else(|| UiError::NotFound(format!("no replay job {id}")))
}

/// The stop and resume forms.
#[derive(Debug, Deserialize)]
pub struct JobForm {
    csrf: Option<String>,
}

async fn set_state(
    app: &AppState,
    viewer: &Operator,
    id: &str,
    stop: bool,
    form: &JobForm,
) -> Result<Response> {
    let action = if stop { "job-stop" } else { "job-resume" };
    viewer.check_csrf(&purpose(action, id), form.csrf.as_deref())?;
    use crate::deadletter::four_eyes::{set_job_state, JobStateError};
    match set_job_state(app.store.as_ref(), id, stop, viewer.subject()).await {
        Ok(_) => {}
        Err(JobStateError::NotFound(id)) => {
            return Err(UiError::NotFound(format!("no replay job {id}")))
        }
        Err(JobStateError::FourEyes(e)) => return Err(UiError::Forbidden(e.to_string())),
        Err(e @ JobStateError::NotMoved { .. }) => return Err(UiError::Refused(e.to_string())),
        Err(JobStateError::Store(e)) => return Err(e.into()),
    }
    Ok(viewer.see_other(&format!("/ui/replay-jobs/{id}")))
}

/// Stops a running job.
///
/// # Errors
/// Bad CSRF, no such job, a completed job, or a store failure.
pub async fn stop(
    State(app): State<AppState>,
    viewer: Operator,
    Path(id): Path<String>,
    Form(form): Form<JobForm>,
) -> Result<Response> {
    set_state(&app, &viewer, &id, true, &form).await
}

/// Resumes a stopped job.
///
/// # Errors
/// Bad CSRF, no such job, a completed job, or a store failure.
pub async fn resume(
    State(app): State<AppState>,
    viewer: Operator,
    Path(id): Path<String>,
    Form(form): Form<JobForm>,
) -> Result<Response> {
    set_state(&app, &viewer, &id, false, &form).await
}
