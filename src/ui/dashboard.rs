//! `GET /ui`: the numbers an operator checks first. Everything comes from
//! the database (so every instance shows the same) except duplicate
//! deliveries: a duplicate writes nothing, by design, so only the counters
//! of the instance that answered it know; the tile says so.

use axum::extract::State;
use axum::response::Response;
use maud::{html, Markup};

use super::charts::{bar_chart, histogram, quantile, Bar};
use super::error::Result;
use super::frame::{span, Nav};
use super::session::Operator;
use crate::clock::{to_datetime, Millis};
use crate::outbox::ActionSwitch;
use crate::state::AppState;

const HOUR: Millis = 3_600_000;
const DAY: Millis = 24 * HOUR;
/// The dead-letter age the shipped alert fires at (`deploy/prometheus/alerts.yml`).
const DEAD_LETTER_OBJECTIVE: Millis = DAY;
/// Most decision times read for the percentiles.
const WAIT_SAMPLE: i64 = 10_000;

/// The dashboard's numbers.
struct Numbers {
    duplicates: Vec<(String, u64)>,
    stale: i64,
    open_dead_letters: i64,
    oldest_dead_letter: Option<Millis>,
    held: Vec<(String, i64)>,
    waits_day: Vec<i64>,
    waits_week: Vec<i64>,
    pending_approvals: i64,
    dead_letters_by_hour: Vec<Bar>,
}

/// Pending effects the kill switch holds, per target.
pub fn held_by_target(
    backlog: &[(String, String, i64)],
    switches: &[ActionSwitch],
) -> Vec<(String, i64)> {
    let held = |target: &str| {
        switches
            .iter()
            .any(|s| !s.enabled && (s.scope == "*" || s.scope == target))
    };
    backlog
        .iter()
        .filter(|(target, state, _)| state == "pending" && held(target))
        .map(|(target, _, n)| (target.clone(), *n))
        .collect()
}

async fn numbers(app: &AppState, now: Millis) -> Result<Numbers> {
    let store = &app.store;
    let open = store.open_dead_letters().await?;
    let backlog = store.backlog().await?;
    let switches = store.action_switches().await?;
    let since = now - 23 * HOUR - now.rem_euclid(HOUR);
    let mut hours = [0i64; 24];
    for h in store.dead_letters_by_hour(since).await? {
        if let Some(slot) = usize::try_from(h.hour).ok().and_then(|i| hours.get_mut(i)) {
            *slot += h.count;
        }
    }
    let dead_letters_by_hour = hours
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let start = to_datetime(since + i as i64 * HOUR);
            Bar::new(start.format("%H:00").to_string(), *n as f64)
        })
        .collect();
    Ok(Numbers {
        duplicates: app.metrics.duplicate_claims(),
        stale: store.stale_processing().await?.iter().map(|(_, n)| n).sum(),
        open_dead_letters: open.iter().map(|g| g.count).sum(),
        oldest_dead_letter: open.iter().map(|g| g.oldest_age_ms).max(),
        held: held_by_target(&backlog, &switches),
        waits_day: store.gate_waits(now - DAY, WAIT_SAMPLE).await?,
        waits_week: store.gate_waits(now - 7 * DAY, WAIT_SAMPLE).await?,
        pending_approvals: store.pending_challenges().await?,
        dead_letters_by_hour,
    })
}

/// The dashboard.
///
/// # Errors
/// The store failed.
pub async fn show(State(app): State<AppState>, viewer: Operator) -> Result<Response> {
    let now = app.clock.now_ms();
    let n = numbers(&app, now).await?;
    let body = html! {
        h1 { "Dashboard" }
        div.tiles { (tiles(&n)) }
        div.charts {
            figure {
                figcaption { "Dead letters recorded per hour, last 24 hours (UTC)" }
                (bar_chart("dl-hours", "Dead letters per hour", "dead letters", &n.dead_letters_by_hour))
            }
            figure {
                figcaption { "How long people took to decide, last 7 days (" (n.waits_week.len()) " decisions)" }
                (bar_chart("gate-waits", "Approval decision times", "decisions", &histogram(&n.waits_week,
                    &[(60.0, "1m"), (300.0, "5m"), (900.0, "15m"), (3600.0, "1h"), (14_400.0, "4h"), (86_400.0, "1d")])))
            }
        }
        (held_section(&n.held))
        (duplicates_section(&n.duplicates))
    };
    Ok(viewer.page("Dashboard", Nav::Dashboard, body))
}

fn tiles(n: &Numbers) -> Markup {
    let dup_total: u64 = n.duplicates.iter().map(|(_, c)| c).sum();
    let held_total: i64 = n.held.iter().map(|(_, c)| c).sum();
    let p95 = quantile(&n.waits_day, 0.95);
    let p50 = quantile(&n.waits_day, 0.5);
    let old_bad = n
        .oldest_dead_letter
        .is_some_and(|a| a > DEAD_LETTER_OBJECTIVE);
    html! {
        section.tile.(if dup_total > 0 { "warn" } else { "ok" }) aria-labelledby="t-dup" {
            h2 #t-dup { "Duplicate deliveries" }
            p.big { (dup_total) }
            p.note { "Answered by this instance since it started (its counters; a duplicate writes nothing to the database). Across instances: " code { "oncegate_claims_total{outcome=~\"duplicate|duplicate_of\"}" } "." }
        }
        section.tile.(if n.stale > 0 { "bad" } else { "ok" }) aria-labelledby="t-stale" {
            h2 #t-stale { "Stale leases" }
            p.big { (n.stale) }
            p.note { "Runs in processing whose owner's lease expired and nobody reclaimed. "
                a href="/ui/runs?state=processing" { "Runs in processing" } }
        }
        section.tile.(if old_bad { "bad" } else if n.open_dead_letters > 0 { "warn" } else { "ok" }) aria-labelledby="t-dl" {
            h2 #t-dl { "Oldest open dead letter" }
            p.big { (n.oldest_dead_letter.map_or("none".to_owned(), span)) }
            p.note { (n.open_dead_letters) " open; the alert fires past 24 h. " a href="/ui/dead-letters" { "Dead letters" } }
        }
        section.tile.(if held_total > 0 { "warn" } else { "ok" }) aria-labelledby="t-held" {
            h2 #t-held { "Effects held" }
            p.big { (held_total) }
            p.note { "Pending effects the kill switch holds. " a href="/ui/actions" { "Actions" } }
        }
        section.tile aria-labelledby="t-wait" {
            h2 #t-wait { "Gate wait p95, last 24 h" }
            p.big { (p95.map_or("—".to_owned(), span)) }
            p.note { "From approval challenges (decided − created), " (n.waits_day.len()) " decisions; p50 "
                (p50.map_or("—".to_owned(), span)) "." }
        }
        section.tile.(if n.pending_approvals > 0 { "warn" } else { "ok" }) aria-labelledby="t-pending" {
            h2 #t-pending { "Approvals waiting" }
            p.big { (n.pending_approvals) }
            p.note { a href="/ui/approvals" { "Approvals inbox" } }
        }
    }
}

fn held_section(held: &[(String, i64)]) -> Markup {
    html! {
        @if !held.is_empty() {
            h2 { "Held by the kill switch" }
            div.scroll { table {
                thead { tr { th scope="col" { "Target" } th.num scope="col" { "Effects held" } } }
                tbody { @for (target, n) in held { tr { td { (target) } td.num { (n) } } } }
            } }
        }
    }
}

fn duplicates_section(duplicates: &[(String, u64)]) -> Markup {
    html! {
        @if !duplicates.is_empty() {
            h2 { "Duplicate deliveries by namespace (this instance)" }
            div.scroll { table {
                thead { tr { th scope="col" { "Namespace" } th.num scope="col" { "Duplicates" } } }
                tbody { @for (ns, n) in duplicates { tr { td { (ns) } td.num { (n) } } } }
            } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn switch(scope: &str, enabled: bool) -> ActionSwitch {
        ActionSwitch {
            scope: scope.into(),
            enabled,
            changed_by: "t".into(),
            changed_at: 0,
        }
    }

    #[test]
    fn only_pending_effects_of_disabled_scopes_are_held() {
        let backlog = vec![
            ("mail".to_owned(), "pending".to_owned(), 3),
            ("mail".to_owned(), "unknown".to_owned(), 1),
            ("crm".to_owned(), "pending".to_owned(), 2),
        ];
        assert_eq!(
            held_by_target(&backlog, &[switch("mail", false)]),
            vec![("mail".into(), 3)]
        );
        assert_eq!(held_by_target(&backlog, &[switch("*", false)]).len(), 2);
        assert!(held_by_target(&backlog, &[switch("*", true)]).is_empty());
    }
}
