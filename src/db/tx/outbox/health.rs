//! Target health's transactions: a verdict's signal applied to the
//! target's row (locked, so instances count failures together), an
//! operator's enable or disable, and the lease's gate that skips paused
//! and disabled targets and hands out one half-open probe.

use std::collections::{HashMap, HashSet};

use serde_json::json;

use super::super::chain::append_system_event;
use crate::db::exec::{Args, Tx};
use crate::db::rows::HealthRow;
use crate::ledger::storage::Result;
use crate::outbox::health::{self, Change, HealthConfig, Signal, TargetHealth};
use crate::outbox::TargetRoom;

/// The target's row, locked until the transaction ends (created healthy
/// first when it has none, so that there is a row to lock).
async fn locked(tx: &mut Tx<'_>, target: &str) -> Result<TargetHealth> {
    let st = tx.st;
    let now = tx.clock_now;
    tx.execute(&st.health.ensure, Args::new().bind(target).bind(now))
        .await?;
    let row: HealthRow = tx.one(&st.health.lock, Args::new().bind(target)).await?;
    Ok(row.into_health())
}

/// Stores `change`, audited under `oncegate / target:<name>` when it moves
/// the target's state.
async fn store(tx: &mut Tx<'_>, change: &Change) -> Result<()> {
    let st = tx.st;
    let h = &change.health;
    let args = Args::new()
        .bind(&h.target)
        .bind(h.state.as_str())
        .bind(h.failures)
        .bind(h.pauses)
        .bind(h.paused_at)
        .bind(h.paused_until)
        .bind(h.probe_owner.as_deref())
        .bind(h.probe_expires_at)
        .bind(h.paused_ms)
        .bind(h.cause.as_deref())
        .bind(&h.changed_by)
        .bind(h.changed_at);
    tx.execute(&st.health.upsert, args).await?;
    if let Some(event) = change.event {
        let detail = json!({
            "target": h.target, "state": h.state.as_str(), "cause": h.cause,
            "failures": h.failures, "paused_until": h.paused_until,
        });
        let key = format!("target:{}", h.target);
        append_system_event(tx, &key, event, &h.changed_by, detail, h.changed_at).await?;
        tracing::warn!(target_name = %h.target, event, cause = ?h.cause, actor = %h.changed_by, "target health changed");
    }
    Ok(())
}

/// Applies an attempt's `signal` to `target`'s health; the health after it.
pub(super) async fn note(
    tx: &mut Tx<'_>,
    target: &str,
    signal: &Signal,
    probe: bool,
    policy: &HealthConfig,
    actor: &str,
) -> Result<TargetHealth> {
    let current = locked(tx, target).await?;
    let Some(change) = health::apply(current.clone(), signal, probe, policy, tx.clock_now, actor)
    else {
        return Ok(current);
    };
    store(tx, &change).await?;
    Ok(change.health)
}

/// An operator enables or disables `target`.
pub(super) async fn set_enabled(
    tx: &mut Tx<'_>,
    target: &str,
    enabled: bool,
    actor: &str,
) -> Result<TargetHealth> {
    let current = locked(tx, target).await?;
    let change = health::operator(current, enabled, tx.clock_now, actor);
    store(tx, &change).await?;
    Ok(change.health)
}

/// The rooms a lease may fill: a disabled target, or one cooling down or
/// with its probe out, is left out (the others are leased as before); a
/// target whose cool-down has ended gets one effect, its half-open probe,
/// when this lease takes the probe. The targets probed are returned too.
pub(super) async fn gate(
    tx: &mut Tx<'_>,
    owner: &str,
    lease_ms: i64,
    rooms: &[TargetRoom],
) -> Result<(Vec<TargetRoom>, HashSet<String>)> {
    let st = tx.st;
    let now = tx.clock_now;
    let unhealthy: HashMap<String, TargetHealth> = tx
        .all::<HealthRow>(&st.health.not_healthy, Args::new())
        .await?
        .into_iter()
        .map(|row| {
            let h = row.into_health();
            (h.target.clone(), h)
        })
        .collect();
    // Probes are claimed in name order (a row lock each), so two
    // instances leasing the same targets never wait on each other in a
    // circle; the rooms keep their order.
    let mut sorted: Vec<&TargetRoom> = rooms.iter().collect();
    sorted.sort_by(|a, b| a.target.cmp(&b.target));
    let mut probes = HashSet::new();
    let mut closed = HashSet::new();
    for room in sorted {
        match unhealthy.get(&room.target).map(|h| h.lease_gate(now)) {
            None | Some(Some(false)) => {}
            Some(None) => {
                closed.insert(room.target.clone());
            }
            Some(Some(true)) => {
                let args = Args::new()
                    .bind(now)
                    .bind(&room.target)
                    .bind(owner)
                    .bind(now.saturating_add(lease_ms));
                let claimed: Option<HealthRow> = tx.optional(&st.health.claim_probe, args).await?;
                let set = if claimed.is_some() {
                    &mut probes
                } else {
                    &mut closed
                };
                set.insert(room.target.clone());
            }
        }
    }
    let open = rooms
        .iter()
        .filter(|r| !closed.contains(&r.target))
        .map(|r| TargetRoom {
            limit: if probes.contains(&r.target) {
                1
            } else {
                r.limit
            },
            ..r.clone()
        })
        .collect();
    Ok((open, probes))
}

/// Gives back the probes of `targets` that leased nothing.
pub(super) async fn unclaim(tx: &mut Tx<'_>, owner: &str, targets: &[String]) -> Result<()> {
    let st = tx.st;
    for target in targets {
        tx.execute(
            &st.health.unclaim_probe,
            Args::new().bind(target).bind(owner),
        )
        .await?;
    }
    Ok(())
}

/// Every target's stored health.
pub(super) fn rows(rows: Vec<HealthRow>) -> Vec<TargetHealth> {
    rows.into_iter().map(HealthRow::into_health).collect()
}
