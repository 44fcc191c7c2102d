//! The recovery moves (DESIGN.md §2, "Nothing is stranded"): a stranded
//! `processing` run and a `failed_retryable` run past its reclaim budget go
//! to `dead_lettered`, each by one guarded statement that repeats the rule
//! (and, for the sweeper, compare-and-set on the version it read, so a
//! concurrent reclaim wins cleanly), with its audit entry and its dead
//! letter in the same transaction; and the [`RecoveryStore`] port.

use async_trait::async_trait;
use serde_json::{json, Value};

use super::super::chain::record;
use super::super::deadletter::record_dead_letter;
use crate::db::exec::{Args, Tx};
use crate::db::rows::{AuditRow, RunRow};
use crate::db::sql::recovery::candidates;
use crate::db::{Backend, Db, Finish};
use crate::deadletter::{DeadLetterClass, DeadLetterInput};
use crate::ledger::port::{RecoveryKind, RecoverySelection, RecoveryStore};
use crate::ledger::storage::Result;
use crate::ledger::{Move, Recovery, Run};

/// The audit actor of the recovery moves.
pub(crate) const RECOVERY: &str = "oncegate:recovery";

/// Lease history entries kept in a stranded run's evidence (the latest).
const LEASE_HISTORY: usize = 20;

/// The budget a statement binds, and what the evidence says about it.
fn budget_detail(run: &Run, rules: &Recovery) -> Value {
    json!({
        "reclaims": run.reclaims,
        "max_reclaims": rules.max_reclaims,
        "budget_started_at": run.budget_started(),
        "retry_window_ms": rules.retry_window_ms,
        "attempts": run.attempts,
        "last_error": run.last_error,
        "claimed_by": run.claimed_by,
        "execution_ref": run.metadata.execution_ref,
    })
}

/// `failed_retryable → dead_lettered` for a run past its budget, with its
/// audit entry and dead letter. `version` guards the sweeper's move (what
/// it read); the claim path passes `None` (its claim statement has just
/// found the run unclaimable in the same transaction) and its
/// `payload_hash`, so a conflicting payload moves nothing. `None` when
/// the run is not (or no longer) past its budget.
pub(crate) async fn exhaust(
    tx: &mut Tx<'_>,
    namespace: &str,
    key: &str,
    version: Option<i64>,
    payload_hash: Option<&str>,
    trigger: &str,
) -> Result<Option<Run>> {
    let st = tx.st;
    let rules = st.ledger.recovery(namespace);
    let reason = format!(
        "reclaim budget exhausted: at most {} reclaim(s) within {} ms",
        rules.max_reclaims, rules.retry_window_ms
    );
    let args = Args::new()
        .bind(tx.now)
        .bind(namespace)
        .bind(key)
        .bind(reason.as_str())
        .bind(rules.max_reclaims)
        .bind(rules.retry_window_ms)
        .bind(version)
        .bind(payload_hash);
    let Some(row) = tx.optional::<RunRow>(&st.runs.exhaust, args).await? else {
        return Ok(None);
    };
    let run = row.to_run()?;
    let mut detail = budget_detail(&run, &rules);
    detail["trigger"] = json!(trigger);
    let mv = Move::ReclaimBudgetExhausted;
    record(tx, &row, &run, mv, RECOVERY, detail.clone()).await?;
    let mut input = DeadLetterInput::new(DeadLetterClass::ReclaimBudgetExhausted, reason, detail);
    input.evidence = Some(json!({ "last_error": run.last_error, "reclaims": run.reclaims }));
    record_dead_letter(tx, &run, &input, run.updated_at).await?;
    Ok(Some(run))
}

/// The run's leases as its audit chain recorded them: each claim,
/// reclaim and renewal (the latest [`LEASE_HISTORY`]).
async fn lease_history(tx: &mut Tx<'_>, namespace: &str, key: &str) -> Result<Value> {
    let st = tx.st;
    let rows: Vec<AuditRow> = tx
        .all(&st.audit.audit_trail, Args::new().bind(namespace).bind(key))
        .await?;
    let leases = [Move::Claim, Move::Reclaim, Move::Renew].map(Move::as_str);
    let mut history = Vec::new();
    for row in rows {
        let entry = row.into_record()?.entry;
        if leases.contains(&entry.kind.as_str()) {
            history.push(json!({
                "kind": entry.kind, "actor": entry.actor, "version": entry.version,
                "at": entry.created_at, "lease_ms": entry.detail.get("lease_ms"),
                "execution_ref": entry.detail.get("execution_ref"),
            }));
        }
    }
    let skip = history.len().saturating_sub(LEASE_HISTORY);
    Ok(Value::Array(history.split_off(skip)))
}

/// `processing → dead_lettered` for a stranded run, by compare-and-set on
/// the version the sweeper read; `None` when a reclaim (or its owner) moved
/// it meanwhile.
async fn strand(tx: &mut Tx<'_>, seen: &Run) -> Result<Finish<Option<Run>>> {
    let st = tx.st;
    let (ns, key) = (seen.namespace.as_str(), seen.key.as_str());
    let rules = st.ledger.recovery(ns);
    let reason = format!(
        "stranded: the lease expired more than {} ms ago and nobody reclaimed the run",
        rules.stranded_after_ms
    );
    let args = Args::new()
        .bind(tx.now)
        .bind(ns)
        .bind(key)
        .bind(reason.as_str())
        .bind(seen.version.get())
        .bind(rules.stranded_after_ms);
    let Some(row) = tx.optional::<RunRow>(&st.runs.strand, args).await? else {
        return Ok(Finish::Rollback(None));
    };
    let run = row.to_run()?;
    let detail = json!({
        "last_owner": seen.claimed_by,
        "execution_ref": seen.metadata.execution_ref,
        "lease_started_at": seen.lease_started_at,
        "lease_expired_at": seen.lease_expires_at,
        "stranded_after_ms": rules.stranded_after_ms,
        "attempts": seen.attempts,
        "version": seen.version.get(),
    });
    record(tx, &row, &run, Move::Stranded, RECOVERY, detail.clone()).await?;
    let mut evidence = detail.clone();
    evidence["lease_history"] = lease_history(tx, ns, key).await?;
    let mut input = DeadLetterInput::new(DeadLetterClass::Stranded, reason, detail);
    input.evidence = Some(evidence);
    record_dead_letter(tx, &run, &input, run.updated_at).await?;
    Ok(Finish::Commit(Some(run)))
}

#[async_trait]
impl<B: Backend> RecoveryStore for Db<B> {
    async fn recovery_candidates(
        &self,
        sel: &RecoverySelection,
        kind: RecoveryKind,
    ) -> Result<Vec<Run>> {
        let rd = self.reader();
        let sql = candidates(rd.st.dialect, sel, kind);
        let mut args = Args::new().bind(rd.now);
        args = match kind {
            RecoveryKind::Stranded => args.bind(sel.rules.stranded_after_ms),
            RecoveryKind::BudgetExhausted => args
                .bind(sel.rules.max_reclaims)
                .bind(sel.rules.retry_window_ms),
        };
        args = args.bind(sel.limit);
        if let Some(ns) = &sel.only {
            args.push(ns);
        } else {
            for ns in &sel.exclude {
                args.push(ns);
            }
        }
        rd.all::<RunRow>(&sql, args)
            .await?
            .iter()
            .map(RunRow::to_run)
            .collect()
    }

    async fn strand(&self, run: &Run) -> Result<Option<Run>> {
        let seen = run.clone();
        self.write(move |tx| Box::pin(async move { strand(tx, &seen).await }))
            .await
    }

    async fn exhaust(&self, run: &Run) -> Result<Option<Run>> {
        let (ns, key, version) = (
            run.namespace.to_string(),
            run.key.to_string(),
            run.version.get(),
        );
        self.write(move |tx| {
            Box::pin(async move {
                let moved = exhaust(tx, &ns, &key, Some(version), None, "sweeper").await?;
                Ok(match moved {
                    Some(run) => Finish::Commit(Some(run)),
                    None => Finish::Rollback(None),
                })
            })
        })
        .await
    }
}
