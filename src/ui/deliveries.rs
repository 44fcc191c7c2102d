//! `GET /ui/deliveries`: the deliveries log. Every request to
//! `/hooks/{source}` with what it came to, searchable by source, event id,
//! outcome and time, newest first, keyset pages of 50; below it the latest
//! unauthenticated refusals this process keeps in memory. `POST
//! …/{id}/forward` (forward a `duplicate_of` event anyway, once) and `POST
//! …/{id}/redeliver` (an event that reached its workflow, again as a new
//! run) take a reason and a CSRF token, call the API's use case with the
//! signed-in subject as the actor, and answer `303` back to the log.

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::Form;
use maud::{html, Markup};
use serde::Deserialize;

use super::error::{Result, UiError};
use super::form::{self, ReasonForm};
use super::frame::{at, badge, or_dash, run_link, Nav};
use super::purpose;
use super::session::Operator;
use crate::clock::Millis;
use crate::criteria::Cursor;
use crate::ingress::{DeliveryCriteria, DeliveryEntry, DeliveryOutcome, ForwardAsk, Refused};
use crate::state::AppState;

/// Entries per page.
const PAGE: i64 = 50;
/// Refusals shown.
const REFUSED_SHOWN: usize = 20;

/// The search form plus what the last command did.
#[derive(Debug, Default, Deserialize)]
pub struct LogQuery {
    #[serde(flatten)]
    criteria: DeliveryCriteria,
    /// `forwarded` or `redelivered`, with the new run's key.
    done: Option<String>,
    /// The new run's key.
    key: Option<String>,
}

/// These criteria as a query string (without the cursor).
fn filter_query(q: &DeliveryCriteria) -> String {
    form::filter_query(&[
        ("source", &q.source),
        ("event_id", &q.event_id),
        ("outcome", &q.outcome),
        ("since", &q.since),
        ("until", &q.until),
    ])
}

/// The log.
///
/// # Errors
/// The store failed.
pub async fn show(
    State(app): State<AppState>,
    viewer: Operator,
    Query(q): Query<LogQuery>,
) -> Result<Response> {
    let now = app.clock.now_ms();
    let page = DeliveryCriteria {
        limit: Some(PAGE),
        ..q.criteria.clone()
    };
    app.logbook.flush().await;
    let (found, error) = match page.into_filter(now) {
        Ok(filter) => (Some(app.store.deliveries(&filter).await?), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let source = crate::criteria::filled(q.criteria.source.clone());
    let refused = app.refused.latest(source.as_deref(), REFUSED_SHOWN);
    let body = html! {
        h1 { "Deliveries" }
        p.note { "Every request to /hooks with what it came to. A duplicate_of event (another run holds its business key) is kept here and forwarded only if you say so." }
        (flash(&q))
        (filters(&q.criteria))
        @if let Some(e) = error { p.flash.bad role="alert" { (e) } }
        @if let Some(found) = found { (list(&viewer, &q.criteria, &found, now)) }
        h2 { "Refused before verification" }
        p.note { "Signature refused or body too large: kept only in this process's memory (the latest per source) and in the counters; nothing unauthenticated is stored." }
        (refusals(&refused, now))
    };
    Ok(viewer.page("Deliveries", Nav::Deliveries, body))
}

fn flash(q: &LogQuery) -> Markup {
    let key = q.key.as_deref().unwrap_or("");
    html! {
        @match q.done.as_deref() {
            Some("forwarded") => p.flash.ok role="status" { "Forwarded anyway as run " code { (key) } ": the forward is queued and goes out once." },
            Some("redelivered") => p.flash.ok role="status" { "Redelivered as run " code { (key) } ": a new forward is queued." },
            _ => {}
        }
    }
}

fn filters(q: &DeliveryCriteria) -> Markup {
    let outcomes = DeliveryOutcome::ALL
        .iter()
        .filter(|o| o.is_verified())
        .map(|o| o.as_str());
    html! {
        form.filters method="get" action="/ui/deliveries" role="search" aria-label="Search deliveries" {
            (form::text_box("f-source", "source", "Source", &q.source, None))
            (form::text_box("f-event", "event_id", "Event id", &q.event_id, None))
            (form::choice("f-outcome", "outcome", "Outcome", &q.outcome, outcomes))
            (form::text_box("f-since", "since", "Since (RFC 3339 or 2h)", &q.since, Some("2h")))
            (form::text_box("f-until", "until", "Until", &q.until, Some("2026-01-31T12:00:00Z")))
            div { button type="submit" { "Search" } }
        }
    }
}

fn list(viewer: &Operator, q: &DeliveryCriteria, found: &[DeliveryEntry], now: Millis) -> Markup {
    let filter = filter_query(q);
    html! {
        @if found.is_empty() {
            p.flash.ok role="status" { "No delivery matches." }
        } @else {
            div.scroll { table {
                caption.muted { (found.len()) " on this page, newest first" }
                thead { tr {
                    th scope="col" { "Received" } th scope="col" { "Source" } th scope="col" { "Event" }
                    th scope="col" { "Outcome" } th.num scope="col" { "Status" } th.num scope="col" { "Bytes" }
                    th scope="col" { "Run" } th scope="col" { "Operator" }
                } }
                tbody { @for e in found { (row(viewer, e, now)) } }
            } }
        }
        @if let Some(cursor) = Cursor::after_full(found, PAGE, |e| (e.received_at, &e.id)) {
            p.pager { a.button.secondary rel="next" href={ "/ui/deliveries?" (filter)
                @if !filter.is_empty() { "&" } "cursor=" (cursor) } { "Next page" } }
        }
    }
}

fn row(viewer: &Operator, e: &DeliveryEntry, now: Millis) -> Markup {
    html! {
        tr id={ "d-" (e.id) } {
            td { (at(e.received_at, now)) }
            td { (e.source) }
            td { (or_dash(e.event_id.as_deref())) @if let Some(t) = &e.event_type { br; span.note { (t) } } }
            td { (badge(e.outcome.as_str())) @if let Some(d) = &e.detail { br; span.note { (d) } } }
            td.num { (e.status) }
            td.num { (e.body_bytes) }
            td {
                @if let Some((ns, key)) = &e.run {
                    @if e.outcome == DeliveryOutcome::DuplicateOf { span.note { "holder: " } }
                    (run_link(ns, key))
                } @else { span.muted { "—" } }
                @if let Some(f) = &e.forwarded { br; span.note { "forwarded as " } (run_link(&e.source, &f.key)) span.note { " by " (f.by) } }
                @if e.redeliveries > 0 { br; span.note { (e.redeliveries) " redelivery(ies)" } }
            }
            td { (actions(viewer, e)) }
        }
    }
}

fn actions(viewer: &Operator, e: &DeliveryEntry) -> Markup {
    let anyway = e.outcome == DeliveryOutcome::DuplicateOf && e.forwarded.is_none();
    let again = e.outcome == DeliveryOutcome::Accepted
        || (e.outcome == DeliveryOutcome::DuplicateOf && e.forwarded.is_some());
    html! {
        @if anyway {
            (command(viewer, e, "forward", "Forward anyway", "Why forward it although another run holds its business key?"))
        }
        @if again {
            (command(viewer, e, "redeliver", "Redeliver", "Why send it to the workflow again?"))
        }
    }
}

fn command(viewer: &Operator, e: &DeliveryEntry, action: &str, label: &str, hint: &str) -> Markup {
    let field = format!("{action}-{}", e.id);
    html! {
        form.stack method="post" action={ "/ui/deliveries/" (e.id) "/" (action) } {
            input type="hidden" name="csrf" value=(viewer.csrf(&purpose(action, &e.id)));
            label for=(field) { "Reason (required)" }
            input id=(field) type="text" name="reason" required maxlength="2000" placeholder=(hint);
            button.good type="submit" { (label) }
        }
    }
}

fn refusals(refused: &[Refused], now: Millis) -> Markup {
    html! {
        @if refused.is_empty() {
            p.muted { "None since this process started." }
        } @else {
            div.scroll { table {
                thead { tr {
                    th scope="col" { "Received" } th scope="col" { "Source" } th scope="col" { "Outcome" }
                    th.num scope="col" { "Status" } th.num scope="col" { "Bytes" } th scope="col" { "Why" }
                } }
                tbody { @for r in refused { tr {
                    td { (at(r.received_at, now)) } td { (r.source) } td { (badge(r.outcome.as_str())) }
                    td.num { (r.status) } td.num { (r.body_bytes) } td { (r.reason) }
                } } }
            } }
        }
    }
}

/// Forwards a `duplicate_of` delivery anyway; `303` back to the log.
///
/// # Errors
/// Bad CSRF, no reason, a refusal (forwarded already, not a
/// duplicate_of), or a store failure: nothing changed.
pub async fn forward(
    State(app): State<AppState>,
    viewer: Operator,
    Path(id): Path<String>,
    Form(form): Form<ReasonForm>,
) -> Result<Response> {
    run(&app, &viewer, &id, form, ForwardAsk::Anyway).await
}

/// Redelivers a stored event to its workflow; `303` back to the log.
///
/// # Errors
/// As [`forward`].
pub async fn redeliver(
    State(app): State<AppState>,
    viewer: Operator,
    Path(id): Path<String>,
    Form(form): Form<ReasonForm>,
) -> Result<Response> {
    run(&app, &viewer, &id, form, ForwardAsk::Redeliver).await
}

async fn run(
    app: &AppState,
    viewer: &Operator,
    id: &str,
    form: ReasonForm,
    ask: ForwardAsk,
) -> Result<Response> {
    let (action, done) = match ask {
        ForwardAsk::Anyway => ("forward", "forwarded"),
        ForwardAsk::Redeliver => ("redeliver", "redelivered"),
    };
    let reason = form.reason(viewer, action, id, "say why")?;
    let actor = viewer.subject();
    let run = app
        .delivery_actions()
        .forward(id, ask, actor, &reason, |_| Ok::<_, UiError>(()))
        .await?
        .run;
    tracing::info!(delivery = %id, actor, action, "delivery forwarded from the console");
    let key = crate::approval::pages::urlencode(run.key.as_str());
    Ok(viewer.see_other(&format!("/ui/deliveries?done={done}&key={key}#d-{id}")))
}
