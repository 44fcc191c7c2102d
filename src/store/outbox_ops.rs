//! The outbox's transaction logic, expanded per backend like
//! [`ledger_ops!`](crate::ledger_ops).

/// Expands the outbox operations inside a backend's `ops` module, as a
/// child module `outbox` that reuses the ledger's audit and fetch helpers.
#[macro_export]
#[doc(hidden)]
macro_rules! outbox_ops {
    ($db:ty) => {
        pub(crate) mod outbox {
            use std::collections::HashMap;

            use serde_json::{json, Value};
            use sqlx::Pool;

            use super::{audit_entry, owner_move, record, Cx, MoveFields, WriteTx};
            use $crate::deadletter::{DeadLetterClass, DeadLetterInput};
            use $crate::ledger::{Move, Moved, OwnerCall, Run};
            use $crate::outbox::{
                ActionSwitch, AttemptView, Decision, Effect, FailClass, Leased, NewEffect, Recorded, TargetRoom,
                Verdict,
            };
            use $crate::store::row::{
                AttemptBatchRow, AttemptRow, AuditBatchRow, EffectRow, RunKeyBatchRow, RunRow, SwitchRow,
                VerdictBatchRow,
            };
            use $crate::store::sql::Statements;
            use $crate::store::{Result, StoreError};

            /// The owner's decision: effects queued and the run `approved`
            /// (or `completed` with no effects), in one transaction.
            pub(crate) async fn commit(
                cx: &Cx<'_>,
                call: &OwnerCall,
                result: Option<&Value>,
                effects: &[NewEffect],
            ) -> Result<Moved> {
                let kind = if effects.is_empty() { Move::Complete } else { Move::Approve };
                let types: Vec<&str> = effects.iter().map(|e| e.effect_type.as_str()).collect();
                let detail = json!({ "effects": types, "has_result": result.is_some() });
                let fields = MoveFields { result: result.map(Value::to_string), error: None, reason: None };
                owner_move(cx, call, kind, fields, detail, effects).await
            }

            /// Leases up to `limit` due effects for `owner`, of each target
            /// in `rooms` up to its own limit.
            pub(crate) async fn lease(
                cx: &Cx<'_>,
                owner: &str,
                lease_ms: i64,
                limit: i64,
                rooms: &[TargetRoom],
            ) -> Result<Vec<Leased>> {
                let mut tx = cx.write.begin().await?;
                if let Some(plan) = &cx.st.outbox.lease_plan {
                    sqlx::query(plan).execute(&mut *tx).await?;
                }
                let mut rows = Vec::new();
                for TargetRoom { target, limit: target_limit } in rooms {
                    let mut taken = 0;
                    for statement in &cx.st.outbox.lease {
                        let room = (*target_limit - taken).min(limit - rows.len() as i64);
                        if room <= 0 {
                            break;
                        }
                        let leased = sqlx::query_as::<_, EffectRow>(statement)
                            .bind(cx.now)
                            .bind(owner)
                            .bind(lease_ms)
                            .bind(room)
                            .bind(target)
                            .fetch_all(&mut *tx)
                            .await?;
                        taken += leased.len() as i64;
                        rows.extend(leased);
                    }
                }
                if rows.is_empty() {
                    tx.commit().await?;
                    return Ok(Vec::new());
                }
                let runs: Vec<(String, String, i64, String)> = sqlx::query_as(&cx.st.outbox.runs_for_send)
                    .bind(owner)
                    .fetch_all(&mut *tx)
                    .await?;
                // The lease is durable before anything is sent.
                tx.commit().await?;
                let runs: std::collections::HashMap<(String, String), (i64, String)> =
                    runs.into_iter().map(|(ns, key, version, corr)| ((ns, key), (version, corr))).collect();
                let mut leased = Vec::with_capacity(rows.len());
                for row in rows {
                    let effect = row.into_effect()?;
                    let Some((version, correlation_id)) = runs.get(&(effect.namespace.clone(), effect.key.clone())) else {
                        return Err(StoreError::Corrupt(format!("effect {} has no run", effect.id)));
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
            /// compare-and-set on its lease, with its attempt evidence and
            /// its run's move (see [`Recorded`]). The effects, their
            /// attempts, the runs they complete and those runs' audit
            /// entries are written a statement each, whatever the batch's
            /// size; only a failure that ends a run is written on its own.
            pub(crate) async fn record_decisions(cx: &Cx<'_>, decisions: &[Decision]) -> Result<Vec<Recorded>> {
                let mut tx = cx.write.begin().await?;
                let recorded = record_batch(&mut tx, cx, decisions).await?;
                $crate::chaos::before_commit::<$db>();
                tx.commit().await?;
                Ok(recorded)
            }

            async fn record_batch(tx: &mut WriteTx, cx: &Cx<'_>, decisions: &[Decision]) -> Result<Vec<Recorded>> {
                if let Some(plan) = &cx.st.outbox.record_plan {
                    sqlx::query(plan).execute(&mut **tx).await?;
                }
                if let Some(lock_runs) = &cx.st.outbox.lock_runs {
                    let runs: Vec<RunKeyBatchRow<'_>> = decisions
                        .iter()
                        .map(|d| RunKeyBatchRow::new(&d.leased.effect.namespace, &d.leased.effect.key))
                        .collect();
                    sqlx::query(lock_runs).bind(to_json(&runs)?).execute(&mut **tx).await?;
                }
                let verdicts: Vec<VerdictBatchRow<'_>> = decisions.iter().map(VerdictBatchRow::new).collect();
                let rows = sqlx::query_as::<_, EffectRow>(&cx.st.outbox.record_batch)
                    .bind(cx.now)
                    .bind(to_json(&verdicts)?)
                    .fetch_all(&mut **tx)
                    .await?;
                let mut written: HashMap<String, Effect> = HashMap::with_capacity(rows.len());
                for row in rows {
                    let effect = row.into_effect()?;
                    written.insert(effect.id.clone(), effect);
                }
                insert_attempts(tx, cx, decisions, &written).await?;
                let mut recorded = Vec::with_capacity(decisions.len());
                // The completed effects' runs, each with its last decision in the batch.
                let mut completing: Vec<(&Effect, usize)> = Vec::new();
                for (i, Decision { leased, verdict, .. }) in decisions.iter().enumerate() {
                    let Some(effect) = written.get(&leased.effect.id) else {
                        recorded.push(Recorded::Lost);
                        continue;
                    };
                    let ended = if matches!(verdict, Verdict::Completed { .. }) {
                        if effect.new.operation != $crate::approval::CALLBACK_OPERATION {
                            completing.retain(|(e, _)| (&e.namespace, &e.key) != (&effect.namespace, &effect.key));
                            completing.push((effect, i));
                        }
                        None
                    } else {
                        fail_run(tx, cx, effect, verdict, &leased.owner).await?
                    };
                    recorded.push(Recorded::Written { ended: ended.map(Box::new) });
                }
                if !completing.is_empty() {
                    // The effects are recorded, their runs not yet moved: both
                    // are in this transaction, so a crash here undoes both.
                    $crate::chaos::point("after_record_before_completion");
                    for (run, i) in complete_runs(tx, cx, &completing, decisions).await? {
                        recorded[i] = Recorded::Written { ended: Some(Box::new(run)) };
                    }
                }
                Ok(recorded)
            }

            /// The evidence of every recorded decision that made an attempt,
            /// redacted as the namespace asks.
            async fn insert_attempts(
                tx: &mut WriteTx,
                cx: &Cx<'_>,
                decisions: &[Decision],
                written: &HashMap<String, Effect>,
            ) -> Result<()> {
                let redactor = &cx.st.redactor;
                let evidence: Vec<(&Decision, &$crate::outbox::AttemptRecord, Value)> = decisions
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
                    .map(|(d, attempt, evidence)| AttemptBatchRow::new(&d.leased.effect.id, &d.leased.owner, attempt, evidence))
                    .collect();
                sqlx::query(&cx.st.outbox.insert_attempts).bind(to_json(&rows)?).execute(&mut **tx).await?;
                Ok(())
            }

            /// Completes the runs of `completing` that have nothing left
            /// outstanding, with an audit entry each naming the last effect;
            /// returns each completed run with its decision's index.
            async fn complete_runs(
                tx: &mut WriteTx,
                cx: &Cx<'_>,
                completing: &[(&Effect, usize)],
                decisions: &[Decision],
            ) -> Result<Vec<(Run, usize)>> {
                let keys: Vec<RunKeyBatchRow<'_>> =
                    completing.iter().map(|(e, _)| RunKeyBatchRow::new(&e.namespace, &e.key)).collect();
                let rows = sqlx::query_as::<_, RunRow>(&cx.st.outbox.complete_runs)
                    .bind(cx.now)
                    .bind(to_json(&keys)?)
                    .fetch_all(&mut **tx)
                    .await?;
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
                        return Err(StoreError::Corrupt(format!("completed run {} was not asked for", run.key.as_str())));
                    };
                    let detail = json!({ "last_effect_id": effect.id, "external_ref": effect.external_ref });
                    let actor = &decisions[*i].leased.owner;
                    entries.push(audit_entry(cx.st, row, &run, Move::EffectsCompleted, actor, detail));
                    completed.push((run, *i));
                }
                let audits: Vec<AuditBatchRow<'_>> = rows
                    .iter()
                    .zip(&entries)
                    .map(|(row, entry)| AuditBatchRow::new(entry, row.audit_head.as_deref()))
                    .collect();
                sqlx::query(&cx.st.append_audits).bind(to_json(&audits)?).execute(&mut **tx).await?;
                Ok(completed)
            }

            fn to_json<T: serde::Serialize>(rows: &T) -> Result<String> {
                serde_json::to_string(rows).map_err(|e| StoreError::Corrupt(format!("a batch would not serialize: {e}")))
            }

            /// Ends the effect's run when its verdict is a failure that
            /// stops it (a business rejection: `failed_terminal`; anything
            /// else: `dead_lettered`, with a dead letter); returns the run
            /// when it moved.
            async fn fail_run(
                tx: &mut WriteTx,
                cx: &Cx<'_>,
                effect: &Effect,
                verdict: &Verdict,
                actor: &str,
            ) -> Result<Option<Run>> {
                if effect.new.operation == $crate::approval::CALLBACK_OPERATION {
                    // A decision callback reports on its run; it never moves it.
                    return Ok(None);
                }
                let (to, reason, kind) = match verdict {
                    Verdict::Failed { class: FailClass::Rejected, reason } => {
                        ("failed_terminal", reason, Move::EffectRejected)
                    }
                    Verdict::Failed { reason, .. } => ("dead_lettered", reason, Move::EffectsFailed),
                    _ => return Ok(None),
                };
                let row = sqlx::query_as::<_, RunRow>(&cx.st.outbox.fail_run)
                    .bind(cx.now)
                    .bind(&effect.namespace)
                    .bind(&effect.key)
                    .bind(to)
                    .bind(reason)
                    .fetch_optional(&mut **tx)
                    .await?;
                let Some(row) = row else { return Ok(None) };
                let run = row.to_run()?;
                let detail = json!({ "effect_id": effect.id, "effect_type": effect.new.effect_type, "reason": reason });
                record(tx, cx.st, &row, &run, kind, actor, detail.clone()).await?;
                if let Verdict::Failed { class, reason } = verdict {
                    if let Some(class) = dead_letter_class(*class) {
                        let input = DeadLetterInput::new(class, reason.clone(), detail);
                        super::deadletter::record_dead_letter(tx, cx.st, &run, &input, run.updated_at).await?;
                    }
                }
                Ok(Some(run))
            }

            async fn complete_run_if_done(
                tx: &mut WriteTx,
                cx: &Cx<'_>,
                effect: &Effect,
                actor: &str,
            ) -> Result<Option<Run>> {
                let row = sqlx::query_as::<_, RunRow>(&cx.st.outbox.complete_run)
                    .bind(cx.now)
                    .bind(&effect.namespace)
                    .bind(&effect.key)
                    .fetch_optional(&mut **tx)
                    .await?;
                let Some(row) = row else { return Ok(None) };
                let run = row.to_run()?;
                let detail = json!({ "last_effect_id": effect.id, "external_ref": effect.external_ref });
                record(tx, cx.st, &row, &run, Move::EffectsCompleted, actor, detail).await?;
                Ok(Some(run))
            }

            /// The dead-letter class of a failure that stops the run (a
            /// business rejection ends it `failed_terminal` instead).
            fn dead_letter_class(class: FailClass) -> Option<DeadLetterClass> {
                match class {
                    FailClass::Rejected => None,
                    FailClass::Permanent => Some(DeadLetterClass::Permanent),
                    FailClass::RetryExhausted => Some(DeadLetterClass::RetryExhausted),
                    FailClass::UnknownOutcome => Some(DeadLetterClass::UnknownOutcome),
                }
            }

            /// `sending` effects whose dispatcher died become `unknown`.
            pub(crate) async fn expire(cx: &Cx<'_>) -> Result<u64> {
                let mut tx = cx.write.begin().await?;
                let expired = sqlx::query(&cx.st.outbox.expire).bind(cx.now).execute(&mut *tx).await?.rows_affected();
                tx.commit().await?;
                Ok(expired)
            }

            /// Cancels a pending effect; the run completes if nothing else is outstanding.
            pub(crate) async fn cancel(cx: &Cx<'_>, id: &str, actor: &str) -> Result<Option<Effect>> {
                let mut tx = cx.write.begin().await?;
                let row = sqlx::query_as::<_, EffectRow>(&cx.st.outbox.cancel)
                    .bind(cx.now)
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some(row) = row else {
                    tx.rollback().await?;
                    return Ok(None);
                };
                let effect = row.into_effect()?;
                complete_run_if_done(&mut tx, cx, &effect, actor).await?;
                tx.commit().await?;
                Ok(Some(effect))
            }

            pub(crate) async fn effect(pool: &Pool<$db>, st: &Statements, id: &str) -> Result<Option<Effect>> {
                sqlx::query_as::<_, EffectRow>(&st.outbox.effect)
                    .bind(id)
                    .fetch_optional(pool)
                    .await?
                    .map(EffectRow::into_effect)
                    .transpose()
            }

            pub(crate) async fn attempts(pool: &Pool<$db>, st: &Statements, id: &str) -> Result<Vec<AttemptView>> {
                sqlx::query_as::<_, AttemptRow>(&st.outbox.attempts)
                    .bind(id)
                    .fetch_all(pool)
                    .await?
                    .into_iter()
                    .map(AttemptRow::into_view)
                    .collect()
            }

            /// Sets a kill-switch scope and audits the change under
            /// `oncegate / actions:<scope>`, chained like any key.
            pub(crate) async fn set_switch(cx: &Cx<'_>, scope: &str, enabled: bool, actor: &str, now: i64) -> Result<()> {
                let mut tx = cx.write.begin().await?;
                sqlx::query(&cx.st.outbox.set_switch)
                    .bind(scope)
                    .bind(i64::from(enabled))
                    .bind(actor)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                let key = format!("actions:{scope}");
                let last: Option<(i64, String)> = sqlx::query_as(&cx.st.outbox.last_audit)
                    .bind("oncegate")
                    .bind(&key)
                    .fetch_optional(&mut *tx)
                    .await?;
                let (seq, prev) = last.map_or((1, None), |(seq, hash)| (seq + 1, Some(hash)));
                let entry = $crate::audit::AuditEntry {
                    namespace: "oncegate".into(),
                    key,
                    seq,
                    kind: if enabled { "actions_enabled" } else { "actions_disabled" }.into(),
                    actor: actor.into(),
                    from_state: None,
                    to_state: None,
                    version: None,
                    detail: json!({ "scope": scope, "enabled": enabled }),
                    created_at: now,
                };
                let hash = entry.chain_hash(prev.as_deref());
                sqlx::query(&cx.st.insert_audit)
                    .bind(&entry.namespace)
                    .bind(&entry.key)
                    .bind(entry.seq)
                    .bind(&entry.kind)
                    .bind(&entry.actor)
                    .bind(None::<String>)
                    .bind(None::<String>)
                    .bind(None::<i64>)
                    .bind(entry.detail.to_string())
                    .bind(prev)
                    .bind(&hash)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            }

            pub(crate) async fn switches(pool: &Pool<$db>, st: &Statements) -> Result<Vec<ActionSwitch>> {
                let rows = sqlx::query_as::<_, SwitchRow>(&st.outbox.switches).fetch_all(pool).await?;
                Ok(rows.into_iter().map(ActionSwitch::from).collect())
            }

            pub(crate) async fn backlog(pool: &Pool<$db>, st: &Statements) -> Result<Vec<(String, String, i64)>> {
                Ok(sqlx::query_as(&st.outbox.backlog).fetch_all(pool).await?)
            }
        }
    };
}
