//! Starting a bulk replay job: over the frozen ids of an explicit
//! selection, with the dry-run summary at creation, a reason and a rate
//! within `dead_letters.max_rate_per_sec`. The runner
//! ([`super::runner`]) then works it item by item.

use serde_json::{json, Value};

use super::fix::{plan_fix, Fix};
use super::plan::{BulkReplay, PlanError, Selection};
use super::{DeadLetterConfig, NewReplayJob, ReplayJob};
use crate::ledger::storage::StoreError;

/// A job's rate in items per second, within the configured maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate(i64);

/// A rate outside `1..=max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must be between 1 and {max} (dead_letters.max_rate_per_sec)")]
pub struct RateOutOfRange {
    /// The configured maximum.
    pub max: i64,
}

impl Rate {
    /// `per_sec` if it lies within `1..=dead_letters.max_rate_per_sec`.
    ///
    /// # Errors
    /// [`RateOutOfRange`] with the maximum.
    pub fn new(per_sec: i64, config: &DeadLetterConfig) -> Result<Self, RateOutOfRange> {
        let max = config.max_rate_per_sec;
        if (1..=max).contains(&per_sec) {
            Ok(Self(per_sec))
        } else {
            Err(RateOutOfRange { max })
        }
    }

    /// Items per second.
    pub fn per_sec(self) -> i64 {
        self.0
    }
}

/// A job to start.
#[derive(Debug, Clone)]
pub struct StartJob {
    /// What to replay (frozen into ids at creation).
    pub selection: Selection,
    /// Why (checked by the caller: required, bounded), recorded with every replay.
    pub reason: String,
    /// Items per second.
    pub rate: Rate,
    /// The operator starting it.
    pub actor: String,
    /// Where it was started from, recorded with the selection (`console`).
    pub via: Option<&'static str>,
    /// Replay after a fix: the correction every item's replay sends (a
    /// transform for any selection; a whole body or a named effect for
    /// one dead letter only).
    pub fix: Option<Fix>,
}

/// Why a job was not started; nothing was created.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The selection could not be frozen or planned.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The store failed.
    #[error("store failure")]
    Store(#[from] StoreError),
}

/// How the job records its selection: a filter as given, or the number of ids.
fn recorded_selection(selection: &Selection, ids: usize, via: Option<&str>) -> Value {
    let mut recorded = match &selection.filter {
        Some(filter) => json!({ "filter": filter }),
        None => json!({ "ids": ids }),
    };
    if let (Some(via), Some(map)) = (via, recorded.as_object_mut()) {
        map.insert("via".into(), via.into());
    }
    recorded
}

impl BulkReplay<'_> {
    /// Freezes the selection, plans it, and creates the job over exactly
    /// those ids with the summary at creation: running, or, when it holds
    /// an operation of `dead_letters.four_eyes`, stopped until another
    /// operator starts it.
    ///
    /// # Errors
    /// [`StartError`]: nothing was created.
    pub async fn start(&self, job: StartJob) -> Result<ReplayJob, StartError> {
        let ids = self.freeze(&job.selection).await?;
        let summary = self.plan(&ids).await?;
        if let Some(fix) = &job.fix {
            self.check_fix(&ids, fix).await?;
        }
        let new = NewReplayJob {
            id: uuid::Uuid::now_v7().to_string(),
            created_by: job.actor,
            reason: job.reason,
            rate_per_sec: job.rate.per_sec(),
            selection: recorded_selection(&job.selection, ids.len(), job.via),
            // A summary is string-keyed maps and counts: it always serialises.
            summary: serde_json::to_value(&summary).unwrap_or_default(),
            four_eyes: !summary.four_eyes.is_empty(),
            dead_letter_ids: ids,
            fix: job.fix,
        };
        let created = self.store.create_replay_job(&new).await?;
        tracing::info!(job = %created.id, items = created.progress.total, rate = created.rate_per_sec,
            by = %created.created_by, via = job.via.unwrap_or("api"), "replay job created");
        Ok(created)
    }

    /// Refuses a fix that cannot be made for every item now (the job plans
    /// it again for each item when it reaches it), and a whole body or a
    /// named effect for more than one dead letter.
    async fn check_fix(&self, ids: &[String], fix: &Fix) -> Result<(), PlanError> {
        if fix.is_for_one() && ids.len() != 1 {
            let field = if fix.effect_id.is_some() {
                "fix.effect_id"
            } else {
                "fix.body"
            };
            return Err(PlanError::Invalid {
                field,
                problem: format!(
                    "a whole corrected body or a named effect corrects one dead letter, and the \
                     selection holds {}: select one, or correct them by a declared transform",
                    ids.len()
                ),
            });
        }
        for id in ids {
            plan_fix(self.store, &self.config.transforms, id, fix)
                .await
                .map_err(PlanError::Replay)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_stay_within_the_configured_maximum() {
        let config = DeadLetterConfig {
            max_rate_per_sec: 5,
            ..DeadLetterConfig::default()
        };
        assert_eq!(Rate::new(5, &config).unwrap().per_sec(), 5);
        assert_eq!(Rate::new(0, &config), Err(RateOutOfRange { max: 5 }));
        assert!(Rate::new(6, &config).is_err());
    }

    #[test]
    fn the_selection_is_recorded_as_given() {
        let ids = Selection {
            ids: Some(vec!["a".into()]),
            filter: None,
        };
        assert_eq!(
            recorded_selection(&ids, 1, Some("console")),
            json!({ "ids": 1, "via": "console" })
        );
        let filter = Selection {
            ids: None,
            filter: Some(super::super::plan::SelectionFilter {
                class: Some("permanent".into()),
                ..Default::default()
            }),
        };
        assert_eq!(
            recorded_selection(&filter, 3, None),
            json!({ "filter": { "class": "permanent", "namespace": null, "state": null,
                "older_than": null, "newer_than": null } })
        );
    }
}
