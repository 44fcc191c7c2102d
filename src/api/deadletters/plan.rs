//! A bulk replay's selection, frozen into ids, and its dry-run summary:
//! what would be replayed, on which targets, what a gate holds back, and
//! what would be refused and why. Computing it writes and sends nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::super::error::{ApiError, Result};
use super::ListQuery;
use crate::deadletter::replay::{gate_of, ReplayError};
use crate::deadletter::Refusal;
use crate::ledger::{IdempotencyKey, Namespace, RunState};
use crate::outbox::EffectState;
use crate::state::AppState;

/// Which open dead letters a filter selects (at least one criterion).
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SelectionFilter {
    /// Class.
    pub class: Option<String>,
    /// Namespace.
    pub namespace: Option<String>,
    /// The run's current state.
    pub state: Option<String>,
    /// At least this old (`90s`, `15m`, `2h`, `7d`).
    pub older_than: Option<String>,
    /// At most this old.
    pub newer_than: Option<String>,
}

/// An explicit selection: `ids`, or a `filter` frozen into ids at creation.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Selection {
    /// Dead letter ids, in the order to replay them.
    pub ids: Option<Vec<String>>,
    /// Or a filter over open dead letters (oldest first).
    pub filter: Option<SelectionFilter>,
}

/// A selected item the gate holds back.
#[derive(Debug, Serialize, ToSchema)]
pub struct GatedItem {
    /// Dead letter id.
    pub id: String,
    /// The gated operation.
    pub operation: String,
    /// Its gate policy.
    pub gate: String,
}

/// A selected item that would be refused.
#[derive(Debug, Serialize, ToSchema)]
pub struct RefusedItem {
    /// Dead letter id.
    pub id: String,
    /// Why.
    pub why: String,
}

/// What a bulk replay would do; computing it writes and sends nothing.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct Summary {
    /// Items selected.
    pub total: usize,
    /// Items that would be replayed now (effects re-sent, or re-run).
    pub replayable: usize,
    /// Of those, runs with no effect that go back to the workflow's re-run.
    pub rerun: usize,
    /// Effects that would be sent again (same idempotency keys), per target.
    pub targets: BTreeMap<String, usize>,
    /// Items per class.
    pub classes: BTreeMap<String, usize>,
    /// Items held by a gate (they need a new approval).
    pub gated: Vec<GatedItem>,
    /// Items that would be refused, and why.
    pub refused: Vec<RefusedItem>,
}

fn check_id(id: &str) -> Result<()> {
    let ok = !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "selection.ids",
            format!("{id:?} is not a dead letter id"),
        ))
    }
}

/// Freezes a selection into ids.
pub(crate) async fn freeze(app: &AppState, selection: &Selection) -> Result<Vec<String>> {
    let max = app.config.dead_letters.max_job_items;
    let ids = match (&selection.ids, &selection.filter) {
        (Some(ids), None) => {
            let mut seen = std::collections::HashSet::new();
            let mut out = Vec::new();
            for id in ids {
                check_id(id)?;
                if seen.insert(id.as_str()) {
                    out.push(id.clone());
                }
            }
            out
        }
        (None, Some(f)) => {
            let criteria = [
                &f.class,
                &f.namespace,
                &f.state,
                &f.older_than,
                &f.newer_than,
            ];
            if criteria.iter().all(|c| c.is_none()) {
                return Err(ApiError::invalid("selection.filter", "name at least one criterion: nothing is replayed without an explicit selection"));
            }
            let query = ListQuery {
                class: f.class.clone(),
                namespace: f.namespace.clone(),
                state: f.state.clone(),
                resolved: Some("false".into()),
                older_than: f.older_than.clone(),
                newer_than: f.newer_than.clone(),
                cursor: None,
                limit: None,
            };
            let mut filter = query.into_filter(app.clock.now_ms())?;
            filter.limit = max + 1;
            app.store
                .dead_letters(&filter)
                .await?
                .into_iter()
                .map(|d| d.id)
                .collect()
        }
        _ => {
            return Err(ApiError::invalid(
                "selection",
                "give ids or filter, exactly one",
            ))
        }
    };
    if ids.is_empty() {
        return Err(ApiError::invalid("selection", "the selection is empty"));
    }
    if ids.len() as i64 > max {
        return Err(ApiError::invalid("selection", format!("the selection holds more than {max} dead letters (dead_letters.max_job_items); narrow it")));
    }
    Ok(ids)
}

/// The dry-run summary of frozen ids.
pub(crate) async fn plan(app: &AppState, ids: &[String]) -> Result<Summary> {
    let mut s = Summary {
        total: ids.len(),
        ..Summary::default()
    };
    for id in ids {
        let refuse = |why: String| RefusedItem {
            id: id.clone(),
            why,
        };
        let Some(dl) = app.store.dead_letter(id).await? else {
            s.refused.push(refuse(Refusal::NotFound.describe()));
            continue;
        };
        *s.classes.entry(dl.class.to_string()).or_default() += 1;
        let why = match (dl.resolution, dl.class.stops_run(), dl.current_state) {
            (Some(r), _, _) => Some(Refusal::AlreadyResolved(r)),
            (None, false, _) => Some(Refusal::NothingToReplay),
            (None, true, state) if state != Some(RunState::DeadLettered) => {
                Some(Refusal::RunNotDeadLettered(state))
            }
            _ => None,
        };
        if let Some(why) = why {
            s.refused.push(refuse(why.describe()));
            continue;
        }
        let corrupt = |e: crate::ledger::InvalidId| ApiError::Internal(Box::new(e));
        let ns = Namespace::parse(dl.namespace.clone()).map_err(corrupt)?;
        let key = IdempotencyKey::parse(dl.key.clone()).map_err(corrupt)?;
        let effects = app.store.effects_of(&ns, &key).await?;
        match gate_of(&app.config.operations, &dl, &effects) {
            Err(ReplayError::UndeclaredOperation(op)) => s
                .refused
                .push(refuse(format!("operation {op:?} is no longer declared"))),
            Err(other) => return Err(super::actions::replay_error(other)),
            Ok(Some((operation, gate))) => s.gated.push(GatedItem {
                id: id.clone(),
                operation,
                gate: gate.as_str().into(),
            }),
            Ok(None) => {
                s.replayable += 1;
                if effects.is_empty() {
                    s.rerun += 1;
                }
                let resend = [
                    EffectState::Pending,
                    EffectState::Failed,
                    EffectState::Unknown,
                ];
                for e in effects.iter().filter(|e| resend.contains(&e.state)) {
                    *s.targets.entry(e.new.target.clone()).or_default() += 1;
                }
            }
        }
    }
    Ok(s)
}
