//! The outbox's transactions: effects queued with the move that permits
//! them, leased and recorded by the dispatcher (a batch per statement),
//! cancelled, and the kill switch; and the [`OutboxStore`] port.

use std::collections::HashMap;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::chain::{append_system_event, audit_entry, note, record};
use super::deadletter::record_dead_letter;
use super::ledger::{owner_move, MoveFields};
use super::{to_json, Owned};
use crate::db::exec::{Args, Tx};
use crate::db::rows::{
    AttemptBatchRow, AttemptRow, AuditBatchRow, EffectRow, RunKeyBatchRow, RunRow, SwitchRow,
    VerdictBatchRow,
};
use crate::db::{Backend, Db, Finish};
use crate::deadletter::{DeadLetterClass, DeadLetterInput};
use crate::ledger::storage::{Result, StoreError};
use crate::ledger::{IdempotencyKey, Move, Moved, Namespace, OwnerCall, Run};
use crate::outbox::port::OutboxStore;
use crate::outbox::seal::{EffectSeal, EFFECT_QUEUED};
use crate::outbox::{
    ActionSwitch, AttemptRecord, AttemptView, Decision, Effect, EffectRole, FailClass, Leased,
    NewEffect, Recorded, TargetRoom, Verdict,
};

/// Queues an effect of `run` unless the same (run, effect type, target)
/// is queued already; a queued effect's immutable fields are sealed into
/// the run's audit chain ([`crate::outbox::seal`]).
pub(crate) async fn insert_effect(tx: &mut Tx<'_>, run: &Run, effect: &NewEffect) -> Result<()> {
    let st = tx.st;
    let id = uuid::Uuid::now_v7().to_string();
    let args = Args::new()
        .bind(&id)
        .bind(run.namespace.as_str())
        .bind(run.key.as_str())
        .bind(&effect.operation)
        .bind(&effect.effect_type)
        .bind(&effect.target)
        .bind(&effect.method)
        .bind(&effect.url)
        .bind(to_json(&effect.headers)?)
        .bind(effect.body.as_deref())
        .bind(&effect.idempotency_key)
        .bind(to_json(&effect.spec)?)
        .bind(effect.not_before)
        .bind(run.updated_at)
        .bind(effect.role.as_str());
    let inserted: Option<(String,)> = tx.optional(&st.outbox.insert_effect, args).await?;
    if inserted.is_none() {
        return Ok(());
    }
    let seal = EffectSeal::of(
        &effect.method,
        &effect.url,
        &effect.headers,
        effect.body.as_deref(),
    );
    let detail = seal.detail(&id, &effect.effect_type, &effect.target);
    let touch = Args::new()
        .bind(run.namespace.as_str())
        .bind(run.key.as_str());
    let row: RunRow = tx.one(&st.runs.touch, touch).await?;
    note(
        tx,
        &row,
        EFFECT_QUEUED,
        "outbox",
        detail,
        run.updated_at,
        None,
    )
    .await?;
    Ok(())
}

/// The owner's decision: effects queued and the run `approved` (or
/// `completed` with no effects), in one transaction.
async fn commit(
    tx: &mut Tx<'_>,
    call: &OwnerCall,
    result: Option<&Value>,
    effects: &[NewEffect],
) -> Result<Finish<Owned<Moved>>> {
    let kind = if effects.is_empty() {
        Move::Complete
    } else {
        Move::Approve
    };
    let types: Vec<&str> = effects.iter().map(|e| e.effect_type.as_str()).collect();
    let detail = json!({ "effects": types, "has_result": result.is_some() });
    let fields = MoveFields {
        result: result.map(Value::to_string),
        ..MoveFields::default()
    };
    owner_move(tx, call, kind, fields, detail, effects).await
}

/// Leases up to `limit` due effects for `owner`, of each target in
/// `rooms` up to its own limit; the lease is durable before anything is
/// sent.
async fn lease(
    tx: &mut Tx<'_>,
    owner: &str,
    lease_ms: i64,
    limit: i64,
    rooms: &[TargetRoom],
) -> Result<(Vec<EffectRow>, Vec<(String, String, i64, String)>)> {
    let st = tx.st;
    if let Some(plan) = &st.outbox.lease_plan {
        tx.execute(plan, Args::new()).await?;
    }
    let mut rows = Vec::new();
    for TargetRoom {
        target,
        limit: target_limit,
    } in rooms
    {
        let mut taken = 0;
        for statement in &st.outbox.lease {
            let room = (*target_limit - taken).min(limit - rows.len() as i64);
            if room <= 0 {
                break;
            }
            let args = Args::new()
                .bind(tx.now)
                .bind(owner)
                .bind(lease_ms)
                .bind(room)
                .bind(target);
            let leased: Vec<EffectRow> = tx.all(statement, args).await?;
            taken += leased.len() as i64;
            rows.extend(leased);
        }
    }
    if rows.is_empty() {
        return Ok((rows, Vec::new()));
    }
    let runs = tx
        .all(&st.outbox.runs_for_send, Args::new().bind(owner))
        .await?;
    Ok((rows, runs))
}

/// The leased effects with the run fields their sends need.
fn leased(
    owner: &str,
    rows: Vec<EffectRow>,
    runs: Vec<(String, String, i64, String)>,
) -> Result<Vec<Leased>> {
    let runs: HashMap<(String, String), (i64, String)> = runs
        .into_iter()
        .map(|(ns, key, version, corr)| ((ns, key), (version, corr)))
        .collect();
    let mut leased = Vec::with_capacity(rows.len());
    for row in rows {
        let effect = row.into_effect()?;
        let Some((version, correlation_id)) =
            runs.get(&(effect.namespace.clone(), effect.key.clone()))
        else {
            return Err(StoreError::Corrupt(format!(
                "effect {} has no run",
                effect.id
            )));
        };
        leased.push(Leased {
            first_sent_at: effect.first_sent_at,
            run_version: *version,
            correlation_id: correlation_id.clone(),
            effect,
            owner: owner.to_owned(),
        });
    }
    Ok(leased)
}

/// Records a batch of decisions in one transaction: each by
/// compare-and-set on its lease, with its attempt evidence and its run's
/// move (see [`Recorded`]). The effects, their attempts, the runs they
/// complete and those runs' audit entries are written a statement each,
/// whatever the batch's size; only a failure that ends a run is written
/// on its own.
async fn record_batch(tx: &mut Tx<'_>, decisions: &[Decision]) -> Result<Vec<Recorded>> {
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
async fn insert_attempts(
    tx: &mut Tx<'_>,
    decisions: &[Decision],
    written: &HashMap<String, Effect>,
) -> Result<()> {
    let st = tx.st;
    let redactor = &st.redactor;
    let evidence: Vec<(&Decision, &AttemptRecord, Value)> = decisions
        .iter()
        .filter_map(|d| {
            let attempt = d.attempt.as_ref()?;
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
async fn complete_runs(
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
async fn fail_run(
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
fn dead_letter_class(class: FailClass) -> Option<DeadLetterClass> {
    match class {
        FailClass::Rejected => None,
        FailClass::Permanent => Some(DeadLetterClass::Permanent),
        FailClass::RetryExhausted => Some(DeadLetterClass::RetryExhausted),
        FailClass::UnknownOutcome => Some(DeadLetterClass::UnknownOutcome),
    }
}

/// Cancels a pending effect; the run completes if nothing else is outstanding.
async fn cancel(tx: &mut Tx<'_>, id: &str, actor: &str) -> Result<Finish<Option<Effect>>> {
    let st = tx.st;
    let args = Args::new().bind(tx.now).bind(id);
    let Some(row) = tx.optional::<EffectRow>(&st.outbox.cancel, args).await? else {
        return Ok(Finish::Rollback(None));
    };
    let effect = row.into_effect()?;
    complete_run_if_done(tx, &effect, actor).await?;
    Ok(Finish::Commit(Some(effect)))
}

/// Sets a kill-switch scope and audits the change under
/// `oncegate / actions:<scope>`, chained like any key.
async fn set_switch(tx: &mut Tx<'_>, scope: &str, enabled: bool, actor: &str) -> Result<()> {
    let st = tx.st;
    let now = tx.clock_now;
    let args = Args::new()
        .bind(scope)
        .bind(i64::from(enabled))
        .bind(actor)
        .bind(now);
    tx.execute(&st.outbox.set_switch, args).await?;
    let kind = if enabled {
        "actions_enabled"
    } else {
        "actions_disabled"
    };
    let detail = json!({ "scope": scope, "enabled": enabled });
    append_system_event(tx, &format!("actions:{scope}"), kind, actor, detail, now).await
}

#[async_trait]
impl<B: Backend> OutboxStore for Db<B> {
    async fn commit(
        &self,
        call: &OwnerCall,
        result: Option<&Value>,
        effects: &[NewEffect],
    ) -> Result<Moved> {
        let (owned, result, effects) = (call.clone(), result.cloned(), effects.to_vec());
        let moved = self
            .write(move |tx| {
                Box::pin(async move { commit(tx, &owned, result.as_ref(), &effects).await })
            })
            .await?;
        self.owned(call, moved).await
    }

    async fn lease_effects(
        &self,
        owner: &str,
        lease_ms: i64,
        limit: i64,
        rooms: &[TargetRoom],
    ) -> Result<Vec<Leased>> {
        let (lessee, rooms) = (owner.to_owned(), rooms.to_vec());
        let (rows, runs) = self
            .commit(move |tx| {
                Box::pin(async move { lease(tx, &lessee, lease_ms, limit, &rooms).await })
            })
            .await?;
        leased(owner, rows, runs)
    }

    async fn record_decisions(&self, decisions: &[Decision]) -> Result<Vec<Recorded>> {
        let decisions = decisions.to_vec();
        self.commit(move |tx| {
            Box::pin(async move {
                let recorded = record_batch(tx, &decisions).await?;
                tx.before_commit();
                Ok(recorded)
            })
        })
        .await
    }

    async fn expire_sending(&self) -> Result<u64> {
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                tx.execute(&st.outbox.expire, Args::new().bind(tx.now))
                    .await
            })
        })
        .await
    }

    async fn cancel_effect(&self, id: &str, actor: &str) -> Result<Option<Effect>> {
        let (id, actor) = (id.to_owned(), actor.to_owned());
        self.write(move |tx| Box::pin(async move { cancel(tx, &id, &actor).await }))
            .await
    }

    async fn effect(&self, id: &str) -> Result<Option<Effect>> {
        let rd = self.reader();
        rd.optional::<EffectRow>(&rd.st.outbox.effect, Args::new().bind(id))
            .await?
            .map(EffectRow::into_effect)
            .transpose()
    }

    async fn attempts(&self, effect_id: &str) -> Result<Vec<AttemptView>> {
        let rd = self.reader();
        rd.all::<AttemptRow>(&rd.st.outbox.attempts, Args::new().bind(effect_id))
            .await?
            .into_iter()
            .map(AttemptRow::into_view)
            .collect()
    }

    async fn effects_of(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Vec<Effect>> {
        let rd = self.reader();
        let args = Args::new().bind(namespace.as_str()).bind(key.as_str());
        rd.all::<EffectRow>(&rd.st.outbox.effects_of, args)
            .await?
            .into_iter()
            .map(EffectRow::into_effect)
            .collect()
    }

    async fn set_actions(&self, scope: &str, enabled: bool, actor: &str) -> Result<()> {
        let (scope, actor) = (scope.to_owned(), actor.to_owned());
        self.commit(move |tx| {
            Box::pin(async move { set_switch(tx, &scope, enabled, &actor).await })
        })
        .await
    }

    async fn action_switches(&self) -> Result<Vec<ActionSwitch>> {
        let rd = self.reader();
        let rows: Vec<SwitchRow> = rd.all(&rd.st.outbox.switches, Args::new()).await?;
        Ok(rows.into_iter().map(ActionSwitch::from).collect())
    }
}
