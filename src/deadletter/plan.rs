//! A bulk replay's selection, frozen into ids, and its dry-run summary:
//! what would be replayed, on which targets, what a gate holds back, and
//! what would be refused and why. Computing it writes and sends nothing.
//! Starting the job over the frozen ids is [`BulkReplay::start`]
//! (in [`super::bulk`]).
//!
//! The selection and the summary are what a client sends and sees, so they
//! carry their OpenAPI schemas (docs/architecture.md, "View types").

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::filter::{Criteria, FilterError};
use super::port::ReplayStore;
use super::replay::{gate_of, ReplayError};
use super::{four_eyes, DeadLetterConfig, Refusal};
use crate::approval::OperationConfig;
use crate::clock::Clock;
use crate::ledger::storage::StoreError;
use crate::ledger::{IdempotencyKey, Namespace, RunState};
use crate::outbox::EffectState;

/// Which open dead letters a filter selects (at least one criterion).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Selection {
    /// Dead letter ids, in the order to replay them.
    pub ids: Option<Vec<String>>,
    /// Or a filter over open dead letters (oldest first).
    pub filter: Option<SelectionFilter>,
}

/// A selected item the gate holds back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct GatedItem {
    /// Dead letter id.
    pub id: String,
    /// The gated operation.
    pub operation: String,
    /// Its gate policy.
    pub gate: String,
}

/// A selected item that would be refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct RefusedItem {
    /// Dead letter id.
    pub id: String,
    /// Why.
    pub why: String,
}

/// What a bulk replay would do; computing it writes and sends nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, ToSchema)]
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
    /// Operations among the items whose replays need a second operator:
    /// the job is created stopped, and only another operator may start it.
    pub four_eyes: Vec<String>,
}

/// A dry run: the frozen ids, in order, and what replaying them would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DryRun {
    /// The frozen selection.
    pub ids: Vec<String>,
    /// What would happen.
    pub summary: Summary,
}

/// Why a selection could not be frozen or planned.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The selection is missing, empty, oversized or malformed; `field`
    /// names the part at fault (`selection`, `selection.ids`, a filter
    /// criterion).
    #[error("{problem}")]
    Invalid {
        /// The field at fault, as the API names it.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// Checking an item's gate failed otherwise than by an undeclared
    /// operation (which is a refusal in the summary).
    #[error(transparent)]
    Replay(ReplayError),
    /// The store failed, or holds a record it cannot read back.
    #[error("store failure")]
    Store(#[from] StoreError),
}

impl PlanError {
    fn invalid(field: &'static str, problem: impl Into<String>) -> Self {
        Self::Invalid {
            field,
            problem: problem.into(),
        }
    }
}

impl From<FilterError> for PlanError {
    fn from(err: FilterError) -> Self {
        Self::invalid(err.field, err.problem)
    }
}

/// Bulk replay's use cases (dry run, start) over borrowed state, built by
/// `AppState::bulk_replay` for the API and the console alike.
#[derive(Debug, Clone, Copy)]
pub struct BulkReplay<'a> {
    /// The records, runs and effects a plan reads; the jobs it creates.
    pub store: &'a dyn ReplayStore,
    /// The declared operations (their gates).
    pub operations: &'a [OperationConfig],
    /// The `[dead_letters]` limits (items per job, rate).
    pub config: &'a DeadLetterConfig,
    /// The injected clock (age filters).
    pub clock: &'a dyn Clock,
}

fn check_id(id: &str) -> Result<(), PlanError> {
    let ok = !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(PlanError::invalid(
            "selection.ids",
            format!("{id:?} is not a dead letter id"),
        ))
    }
}

impl BulkReplay<'_> {
    /// Freezes `selection` and computes its summary. Writes and sends nothing.
    ///
    /// # Errors
    /// [`PlanError`].
    pub async fn dry_run(&self, selection: &Selection) -> Result<DryRun, PlanError> {
        let ids = self.freeze(selection).await?;
        let summary = self.plan(&ids).await?;
        Ok(DryRun { ids, summary })
    }

    /// Freezes a selection into ids: given ids deduplicated in order, or
    /// the open dead letters a filter matches now, oldest first.
    ///
    /// # Errors
    /// [`PlanError::Invalid`] for no, an empty or an oversized selection.
    pub async fn freeze(&self, selection: &Selection) -> Result<Vec<String>, PlanError> {
        let max = self.config.max_job_items;
        let ids = match (&selection.ids, &selection.filter) {
            (Some(ids), None) => {
                let mut seen = HashSet::new();
                let mut out = Vec::new();
                for id in ids {
                    check_id(id)?;
                    if seen.insert(id.as_str()) {
                        out.push(id.clone());
                    }
                }
                out
            }
            (None, Some(f)) => self.matching(f, max).await?,
            _ => {
                return Err(PlanError::invalid(
                    "selection",
                    "give ids or filter, exactly one",
                ))
            }
        };
        if ids.is_empty() {
            return Err(PlanError::invalid("selection", "the selection is empty"));
        }
        if ids.len() as i64 > max {
            return Err(PlanError::invalid("selection", format!("the selection holds more than {max} dead letters (dead_letters.max_job_items); narrow it")));
        }
        Ok(ids)
    }

    /// The ids of the open dead letters `f` matches (at most `max + 1`).
    async fn matching(&self, f: &SelectionFilter, max: i64) -> Result<Vec<String>, PlanError> {
        let criteria = [
            &f.class,
            &f.namespace,
            &f.state,
            &f.older_than,
            &f.newer_than,
        ];
        if criteria.iter().all(|c| c.is_none()) {
            return Err(PlanError::invalid(
                "selection.filter",
                "name at least one criterion: nothing is replayed without an explicit selection",
            ));
        }
        let criteria = Criteria {
            class: f.class.clone(),
            namespace: f.namespace.clone(),
            state: f.state.clone(),
            resolved: Some("false".into()),
            older_than: f.older_than.clone(),
            newer_than: f.newer_than.clone(),
            cursor: None,
            limit: None,
        };
        let mut filter = criteria.into_filter(self.clock.now_ms())?;
        filter.limit = max + 1;
        Ok(self
            .store
            .dead_letters(&filter)
            .await?
            .into_iter()
            .map(|d| d.id)
            .collect())
    }

    /// The dry-run summary of frozen ids.
    ///
    /// # Errors
    /// [`PlanError::Store`]; an item that cannot be replayed is counted
    /// among the refused, not an error.
    pub async fn plan(&self, ids: &[String]) -> Result<Summary, PlanError> {
        let mut s = Summary {
            total: ids.len(),
            ..Summary::default()
        };
        for id in ids {
            self.plan_one(&mut s, id).await?;
        }
        Ok(s)
    }

    async fn plan_one(&self, s: &mut Summary, id: &str) -> Result<(), PlanError> {
        let refuse = |why: String| RefusedItem {
            id: id.to_owned(),
            why,
        };
        let Some(dl) = self.store.dead_letter(id).await? else {
            s.refused.push(refuse(Refusal::NotFound.describe()));
            return Ok(());
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
            return Ok(());
        }
        let corrupt = |e: crate::ledger::InvalidId| StoreError::Corrupt(e.to_string());
        let ns = Namespace::parse(dl.namespace.clone()).map_err(corrupt)?;
        let key = IdempotencyKey::parse(dl.key.clone()).map_err(corrupt)?;
        let effects = self.store.effects_of(&ns, &key).await?;
        let ops = dl
            .operation
            .iter()
            .map(String::as_str)
            .chain(effects.iter().map(|e| e.new.operation.as_str()));
        if let Some(op) = four_eyes::guarded(self.config, ops) {
            if !s.four_eyes.iter().any(|o| o == op) {
                s.four_eyes.push(op.to_owned());
            }
        }
        match gate_of(self.operations, &dl, &effects) {
            Err(ReplayError::UndeclaredOperation(op)) => s
                .refused
                .push(refuse(format!("operation {op:?} is no longer declared"))),
            Err(ReplayError::Store(e)) => return Err(e.into()),
            Err(other) => return Err(PlanError::Replay(other)),
            Ok(Some((operation, gate))) => s.gated.push(GatedItem {
                id: id.to_owned(),
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
        Ok(())
    }
}
