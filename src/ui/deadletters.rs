//! `GET /ui/dead-letters`: where automatic work stopped. Filters (class,
//! namespace, the run's state now, resolved, age), keyset pages of 50,
//! oldest first; tick records (or take every open one matching the
//! filters) for a bulk replay, which shows its dry run first.

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{html, Markup};

use super::error::Result;
use super::form;
use super::frame::{at, badge, or_dash, run_link, Nav};
use super::session::Operator;
use crate::clock::Millis;
use crate::deadletter::filter::Criteria;
use crate::deadletter::{Cursor, DeadLetter, DeadLetterClass};
use crate::ledger::RunState;
use crate::state::AppState;

/// Records per page.
const PAGE: i64 = 50;

/// These filters as a query string (without the status and the cursor).
fn filter_query(q: &Criteria) -> String {
    form::filter_query(&[
        ("class", &q.class),
        ("namespace", &q.namespace),
        ("state", &q.state),
        ("older_than", &q.older_than),
        ("newer_than", &q.newer_than),
    ])
}

/// The list.
///
/// # Errors
/// The store failed.
pub async fn show(
    State(app): State<AppState>,
    viewer: Operator,
    Query(q): Query<Criteria>,
) -> Result<Response> {
    let now = app.clock.now_ms();
    let page = Criteria {
        limit: Some(PAGE),
        ..q.clone()
    };
    let (found, error) = match page.into_filter(now) {
        Ok(filter) => (Some(app.store.dead_letters(&filter).await?), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let body = html! {
        h1 { "Dead letters" }
        p.note { "Where automatic work stopped and a person decides: replay (the same effects under the same idempotency keys, through the gate again when the operation is gated) or resolve." }
        (filters(&q))
        @if let Some(e) = error { p.flash.bad role="alert" { (e) } }
        @if let Some(found) = found { (list(&q, &found, now)) }
    };
    Ok(viewer.page("Dead letters", Nav::DeadLetters, body))
}

fn filters(q: &Criteria) -> Markup {
    let resolved = q.resolved.as_deref().unwrap_or("false");
    let classes = DeadLetterClass::ALL.iter().map(|c| c.as_str());
    let states = RunState::ALL.iter().map(|s| s.as_str());
    html! {
        form.filters method="get" action="/ui/dead-letters" role="search" aria-label="Filter dead letters" {
            (form::choice("f-class", "class", "Class", &q.class, classes))
            (form::text_box("f-ns", "namespace", "Namespace", &q.namespace, None))
            (form::choice("f-state", "state", "Run state now", &q.state, states))
            div.field { label for="f-resolved" { "Status" }
                select #f-resolved name="resolved" {
                    option value="false" selected[resolved == "false"] { "open" }
                    option value="true" selected[resolved == "true"] { "resolved" }
                    option value="any" selected[resolved == "any"] { "both" }
                } }
            (form::text_box("f-older", "older_than", "Older than (e.g. 2h)", &q.older_than, Some("90s, 15m, 2h, 7d")))
            (form::text_box("f-newer", "newer_than", "Newer than", &q.newer_than, Some("7d")))
            div { button type="submit" { "Filter" } }
        }
    }
}

fn list(q: &Criteria, found: &[DeadLetter], now: Millis) -> Markup {
    let filter = filter_query(q);
    html! {
        @if found.is_empty() {
            p.flash.ok role="status" { "No dead letter matches." }
        } @else {
            form method="get" action="/ui/replay" {
                div.scroll { table {
                    caption.muted { (found.len()) " on this page, oldest first" }
                    thead { tr {
                        th scope="col" { span.muted { "Pick" } } th scope="col" { "Recorded" } th scope="col" { "Class" }
                        th scope="col" { "Run" } th scope="col" { "State now" } th scope="col" { "Error" }
                        th.num scope="col" { "Replays" } th scope="col" { "Owner" } th scope="col" { "Record" }
                    } }
                    tbody { @for d in found { (row(d, now)) } }
                } }
                p.row {
                    button type="submit" { "Dry run: replay the ticked ones" }
                    @if !filter.is_empty() && q.resolved.as_deref().unwrap_or("false") == "false" {
                        a.button.secondary href={ "/ui/replay?" (filter) } { "Dry run: replay every open one matching the filters" }
                    }
                }
                p.note { "A dry run shows what would happen and changes nothing; the job starts only after you confirm it." }
            }
        }
        @if let Some(cursor) = Cursor::after_full(found, PAGE, |d| (d.created_at, &d.id)) {
            p.pager { a.button.secondary rel="next" href={ "/ui/dead-letters?" (filter)
                @if !filter.is_empty() { "&" } "resolved=" (q.resolved.as_deref().unwrap_or("false")) "&cursor=" (cursor) } { "Next page" } }
        }
    }
}

fn row(d: &DeadLetter, now: Millis) -> Markup {
    let check = format!("pick-{}", d.id);
    let error = d.error.as_deref().map(|e| {
        let mut cut: String = e.chars().take(140).collect();
        if cut.len() < e.len() {
            cut.push('…');
        }
        cut
    });
    html! {
        tr {
            td { @if d.is_open() {
                input type="checkbox" name="ids" value=(d.id) id=(check) aria-label={ "Pick " (d.id) " for a bulk replay" };
            } }
            td { (at(d.created_at, now)) }
            td { (badge(d.class.as_str())) }
            td { (run_link(&d.namespace, &d.key)) @if let Some(op) = &d.operation { br; span.note { (op) } } }
            td { @match d.current_state { Some(s) => (badge(s.as_str())), None => span.muted { "gone" } } }
            td { (or_dash(error.as_deref())) }
            td.num { (d.replay_count) }
            td { (or_dash(d.owner.as_deref())) }
            td { a href={ "/ui/dead-letters/" (d.id) } { @if d.is_open() { "Open" } @else { "Resolved: " (d.resolution.map(|r| r.as_str()).unwrap_or("")) } } }
        }
    }
}
