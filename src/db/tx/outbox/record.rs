//! The dispatcher's records: a batch of decisions, their attempts, the runs\nthey complete or fail, and the dead letters they leave.

use super::super::chain::{audit_entry, record};
use super::super::deadletter::record_dead_letter;
use super::super::to_json;
use crate::db::exec::{Args, Tx};
use crate::db::rows::{
    AttemptBatchRow, AuditBatchRow, EffectRow, RunKeyBatchRow, RunRow, VerdictBatchRow,
};
use crate::deadletter::{DeadLetterClass, DeadLetterInput};
use crate::ledger::storage::{Result, StoreError};
use crate::ledger::{Move, Run};
use crate::outbox::{AttemptOutcome, Decision, Effect, EffectRole, FailClass, Recorded, Verdict};
use serde_json::{json, Value};
use std::collections::HashMap;

/// Records a batch of decisions in one transaction: each by
/// compare-and-set on its lease, with its attempt evidence and its run's
/// move (see [`Recorded`]). The effects, their attempts, the runs they
/// complete and those runs' audit entries are written a statement each,
/// whatever the batch's size; only a failure that ends a run is written
/// on its own.
pub(super) async fn record_batch(tx: &mut Tx<'_>, decisions: &[Decision]) -> Result<Vec<Recorded>> {
    let st = tx.st;
    if let Some(plan) = &st.outbox.record_plan {
        tx.execute(plan, Args::new()).await?;
    }
    if let Some(lock_runs) = &st.runs.lock_runs {
        let runs: Vec<RunKeyBatchRow<'_>> = decisions
            .iter()
            .map(|d| RunKeyBatchRow::new(&d.leased.effect.namespace, &d.leased.effect.key))
            .collect();
        tx.execute(lock_runs, Args::new().bind(to_json(&runs)?))
            .await?;
    }
    let verdicts: Vec<VerdictBatchRow<'_>> = decisions.iter().map(VerdictBatchRow::new).collect();
    let args = Args::new().bind(tx.now).bind(to_json(&verdicts)?);
    let rows: Vec<EffectRow> = tx.all(&st.outbox.record_batch, args).await?;
    let mut written: HashMap<String, Effect> = HashMap::with_capacity(rows.len());
    for row in rows {
        let effect = row.into_effect()?;
        written.insert(effect.id.clone(), effect);
    }
    insert_attempts(tx, decisions, &written).await?;
    let mut recorded = Vec::with_capacity(decisions.len());
    // The completed effects' runs, each with its last decision in the batch.
    let mut completing: Vec<(&Effect, usize)> = Vec::new();
    for (
        i,
        Decision {
            leased, verdict, ..
        },
    ) in decisions.iter().enumerate()
    {
        let Some(effect) = written.get(&leased.effect.id) else {
            recorded.push(Recorded::Lost);
            continue;
        };
        let ended = if matches!(verdict, Verdict::Completed { .. }) {
            if effect.new.role == EffectRole::Act {
                completing
                    .retain(|(e, _)| (&e.namespace, &e.key) != (&effect.namespace, &effect.key));
                completing.push((effect, i));
            }
            None
        } else {
            fail_run(tx, effect, verdict, &leased.owner).await?
        };
        recorded.push(Recorded::Written {
            ended: ended.map(Box::new),
        });
    }
    if !completing.is_empty() {
        // The effects are recorded, their runs not yet moved: both are in
        // this transaction, so a crash here undoes both.
        crate::chaos::point("after_record_before_completion");
        for (run, i) in complete_runs(tx, &completing, decisions).await? {
            recorded[i] = Recorded::Written {
                ended: Some(Box::new(run)),
            };
        }
    }
    Ok(recorded)
}

/// The evidence of every recorded decision that made an attempt, redacted
/// as the namespace asks.
pub(super) async fn insert_attempts(
    tx: &mut Tx<'_>,
    decisions: &[Decision],
    written: &HashMap<String, Effect>,
) -> Result<()> {
    let st = tx.st;
    let redactor = &st.redactor;
    let evidence: Vec<(&Decision, &AttemptOutcome, Value)> = decisions
        .iter()
        .filter_map(|d| {
            let attempt = &d.attempt.as_ref()?.outcome;
            let effect = written.get(&d.leased.effect.id)?;
            let mut evidence = attempt.evidence.clone();
            if redactor.applies(&effect.namespace) {
                let secrets = redactor.secrets_in(&effect.namespace, effect.new.body.as_deref());
                redactor.evidence(&effect.namespace, &mut evidence, &secrets);
            }
            Some((d, attempt, evidence))
        })
        .collect();
    if evidence.is_empty() {
        return Ok(());
    }
    let rows: Vec<AttemptBatchRow<'_>> = evidence
        .iter()
        .map(|(d, attempt, evidence)| {
            AttemptBatchRow::new(&d.leased.effect.id, &d.leased.owner, attempt, evidence)
        })
        .collect();
    tx.execute(
        &st.outbox.insert_attempts,
        Args::new().bind(to_json(&rows)?),
    )
    .await?;
    Ok(())
}

/// Completes the runs of `completing` that have nothing left outstanding,
/// with an audit entry each naming the last effect; returns each completed
/// run with its decision's index.
pub(super) async fn complete_runs(
    tx: &mut Tx<'_>,
    completing: &[(&Effect, usize)],
    decisions: &[Decision],
) -> Result<Vec<(Run, usize)>> {
    let st = tx.st;
    let keys: Vec<RunKeyBatchRow<'_>> = completing
        .iter()
        .map(|(e, _)| RunKeyBatchRow::new(&e.namespace, &e.key))
        .collect();
    let args = Args::new().bind(tx.now).bind(to_json(&keys)?);
    let rows: Vec<RunRow> = tx.all(&st.runs.complete_runs, args).await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let mut completed = Vec::with_capacity(rows.len());
    let mut entries = Vec::with_capacity(rows.len());
    for row in &rows {
        let run = row.to_run()?;
        let Some((effect, i)) = completing
            .iter()
            .find(|(e, _)| e.namespace == run.namespace.as_str() && e.key == run.key.as_str())
        else {
            return Err(StoreError::Corrupt(format!(
                "completed run {} was not asked for",
                run.key.as_str()
            )));
        };
        let detail = json!({ "last_effect_id": effect.id, "external_ref": effect.external_ref });
        let actor = &decisions[*i].leased.owner;
        entries.push(audit_entry(
            tx,
            row,
            &run,
            Move::EffectsCompleted,
            actor,
            detail,
        ));
        completed.push((run, *i));
    }
    let audits: Vec<AuditBatchRow<'_>> = rows
        .iter()
        .zip(&entries)
        .map(|(row, entry)| AuditBatchRow::new(entry, row.audit_head.as_deref()))
        .collect();
    tx.execute(&st.runs.append_audits, Args::new().bind(to_json(&audits)?))
        .await?;
    Ok(completed)
}

/// Ends the effect's run when its verdict is a failure that stops it (a
/// business rejection: `failed_terminal`; anything else: `dead_lettered`,
/// with a dead letter); returns the run when it moved.
pub(super) async fn fail_run(
    tx: &mut Tx<'_>,
    effect: &Effect,
    verdict: &Verdict,
    actor: &str,
) -> Result<Option<Run>> {
    if effect.new.role == EffectRole::Notify {
        // A notification (a decision callback) reports on its run; it never moves it.
        return Ok(None);
    }
    let (to, reason, kind) = match verdict {
        Verdict::Failed {
            class: FailClass::Rejected,
            reason,
        } => ("failed_terminal", reason, Move::EffectRejected),
        Verdict::Failed { reason, .. } => ("dead_lettered", reason, Move::EffectsFailed),
        _ => return Ok(None),
    };
    let st = tx.st;
    let args = Args::new()
        .bind(tx.now)
        .bind(&effect.namespace)
        .bind(&effect.key)
        .bind(to)
        .bind(reason);
    let Some(row) = tx.optional::<RunRow>(&st.runs.fail_run, args).await? else {
        return Ok(None);
    };
    let run = row.to_run()?;
    let detail =
        json!({ "effect_id": effect.id, "effect_type": effect.new.effect_type, "reason": reason });
    record(tx, &row, &run, kind, actor, detail.clone()).await?;
    if let Verdict::Failed { class, reason } = verdict {
        if let Some(class) = dead_letter_class(*class) {
            let input = DeadLetterInput::new(class, reason.clone(), detail);
            record_dead_letter(tx, &run, &input, run.updated_at).await?;
        }
    }
    Ok(Some(run))
}

/// Completes the effect's run when nothing else is outstanding.
pub(crate) async fn complete_run_if_done(
    tx: &mut Tx<'_>,
    effect: &Effect,
    actor: &str,
) -> Result<Option<Run>> {
    let st = tx.st;
    let args = Args::new()
        .bind(tx.now)
        .bind(&effect.namespace)
        .bind(&effect.key);
    let Some(row) = tx.optional::<RunRow>(&st.runs.complete_run, args).await? else {
        return Ok(None);
    };
    let run = row.to_run()?;
    let detail = json!({ "last_effect_id": effect.id, "external_ref": effect.external_ref });
    record(tx, &row, &run, Move::EffectsCompleted, actor, detail).await?;
    Ok(Some(run))
}

/// The dead-letter class of a failure that stops the run (a business
/// rejection ends it `failed_terminal` instead).
pub(super) fn dead_letter_class(class: FailClass) -> Option<DeadLetterClass> {
    match class {
        FailClass::Rejected => None,
        FailClass::Permanent => Some(DeadLetterClass::Permanent),
        FailClass::RetryExhausted => Some(DeadLetterClass::RetryExhausted),
        FailClass::UnknownOutcome => Some(DeadLetterClass::UnknownOutcome),
    }
}
