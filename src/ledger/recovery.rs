//! The recovery sweeper (DESIGN.md §2, "Nothing is stranded"): one pass
//! moves every stranded `processing` run and every `failed_retryable` run
//! past its reclaim budget to `dead_lettered`, with its dead letter, so no
//! run sits unowned for ever.
//!
//! `serve` runs a pass every `recovery.interval_secs` under the
//! `recovery` maintenance lease (one instance at a time);
//! `oncegate recovery run` runs one now under the same lease. A pass is
//! idempotent: each move repeats its rule and compares-and-sets the
//! version it read, so a second pass finds nothing left, and a run
//! reclaimed meanwhile is skipped (the reclaim wins). Work is bounded:
//! batches of `recovery.batch_size` runs, at most [`MAX_BATCHES`] per
//! selection and pass.

use serde::{Deserialize, Serialize};

use super::port::{RecoveryKind, RecoverySelection, RecoveryStore};
use super::reclaim::{BUDGET_EXHAUSTED, STRANDED};
use super::service::LedgerEvents;
use super::storage::Result;
use super::LedgerConfig;

/// Most batches one selection may take in one pass.
pub const MAX_BATCHES: usize = 100;

/// `[recovery]`: the sweeper inside `serve`. The rules it applies are the
/// ledger's (`[ledger]` and `[[ledger.namespaces]]`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct RecoveryConfig {
    /// Whether `serve` runs the sweeper.
    pub enabled: bool,
    /// Seconds between passes in `serve`.
    pub interval_secs: u64,
    /// Runs per batch (each run moves in a transaction of its own).
    pub batch_size: u32,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            interval_secs: 60,
            batch_size: 100,
        }
    }
}

impl RecoveryConfig {
    /// Checks the interval and the batch size; errors name the field.
    ///
    /// # Errors
    /// `(field, message)` for the first bad field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.interval_secs == 0 {
            return Err(("recovery.interval_secs".into(), "must be positive".into()));
        }
        if !(1..=10_000).contains(&self.batch_size) {
            return Err((
                "recovery.batch_size".into(),
                "must be between 1 and 10000".into(),
            ));
        }
        Ok(())
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RecoveryReport {
    /// Runs dead-lettered as `stranded`.
    pub stranded: u64,
    /// Runs dead-lettered as `reclaim_budget_exhausted`.
    pub exhausted: u64,
    /// Candidates that moved meanwhile (a reclaim or their owner won).
    pub skipped: u64,
}

/// One selection per rule set: each `[[ledger.namespaces]]` entry alone,
/// then every other namespace under the `[ledger]` rules.
pub fn selections(ledger: &LedgerConfig, limit: i64) -> Vec<RecoverySelection> {
    let mut out: Vec<RecoverySelection> = ledger
        .namespaces
        .iter()
        .map(|o| RecoverySelection {
            only: Some(o.namespace.clone()),
            exclude: Vec::new(),
            rules: ledger.recovery(&o.namespace),
            limit,
        })
        .collect();
    out.push(RecoverySelection {
        only: None,
        exclude: ledger
            .namespaces
            .iter()
            .map(|o| o.namespace.clone())
            .collect(),
        rules: ledger.recovery_default(),
        limit,
    });
    out
}

/// Runs one pass: stranded runs, then runs past their budget, each
/// selection in bounded batches; every move is reported to `events`.
///
/// # Errors
/// The store failed; moves committed before the failure stay done.
pub async fn recover(
    store: &dyn RecoveryStore,
    ledger: &LedgerConfig,
    config: &RecoveryConfig,
    events: &dyn LedgerEvents,
) -> Result<RecoveryReport> {
    let mut report = RecoveryReport::default();
    for sel in selections(ledger, i64::from(config.batch_size)) {
        for kind in [RecoveryKind::Stranded, RecoveryKind::BudgetExhausted] {
            sweep_selection(store, &sel, kind, events, &mut report).await?;
        }
    }
    if report.stranded + report.exhausted > 0 {
        tracing::warn!(
            stranded = report.stranded,
            exhausted = report.exhausted,
            "recovery: runs dead-lettered for an operator"
        );
    }
    Ok(report)
}

async fn sweep_selection(
    store: &dyn RecoveryStore,
    sel: &RecoverySelection,
    kind: RecoveryKind,
    events: &dyn LedgerEvents,
    report: &mut RecoveryReport,
) -> Result<()> {
    for _ in 0..MAX_BATCHES {
        let runs = store.recovery_candidates(sel, kind).await?;
        let mut moved = 0;
        for run in &runs {
            let done = match kind {
                RecoveryKind::Stranded => store.strand(run).await?,
                RecoveryKind::BudgetExhausted => store.exhaust(run).await?,
            };
            let Some(done) = done else {
                report.skipped += 1;
                continue;
            };
            moved += 1;
            let class = match kind {
                RecoveryKind::Stranded => {
                    report.stranded += 1;
                    STRANDED
                }
                RecoveryKind::BudgetExhausted => {
                    report.exhausted += 1;
                    BUDGET_EXHAUSTED
                }
            };
            events.run_recovered(done.namespace.as_str(), class);
            events.run_moved(&done);
        }
        // A short batch was the last; a batch of which nothing moved would
        // come back the same.
        if moved == 0 || (runs.len() as i64) < sel.limit {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::config::NamespaceRecovery;

    #[test]
    fn overrides_get_a_selection_each_and_the_rest_share_the_defaults() {
        let mut ledger = LedgerConfig::default();
        ledger.namespaces.push(NamespaceRecovery {
            namespace: "stripe".into(),
            stranded_after: None,
            max_reclaims: Some(1),
            retry_window: None,
            tier: None,
        });
        let sels = selections(&ledger, 7);
        assert_eq!(sels.len(), 2);
        assert_eq!(sels[0].only.as_deref(), Some("stripe"));
        assert_eq!(sels[0].rules.max_reclaims, 1);
        assert_eq!(sels[1].exclude, vec!["stripe".to_owned()]);
        assert_eq!(sels[1].rules, ledger.recovery_default());
        assert!(sels.iter().all(|s| s.limit == 7));
        assert!(RecoveryConfig::default().validate().is_ok());
        let bad = RecoveryConfig {
            batch_size: 0,
            ..RecoveryConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().0, "recovery.batch_size");
    }
}
