//! `GET /ui/run?namespace=…&key=…`: one key's answers to the four audit
//! questions (did we process it, did we send, who approved, which model
//! drafted), then the run, its effects with every attempt, and its
//! timeline of audit events with the hash chain's verdict. The key travels
//! in the query string (keys may hold `/`, `?` or `#`).

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::Value;

use super::error::{Result, UiError};
use super::frame::{at, badge, json_block, or_dash, source_link, stamp, Nav};
use super::session::Operator;
use crate::audit::timeline::load;
use crate::audit::timeline::{EffectLine, Timeline};
use crate::clock::Millis;
use crate::ledger::{IdempotencyKey, Namespace, Run};
use crate::state::AppState;

/// Which run.
#[derive(Debug, Deserialize)]
pub struct RunQuery {
    /// Namespace.
    pub namespace: String,
    /// Key.
    pub key: String,
}

/// The run page.
///
/// # Errors
/// A malformed identity, no such key, or a store failure.
pub async fn show(
    State(app): State<AppState>,
    viewer: Operator,
    Query(q): Query<RunQuery>,
) -> Result<Response> {
    let ns = Namespace::parse(q.namespace).map_err(|e| UiError::Invalid(e.to_string()))?;
    let key = IdempotencyKey::parse(q.key).map_err(|e| UiError::Invalid(e.to_string()))?;
    let timeline = load(app.store.as_ref(), &ns, &key).await?.ok_or_else(|| {
        UiError::NotFound(format!(
            "oncegate never saw key {key} in namespace {ns}: no run and no audit event (it may \
             have been archived and its tombstone deleted)"
        ))
    })?;
    let run = app.store.get_run(&ns, &key).await?;
    let now = app.clock.now_ms();
    let body = html! {
        h1 { "Run " code { (ns) " / " (key) } }
        section.answers aria-label="The four audit answers" {
            (processed(&timeline, run.as_ref()))
            (sent(&timeline))
            (approved(&timeline))
            (drafted(&timeline))
        }
        @if let Some(run) = &run { (details(run, now)) }
        h2 #effects { "Effects and attempts" }
        (effects(&timeline.sent.effects))
        h2 #timeline { "Timeline" }
        (events(&timeline))
    };
    Ok(viewer.page(&format!("Run {key}"), Nav::Runs, body))
}

fn answer(id: &str, question: &str, class: &str, lines: Markup) -> Markup {
    html! {
        section class={ "answer " (class) } aria-labelledby=(id) {
            h2 id=(id) { (question) }
            (lines)
        }
    }
}

fn processed(t: &Timeline, run: Option<&Run>) -> Markup {
    let p = &t.processed;
    let first = p.states.first();
    let lines = html! {
        @if let (true, Some(state)) = (p.known, &p.state) {
            p { strong { "Yes." } " State now: " (badge(state)) }
            p { "Claimed " (p.claims) " time(s)"
                @if let Some(f) = first { "; first by " strong { (f.actor) } " at " (stamp(&f.at)) }
                "." }
            @if let Some(reason) = run.and_then(|r| r.reason.as_deref()) { p { "Reason: " (reason) } }
            @if let Some(a) = &p.archived_at { p { "Archived (slimmed to a tombstone) at " (a) "; its history is in the archive." } }
        } @else {
            p { strong { "No run" } " exists under this key; only audit events remain." }
        }
    };
    let class = if p.known { "yes" } else { "no" };
    answer("q-processed", "Did we process it?", class, lines)
}

fn sent(t: &Timeline) -> Markup {
    let s = &t.sent;
    let count = |state: &str| s.effects.iter().filter(|e| e.state == state).count();
    let trouble = count("unknown") + count("failed");
    let lines = html! {
        @if s.effects.is_empty() {
            p { strong { "Nothing to send:" } " the run queued no effect." }
        } @else if s.all_completed {
            p { strong { "Yes." } " All " (s.effects.len()) " effect(s) completed at their targets." }
        } @else if s.any_sent {
            p { strong { "Partly." } " " (count("completed")) " of " (s.effects.len()) " effect(s) completed." }
        } @else {
            p { strong { "Not yet." } " " (count("pending")) " effect(s) pending, none sent." }
        }
        @for e in &s.effects {
            p { code { (e.effect_type) } " → " (e.target) ": " (badge(&e.state))
                @if let Some(x) = &e.external_ref { " external id " code { (x) } }
                @if let Some(at) = &e.first_sent_at { " (first sent " (stamp(at)) ")" } }
        }
        @if trouble > 0 { p { "An unknown or failed effect is never re-sent blindly: see its attempts below." } }
    };
    let class = if trouble > 0 {
        "bad"
    } else if s.all_completed || s.effects.is_empty() {
        "yes"
    } else {
        "no"
    };
    answer("q-sent", "Did we send?", class, lines)
}

fn approved(t: &Timeline) -> Markup {
    let people: Vec<_> = t.approvals.iter().filter(|d| d.kind != "gate").collect();
    // The owner's commit is an `approve` too; a gate policy's clearing
    // names its policy in the detail.
    let by_policy = t
        .events
        .iter()
        .find(|e| e.kind == "approve" && e.detail.get("policy").is_some_and(|p| !p.is_null()));
    let gated = t.approvals.iter().any(|d| d.kind == "gate");
    let lines = html! {
        @if people.is_empty() {
            @if let Some(policy) = by_policy {
                p { strong { "No person:" } " cleared by the "
                    code { (policy.detail.get("policy").and_then(Value::as_str).unwrap_or("gate")) } " policy"
                    @if let Some(d) = policy.detail.get("decision").and_then(Value::as_str) { " (" (d) ")" }
                    " at " (stamp(&policy.at)) "." }
            } @else if gated {
                p { strong { "Nobody yet:" } " an approval is waiting. " a href="/ui/approvals" { "Approvals inbox" } }
            } @else {
                p { strong { "No person decided:" } " no approval was asked for this run (its operation is not gated)." }
            }
        }
        @for d in &people {
            p { strong { (d.approver) } " — " (d.decision) " (" code { (d.kind) } ") at " (stamp(&d.at))
                @if let Some(r) = d.detail.get("reason").and_then(Value::as_str) { ": " (r) }
                @if let Some(m) = d.detail.get("auth_method").and_then(Value::as_str) { " · signed in by " (m) } }
        }
    };
    let class = if people.is_empty() && !gated {
        "no"
    } else {
        "yes"
    };
    answer("q-approved", "Who approved?", class, lines)
}

fn drafted(t: &Timeline) -> Markup {
    let lines = html! {
        @if t.model_outputs.is_empty() {
            p { strong { "No model output" } " was recorded for this run." }
        }
        @for m in &t.model_outputs {
            p { strong { (m.model.as_deref().unwrap_or("unknown model")) }
                " revision " code { (m.revision.as_deref().unwrap_or("?")) }
                " (" (m.provider.as_deref().unwrap_or("?")) ") at " (stamp(&m.at)) ": "
                @match m.valid { Some(true) => "valid", Some(false) => "invalid", None => "not validated" } }
        }
    };
    let class = if t.model_outputs.is_empty() {
        "no"
    } else {
        "yes"
    };
    answer("q-model", "Which model drafted?", class, lines)
}

fn details(run: &Run, now: Millis) -> Markup {
    let m = &run.metadata;
    html! {
        h2 { "The run" }
        div.scroll { table.kv {
            tr { th scope="row" { "State" } td { (badge(run.state.as_str())) @if let Some(p) = run.prev_state { " (was " (p.as_str()) ")" } } }
            tr { th scope="row" { "Operation" } td { (or_dash(m.operation.as_deref())) } }
            tr { th scope="row" { "Correlation id" } td { code { (run.correlation_id()) } } }
            tr { th scope="row" { "Execution ref" } td { (or_dash(m.execution_ref.as_deref())) } }
            tr { th scope="row" { "Workflow version" } td { (or_dash(m.workflow_version.as_deref())) } }
            tr { th scope="row" { "Source record" } td { (source_link(m.source_url.as_deref())) } }
            tr { th scope="row" { "Requested by" } td { (or_dash(m.requested_by.as_deref())) } }
            tr { th scope="row" { "Claimed by" } td { (run.claimed_by) } }
            tr { th scope="row" { "Business key" } td { (or_dash(run.business_key.as_ref().map(|b| b.as_str()))) } }
            tr { th scope="row" { "Payload hash" } td { code { (run.payload_hash) } } }
            tr { th scope="row" { "Version / claims" } td { (run.version.get()) " / " (run.attempts) } }
            @if let Some(exp) = run.lease_expires_at.filter(|_| run.state.as_str() == "processing") {
                tr { th scope="row" { "Lease" } td { "the owner's lease expires " (at(exp, now)) } }
            }
            tr { th scope="row" { "Created" } td { (at(run.created_at, now)) } }
            tr { th scope="row" { "Last change" } td { (at(run.updated_at, now)) } }
            @if let Some(e) = &run.last_error { tr { th scope="row" { "Last error" } td { (e) } } }
            @if let Some(r) = &run.result { tr { th scope="row" { "Result" } td { (json_block(r)) } } }
        } }
    }
}

fn effects(effects: &[EffectLine]) -> Markup {
    html! {
        @if effects.is_empty() { p.muted { "No effect." } }
        @for e in effects {
            div.card {
                h3 { code { (e.effect_type) } " → " (e.target) " " (badge(&e.state)) }
                p.note { "Idempotency key " code { (e.idempotency_key) } " · operation " code { (e.operation) }
                    @if let Some(x) = &e.external_ref { " · external id " code { (x) } } }
                @if e.attempts.is_empty() { p.muted { "No attempt yet." } } @else {
                    div.scroll { table {
                        thead { tr { th.num scope="col" { "#" } th scope="col" { "Started" } th scope="col" { "Class" }
                            th.num scope="col" { "Status" } th scope="col" { "Error" } } }
                        tbody { @for a in &e.attempts { tr {
                            td.num { (a.attempt) } td { (stamp(&a.at)) } td { (badge(&a.class)) }
                            td.num { (a.status.map(|s| s.to_string()).unwrap_or_default()) }
                            td { (or_dash(a.error.as_deref())) }
                        } } }
                    } }
                }
            }
        }
    }
}

fn events(t: &Timeline) -> Markup {
    html! {
        @if t.chain.ok {
            p.flash.ok role="status" { "The hash chain verifies: " (t.chain.length) " event(s), nothing edited, deleted or cut." }
        } @else {
            p.flash.bad role="alert" { "The hash chain does NOT verify: " (t.chain.problem.as_deref().unwrap_or("a row is bad")) }
        }
        div.scroll { table {
            thead { tr { th.num scope="col" { "Seq" } th scope="col" { "When" } th scope="col" { "Event" }
                th scope="col" { "Actor" } th scope="col" { "Move" } th scope="col" { "Detail" } } }
            tbody { @for e in &t.events {
                tr class=[(!e.chain_ok).then_some("chain-bad")] {
                    td.num { (e.seq) } td { (stamp(&e.at)) } td { code { (e.kind) } } td { (e.actor) }
                    td { (e.from_state.as_deref().unwrap_or("")) @if e.to_state.is_some() { " → " (badge(e.to_state.as_deref().unwrap_or(""))) } }
                    td { @if e.detail.as_object().is_some_and(|o| !o.is_empty()) {
                        details { summary { "detail" } (json_block(&e.detail)) }
                    } }
                }
            } }
        } }
    }
}
