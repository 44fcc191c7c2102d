//! Bulk replay, dry run first. `GET /ui/replay` takes an explicit
//! selection (ticked `ids`, or the list's filters), freezes it into ids and
//! shows what would happen: what is replayed, which targets are sent to
//! again, what a gate holds back, what is refused and why. It writes and
//! sends nothing. Its form `POST /ui/replay-jobs` creates the job over
//! exactly those ids (the CSRF token is bound to them), and the answer is
//! the job's progress page.

use axum::extract::{RawQuery, State};
use axum::response::Response;
use axum::Form;
use maud::{html, Markup};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::error::{Result, UiError};
use super::frame::{badge, Nav};
use super::purpose;
use super::session::Operator;
use crate::deadletter::bulk::{Rate, StartJob};
use crate::deadletter::plan::{Selection, SelectionFilter, Summary};
use crate::state::AppState;

/// The CSRF purpose of starting a job over `ids` (comma-joined).
fn job_purpose(ids: &str) -> String {
    purpose("bulk-replay", &hex::encode(Sha256::digest(ids.as_bytes())))
}

/// The selection a query string names: every `ids`, or the filters.
fn selection(raw: Option<&str>) -> Selection {
    let mut ids = Vec::new();
    let mut filter = SelectionFilter::default();
    for (name, value) in url::form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        let value = value.trim().to_owned();
        if value.is_empty() {
            continue;
        }
        match name.as_ref() {
            "ids" => ids.push(value),
            "class" => filter.class = Some(value),
            "namespace" => filter.namespace = Some(value),
            "state" => filter.state = Some(value),
            "older_than" => filter.older_than = Some(value),
            "newer_than" => filter.newer_than = Some(value),
            _ => {}
        }
    }
    if ids.is_empty() {
        Selection {
            ids: None,
            filter: Some(filter),
        }
    } else {
        Selection {
            ids: Some(ids),
            filter: None,
        }
    }
}

/// The dry run.
///
/// # Errors
/// An empty, unfiltered or oversized selection, or a store failure.
pub async fn dry_run(
    State(app): State<AppState>,
    viewer: Operator,
    RawQuery(raw): RawQuery,
) -> Result<Response> {
    let run = app
        .bulk_replay()
        .dry_run(&selection(raw.as_deref()))
        .await?;
    let (ids, summary) = (run.ids, run.summary);
    let joined = ids.join(",");
    let max_rate = app.config.dead_letters.max_rate_per_sec;
    let body = html! {
        h1 { "Bulk replay: dry run" }
        p.flash.warn role="status" { "Nothing has been replayed yet. Read the summary, then start the job below." }
        (summary_table(&summary))
        @if summary.replayable + summary.gated.len() == 0 {
            p.flash.bad role="alert" { "Nothing in this selection can be replayed." }
        } @else {
            form.card.stack method="post" action="/ui/replay-jobs" aria-labelledby="start-h" {
                h2 #start-h { "Start the job" }
                input type="hidden" name="ids" value=(joined);
                input type="hidden" name="csrf" value=(viewer.csrf(&job_purpose(&joined)));
                label for="job-reason" { "Reason (required, recorded with every replay)" }
                textarea #job-reason name="reason" required maxlength="2000" {}
                label for="job-rate" { "Rate: items per second (1–" (max_rate) ")" }
                input #job-rate type="number" name="rate_per_sec" min="1" max=(max_rate) value=(max_rate.min(5)) required;
                button.good type="submit" { "Start replaying " (ids.len()) " dead letter(s)" }
            }
        }
        p { a href="/ui/dead-letters" { "Back to the dead letters" } }
    };
    Ok(viewer.page("Bulk replay: dry run", Nav::DeadLetters, body))
}

fn summary_table(s: &Summary) -> Markup {
    html! {
        div.tiles {
            section.tile { h2 { "Selected" } p.big { (s.total) } }
            section.tile.ok { h2 { "Would be replayed" } p.big { (s.replayable) }
                p.note { (s.rerun) " of them go back to the workflow's re-run (no effect queued)." } }
            section.tile.(if s.gated.is_empty() { "ok" } else { "warn" }) { h2 { "Need a new approval" } p.big { (s.gated.len()) } }
            section.tile.(if s.refused.is_empty() { "ok" } else { "bad" }) { h2 { "Would be refused" } p.big { (s.refused.len()) } }
        }
        h2 { "Effects sent again, per target (same idempotency keys)" }
        @if s.targets.is_empty() { p.muted { "None." } } @else {
            div.scroll { table {
                thead { tr { th scope="col" { "Target" } th.num scope="col" { "Effects" } } }
                tbody { @for (t, n) in &s.targets { tr { td { (t) } td.num { (n) } } } }
            } }
        }
        h2 { "Classes" }
        p { @for (c, n) in &s.classes { (badge(c)) " " (n) " · " } }
        @if !s.gated.is_empty() {
            h2 { "Held by a gate" }
            ul { @for g in &s.gated { li { a href={ "/ui/dead-letters/" (g.id) } { code { (g.id) } } ": " (g.operation) " (" (g.gate) ") — replaying asks for a new approval" } } }
        }
        @if !s.refused.is_empty() {
            h2 { "Refused, and why" }
            ul { @for r in &s.refused { li { a href={ "/ui/dead-letters/" (r.id) } { code { (r.id) } } ": " (r.why) } } }
        }
    }
}

/// The start form.
#[derive(Debug, Deserialize)]
pub struct StartForm {
    ids: String,
    csrf: Option<String>,
    reason: Option<String>,
    rate_per_sec: Option<String>,
}

/// Creates the job over the reviewed ids; `303` to its progress page.
///
/// # Errors
/// Bad CSRF (including a selection other than the one reviewed), no
/// reason, a rate outside the limit, or a store failure: nothing created.
pub async fn create(
    State(app): State<AppState>,
    viewer: Operator,
    Form(form): Form<StartForm>,
) -> Result<Response> {
    viewer.check_csrf(&job_purpose(&form.ids), form.csrf.as_deref())?;
    let reason = super::form::required("reason", form.reason, "say why it is safe to replay")?;
    let config = &app.config.dead_letters;
    let rate = form
        .rate_per_sec
        .as_deref()
        .and_then(|r| r.trim().parse::<i64>().ok())
        .and_then(|r| Rate::new(r, config).ok())
        .ok_or_else(|| {
            UiError::Invalid(format!(
                "the rate must be a whole number from 1 to {}",
                config.max_rate_per_sec
            ))
        })?;
    let job = StartJob {
        selection: Selection {
            ids: Some(form.ids.split(',').map(str::to_owned).collect()),
            filter: None,
        },
        reason,
        rate,
        actor: viewer.subject().to_owned(),
        via: Some("console"),
        fix: None,
    };
    let created = app.bulk_replay().start(job).await?;
    Ok(viewer.see_other(&format!("/ui/replay-jobs/{}", created.id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticked_ids_win_over_filters() {
        let s = selection(Some("ids=a&ids=b&class=permanent"));
        assert_eq!(s.ids, Some(vec!["a".to_owned(), "b".to_owned()]));
        assert!(s.filter.is_none());
        let s = selection(Some("class=permanent&namespace=&older_than=2h"));
        let f = s.filter.unwrap();
        assert_eq!(
            (f.class.as_deref(), f.namespace, f.older_than.as_deref()),
            (Some("permanent"), None, Some("2h"))
        );
    }

    #[test]
    fn the_job_token_is_bound_to_the_selection() {
        assert_ne!(job_purpose("a,b"), job_purpose("a,c"));
        assert!(job_purpose("a").starts_with("ui:bulk-replay:"));
    }
}
