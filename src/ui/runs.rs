//! `GET /ui/runs`: find runs by key (or the start of one), namespace,
//! state or execution ref; keyset pages of 50 (see
//! [`crate::db::sql::console`] for the index each search walks).

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{html, Markup};
use serde::Deserialize;

use super::error::{Result, UiError};
use super::frame::{at, badge, or_dash, run_link, Nav};
use super::session::Operator;
use super::text_field;
use crate::approval::pages::urlencode;
use crate::clock::Millis;
use crate::ledger::port::{RunCursor, RunSearch, SearchOrder};
use crate::ledger::{IdempotencyKey, Namespace, Run, RunState};
use crate::state::AppState;

/// Runs per page.
const PAGE: i64 = 50;

/// The search form, as query parameters.
#[derive(Debug, Default, Deserialize)]
pub struct RunsQuery {
    /// Namespace.
    pub namespace: Option<String>,
    /// The key, or its start.
    pub key: Option<String>,
    /// A run state.
    pub state: Option<String>,
    /// An execution ref.
    pub execution_ref: Option<String>,
    /// The previous page's last run.
    pub cursor: Option<String>,
}

impl RunsQuery {
    /// The store search for this query.
    ///
    /// # Errors
    /// [`UiError::Invalid`] naming the bad field.
    pub fn search(&self) -> Result<RunSearch> {
        let bad = |field: &str, e: String| UiError::Invalid(format!("{field}: {e}"));
        let namespace = text_field("namespace", self.namespace.clone(), 255)?
            .map(|n| Namespace::parse(n).map(|n| n.to_string()))
            .transpose()
            .map_err(|e| bad("namespace", e.to_string()))?;
        let key_prefix = text_field("key", self.key.clone(), 255)?
            .map(|k| IdempotencyKey::parse(k).map(|k| k.to_string()))
            .transpose()
            .map_err(|e| bad("key", e.to_string()))?;
        let state = text_field("state", self.state.clone(), 32)?
            .map(|s| s.parse::<RunState>())
            .transpose()
            .map_err(|e| bad("state", e.to_string()))?;
        let execution_ref = text_field("execution ref", self.execution_ref.clone(), 255)?;
        let after = text_field("cursor", self.cursor.clone(), 2_000)?
            .map(|c| RunCursor::decode(&c))
            .transpose()
            .map_err(|e| bad("cursor", e))?;
        Ok(RunSearch {
            namespace,
            key_prefix,
            state,
            execution_ref,
            after,
            limit: PAGE,
        })
    }

    fn next_page(&self, cursor: &RunCursor) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        for (name, value) in [
            ("namespace", &self.namespace),
            ("key", &self.key),
            ("state", &self.state),
            ("execution_ref", &self.execution_ref),
        ] {
            if let Some(v) = value.as_deref().filter(|v| !v.trim().is_empty()) {
                q.append_pair(name, v.trim());
            }
        }
        q.append_pair("cursor", &cursor.encode());
        format!("/ui/runs?{}", q.finish())
    }
}

/// The search page.
///
/// # Errors
/// The store failed.
pub async fn show(
    State(app): State<AppState>,
    viewer: Operator,
    Query(q): Query<RunsQuery>,
) -> Result<Response> {
    let now = app.clock.now_ms();
    let (runs, error) = match q.search() {
        Ok(search) => (Some((app.store.search_runs(&search).await?, search)), None),
        Err(UiError::Invalid(e)) => (None, Some(e)),
        Err(e) => return Err(e),
    };
    let body = html! {
        h1 { "Runs" }
        (form(&q))
        @if let Some(e) = error { p.flash.bad role="alert" { (e) } }
        @if let Some((runs, search)) = runs { (results(&q, &search, &runs, now)) }
    };
    Ok(viewer.page("Runs", Nav::Runs, body))
}

fn form(q: &RunsQuery) -> Markup {
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    html! {
        form.filters method="get" action="/ui/runs" role="search" aria-label="Search runs" {
            div.field { label for="f-key" { "Key (or its start)" }
                input #f-key type="text" name="key" value=(value(&q.key)) autocomplete="off" spellcheck="false"; }
            div.field { label for="f-ns" { "Namespace" }
                input #f-ns type="text" name="namespace" value=(value(&q.namespace)) autocomplete="off"; }
            div.field { label for="f-state" { "State" }
                select #f-state name="state" {
                    option value="" { "any" }
                    @for s in RunState::ALL {
                        option value=(s.as_str()) selected[q.state.as_deref() == Some(s.as_str())] { (s.as_str()) }
                    }
                }
            }
            div.field { label for="f-exec" { "Execution ref" }
                input #f-exec type="text" name="execution_ref" value=(value(&q.execution_ref)) autocomplete="off"; }
            div { button type="submit" { "Search" } }
        }
    }
}

fn results(q: &RunsQuery, search: &RunSearch, runs: &[Run], now: Millis) -> Markup {
    let order = match search.order() {
        SearchOrder::Identity => "by namespace, then key",
        SearchOrder::Key => "by key, then namespace",
        SearchOrder::Recent => "most recently changed first",
    };
    html! {
        p.note { (runs.len()) " run(s) on this page, " (order) "." }
        @if runs.is_empty() {
            p { "No run matches." }
        } @else {
            div.scroll { table {
                caption.muted { "Matching runs" }
                thead { tr {
                    th scope="col" { "Namespace / key" } th scope="col" { "State" }
                    th scope="col" { "Operation" } th scope="col" { "Execution ref" }
                    th scope="col" { "Claimed by" } th.num scope="col" { "Claims" } th scope="col" { "Last change" }
                } }
                tbody { @for r in runs { tr {
                    td { (run_link(r.namespace.as_str(), r.key.as_str())) }
                    td { (badge(r.state.as_str())) }
                    td { (or_dash(r.metadata.operation.as_deref())) }
                    td { (or_dash(r.metadata.execution_ref.as_deref())) }
                    td { (r.claimed_by) }
                    td.num { (r.attempts) }
                    td { (at(r.updated_at, now)) }
                } } }
            } }
        }
        @if runs.len() as i64 == PAGE {
            @if let Some(last) = runs.last() {
                p.pager { a.button.secondary href=(q.next_page(&RunCursor::after(last))) rel="next" { "Next page" } }
            }
        }
        @if q.cursor.is_some() {
            p { a href={ "/ui/runs?key=" (urlencode(q.key.as_deref().unwrap_or(""))) } { "Back to the first page" } }
        }
    }
}
