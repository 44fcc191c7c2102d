//! `GET /ui/approvals`: the approvals inbox. Each pending challenge is a
//! card (the approval card fields of ../shared/seeds/000: key, source
//! record, summary, why a person decides, model and validation, proposed
//! effects, who may decide, expiry) linking to its confirmation page at
//! `/approvals/{id}`, where the decision is made (GET there changes
//! nothing either). Approvers and operators both open it.

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::Value;

use super::error::{Result, UiError};
use super::frame::{at, badge, or_dash, run_link, source_link, Nav};
use super::session::Viewer;
use crate::approval::card::{state_filter, ApprovalCard};
use crate::approval::pages::effect_details;
use crate::approval::Challenge;
use crate::clock::Millis;
use crate::state::AppState;

/// Most cards on the page.
const LIMIT: i64 = 200;

/// Which challenges.
#[derive(Debug, Deserialize)]
pub struct InboxQuery {
    /// `pending` (default), `approved`, `rejected`, `expired`, `escalated`, `all`.
    pub state: Option<String>,
}

/// The inbox.
///
/// # Errors
/// A bad state filter, or a store failure.
pub async fn show(
    State(app): State<AppState>,
    viewer: Viewer,
    Query(q): Query<InboxQuery>,
) -> Result<Response> {
    let wanted = q.state.as_deref().unwrap_or("pending");
    let state = state_filter(Some(wanted)).map_err(|e| UiError::Invalid(e.to_string()))?;
    let challenges = app.store.challenges(state, LIMIT).await?;
    let pending = app.store.pending_challenges().await?;
    let now = app.clock.now_ms();
    let body = html! {
        h1 { "Approvals" }
        p { strong { (pending) } " waiting for a decision. Open a card to see everything the decision rests on, then approve or reject there." }
        nav.row aria-label="Filter approvals" {
            @for s in ["pending", "approved", "rejected", "expired", "escalated", "all"] {
                a.button.(if s == wanted { "" } else { "secondary" }) href={ "/ui/approvals?state=" (s) }
                    aria-current=[(s == wanted).then_some("page")] { (s) }
            }
        }
        @if challenges.is_empty() {
            p.flash.ok role="status" { @if wanted == "pending" { "The queue is empty: nothing waits for a decision." } @else { "None." } }
        }
        @if challenges.len() as i64 == LIMIT { p.note { "Showing the newest " (LIMIT) "." } }
        @for c in &challenges { (card(c, now)) }
    };
    Ok(viewer.page("Approvals", Nav::Approvals, body))
}

fn card(c: &Challenge, now: Millis) -> Markup {
    let card = ApprovalCard::from(c);
    let heading = format!("card-{}", card.id);
    let model = &card.model;
    let valid = card.validation.get("valid").and_then(Value::as_bool);
    html! {
        article.card aria-labelledby=(heading) {
            h2 id=(heading) {
                a href=(card.page) { "Approve " code { (card.operation) } "?" } " " (badge(card.state.as_str()))
            }
            @if let Some(summary) = &card.summary { p { (summary) } }
            div.scroll { table.kv {
                tr { th scope="row" { "Idempotency key" } td { (run_link(&card.namespace, &card.key)) } }
                tr { th scope="row" { "Source record" } td { (source_link(card.source_url.as_deref())) } }
                tr { th scope="row" { "Requested by" } td { (or_dash(card.requested_by.as_deref())) } }
                tr { th scope="row" { "Why a person decides" } td { (or_dash(card.reason.as_deref())) } }
                tr { th scope="row" { "Model" } td {
                    @if card.output.is_null() { span.muted { "no model output" } } @else {
                        (model.get("model").and_then(Value::as_str).unwrap_or("?")) " "
                        (model.get("revision").and_then(Value::as_str).unwrap_or("")) " · "
                        @match valid { Some(true) => "output valid", Some(false) => "output INVALID", None => "not validated" }
                    }
                } }
                tr { th scope="row" { "Proposed effects" } td {
                    @for e in &card.effects { (effect_details(e)) }
                    @if let Some(d) = &card.effects_digest { p.note { "bound to " code { (d) } } }
                } }
                tr { th scope="row" { "Who may decide" } td {
                    (audience(&card.audience.subjects, &card.audience.roles))
                    @if !card.required_roles.is_empty() { " · required roles: " (card.required_roles.join(", ")) }
                    " · sign-in: " (card.approver_auth)
                } }
                tr { th scope="row" { "Created" } td { (at(c.created_at, now)) } }
                tr { th scope="row" { @if c.decided_at.is_some() { "Decided" } @else { "Expires" } } td {
                    @if let (Some(t), Some(by)) = (c.decided_at, &c.decided_by) { (at(t, now)) " by " strong { (by) } }
                    @else { (at(c.new.expires_at, now)) }
                } }
            } }
            @if c.state.as_str() == "pending" {
                p { a.button href=(card.page) { "Open to decide" } }
            }
        }
    }
}

fn audience(subjects: &[String], roles: &[String]) -> Markup {
    html! {
        @if subjects.is_empty() && roles.is_empty() { "any approver" }
        @if !subjects.is_empty() { "people: " (subjects.join(", ")) }
        @if !subjects.is_empty() && !roles.is_empty() { "; " }
        @if !roles.is_empty() { "roles: " (roles.join(", ")) }
    }
}
