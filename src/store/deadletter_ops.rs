//! Dead letters' transaction logic, expanded per backend like
//! [`ledger_ops!`](crate::ledger_ops): the record helper every component
//! calls inside its own transaction, and the operator's commands.

/// Expands the dead-letter operations inside a backend's `ops` module, as a
/// child module `deadletter` that reuses the ledger's claim, audit and
/// effect helpers.
#[macro_export]
#[doc(hidden)]
macro_rules! deadletter_ops {
    ($db:ty) => {
        pub(crate) mod deadletter {
            use serde_json::{json, Value};
            use sqlx::Pool;
            use super::WriteTx;

            use super::{record, Cx};
            use $crate::audit::AuditEntry;
            use $crate::clock::Millis;
            use $crate::deadletter::{
                ActionOutcome, DeadLetter, DeadLetterFilter, DeadLetterInput, ExecutionFailed,
                ExecutionFailure, Refusal, Resolution, ResolveCommand, RunLink,
            };
            use $crate::deadletter::DeadLetterClass;
            use $crate::ingress::RawEvent;
            use $crate::ledger::{Move, Run};
            use $crate::store::deadletter_rows::{DeadLetterRow, LinkRow, RawEventRow};
            use $crate::store::deadletter_sql::{Bind, DeadLetterStatements};
            use $crate::store::row::{AttemptRow, EffectRow, RunRow};
            use $crate::store::sql::Statements;
            use $crate::store::{Result, StoreError};

            pub(crate) type Tx = WriteTx;

            /// Records a dead letter for `run` inside the caller's
            /// transaction (the move that stopped the run, or the quarantine
            /// of a delivery) and returns its id. Reads the run's metadata,
            /// payload reference and attempt history in the same
            /// transaction, so the evidence is what the move saw.
            pub(crate) async fn record_dead_letter(
                tx: &mut Tx,
                st: &Statements,
                run: &Run,
                input: &DeadLetterInput,
                at: Millis,
            ) -> Result<String> {
                let d = &st.deadletter;
                let raw_event_id = match &input.raw_event_id {
                    Some(id) => Some(id.clone()),
                    None => sqlx::query_scalar::<_, String>(&d.accepted_raw_event)
                        .bind(run.namespace.as_str())
                        .bind(run.key.as_str())
                        .fetch_optional(&mut **tx)
                        .await?,
                };
                let payload_hash = match &input.raw_event_id {
                    Some(id) => sqlx::query_scalar::<_, String>(&d.raw_event_hash)
                        .bind(id)
                        .fetch_optional(&mut **tx)
                        .await?
                        .unwrap_or_else(|| run.payload_hash.to_string()),
                    None => run.payload_hash.to_string(),
                };
                let payload_ref = raw_event_id
                    .as_ref()
                    .map(|id| format!("raw_event:{id}"))
                    .or_else(|| run.metadata.source_url.clone());
                let (mut attempts, last) = history(tx, st, run).await?;
                let mut evidence = input.evidence.clone().or(last);
                // Redaction (audit): every payload-derived copy, before storage.
                let ns = run.namespace.as_str();
                let mut detail = input.detail.clone();
                st.redactor.value(ns, &mut detail);
                st.redactor.value(ns, &mut attempts);
                if let Some(e) = evidence.as_mut() {
                    st.redactor.value(ns, e);
                }
                let earlier: Vec<String> = sqlx::query_scalar(&d.replayed_before)
                    .bind(run.namespace.as_str())
                    .bind(run.key.as_str())
                    .fetch_all(&mut **tx)
                    .await?;
                let id = uuid::Uuid::now_v7().to_string();
                sqlx::query(&d.insert)
                    .bind(&id)
                    .bind(run.namespace.as_str())
                    .bind(run.key.as_str())
                    .bind(input.class.as_str())
                    .bind(input.class.component().as_str())
                    .bind(&raw_event_id)
                    .bind(detail.to_string())
                    .bind(at)
                    .bind(run.key.as_str())
                    .bind(run.correlation_id())
                    .bind(&run.metadata.operation)
                    .bind(&run.metadata.workflow_version)
                    .bind(None::<String>)
                    .bind(payload_ref)
                    .bind(payload_hash)
                    .bind(&input.error)
                    .bind(attempts.to_string())
                    .bind(evidence.map(|e| e.to_string()))
                    .bind(run.state.as_str())
                    .bind(input.class.next_action())
                    .bind(earlier.first())
                    .bind(earlier.len() as i64)
                    .execute(&mut **tx)
                    .await?;
                Ok(id)
            }

            /// Each effect of the run with its attempts, and the evidence of
            /// the latest attempt.
            async fn history(tx: &mut Tx, st: &Statements, run: &Run) -> Result<(Value, Option<Value>)> {
                let effects: Vec<EffectRow> = sqlx::query_as(&st.effects_of)
                    .bind(run.namespace.as_str())
                    .bind(run.key.as_str())
                    .fetch_all(&mut **tx)
                    .await?;
                let mut out = Vec::new();
                let mut last: Option<(i64, Value)> = None;
                for row in effects {
                    let effect = row.into_effect()?;
                    let rows: Vec<AttemptRow> = sqlx::query_as(&st.outbox.attempts)
                        .bind(&effect.id)
                        .fetch_all(&mut **tx)
                        .await?;
                    let mut attempts = Vec::new();
                    for a in rows {
                        let a = a.into_view()?;
                        if last.as_ref().is_none_or(|(at, _)| a.finished_at >= *at) {
                            let evidence = json!({ "effect_id": effect.id, "attempt": a.attempt,
                                "class": a.class, "evidence": a.evidence });
                            last = Some((a.finished_at, evidence));
                        }
                        attempts.push(json!({ "attempt": a.attempt, "class": a.class, "status": a.status,
                            "error": a.error, "started_at": a.started_at, "finished_at": a.finished_at }));
                    }
                    out.push(json!({
                        "effect_id": effect.id, "effect_type": effect.new.effect_type,
                        "operation": effect.new.operation, "target": effect.new.target,
                        "idempotency_key": effect.new.idempotency_key, "state": effect.state.as_str(),
                        "external_ref": effect.external_ref, "attempts": attempts,
                    }));
                }
                Ok((Value::Array(out), last.map(|(_, e)| e)))
            }

            pub(crate) async fn fetch_in(tx: &mut Tx, st: &Statements, id: &str) -> Result<Option<DeadLetter>> {
                sqlx::query_as::<_, DeadLetterRow>(&st.deadletter.fetch)
                    .bind(id)
                    .fetch_optional(&mut **tx)
                    .await?
                    .map(DeadLetterRow::into_dead_letter)
                    .transpose()
            }

            pub(crate) async fn fetch(pool: &Pool<$db>, st: &Statements, id: &str) -> Result<Option<DeadLetter>> {
                sqlx::query_as::<_, DeadLetterRow>(&st.deadletter.fetch)
                    .bind(id)
                    .fetch_optional(pool)
                    .await?
                    .map(DeadLetterRow::into_dead_letter)
                    .transpose()
            }

            pub(crate) async fn list(pool: &Pool<$db>, filter: &DeadLetterFilter) -> Result<Vec<DeadLetter>> {
                let (sql, binds) = DeadLetterStatements::list(filter);
                let mut query = sqlx::query_as::<_, DeadLetterRow>(&sql);
                for bind in binds {
                    query = match bind {
                        Bind::Text(t) => query.bind(t),
                        Bind::Int(i) => query.bind(i),
                    };
                }
                query.fetch_all(pool).await?.into_iter().map(DeadLetterRow::into_dead_letter).collect()
            }

            pub(crate) async fn assign(pool: &Pool<$db>, st: &Statements, id: &str, owner: &str) -> Result<Option<DeadLetter>> {
                sqlx::query(&st.deadletter.assign).bind(id).bind(owner).execute(pool).await?;
                fetch(pool, st, id).await
            }

            pub(crate) async fn links(pool: &Pool<$db>, st: &Statements, ns: &str, key: &str) -> Result<Vec<RunLink>> {
                let rows: Vec<LinkRow> = sqlx::query_as(&st.deadletter.links).bind(ns).bind(key).fetch_all(pool).await?;
                Ok(rows.into_iter().map(RunLink::from).collect())
            }

            pub(crate) async fn raw_event(pool: &Pool<$db>, st: &Statements, id: &str) -> Result<Option<RawEvent>> {
                sqlx::query_as::<_, RawEventRow>(&st.deadletter.raw_event)
                    .bind(id)
                    .fetch_optional(pool)
                    .await?
                    .map(RawEventRow::into_event)
                    .transpose()
            }

            pub(crate) async fn run_in(tx: &mut Tx, st: &Statements, ns: &str, key: &str) -> Result<Option<Run>> {
                sqlx::query_as::<_, RunRow>(&st.fetch)
                    .bind(ns)
                    .bind(key)
                    .fetch_optional(&mut **tx)
                    .await?
                    .map(|row| row.to_run())
                    .transpose()
            }

            /// An audit entry that moves nothing (the run keeps its state),
            /// chained like any other.
            pub(crate) async fn note(tx: &mut Tx, st: &Statements, dl: &DeadLetter, kind: &str, actor: &str, detail: Value, at: Millis) -> Result<()> {
                let (ns, key) = (dl.namespace.as_str(), dl.key.as_str());
                let Some(row) = sqlx::query_as::<_, RunRow>(&st.deadletter.bump_audit)
                    .bind(ns)
                    .bind(key)
                    .fetch_optional(&mut **tx)
                    .await?
                else {
                    return Ok(());
                };
                let run = row.to_run()?;
                let entry = AuditEntry {
                    namespace: ns.into(),
                    key: key.into(),
                    seq: row.audit_seq,
                    kind: kind.into(),
                    actor: actor.into(),
                    from_state: Some(run.state.as_str().into()),
                    to_state: Some(run.state.as_str().into()),
                    version: Some(run.version.get()),
                    detail,
                    created_at: at,
                };
                let hash = entry.chain_hash(row.audit_head.as_deref());
                sqlx::query(&st.insert_audit)
                    .bind(&entry.namespace)
                    .bind(&entry.key)
                    .bind(entry.seq)
                    .bind(&entry.kind)
                    .bind(&entry.actor)
                    .bind(&entry.from_state)
                    .bind(&entry.to_state)
                    .bind(entry.version)
                    .bind(entry.detail.to_string())
                    .bind(row.audit_head.as_deref())
                    .bind(&hash)
                    .bind(at)
                    .execute(&mut **tx)
                    .await?;
                sqlx::query(&st.set_audit_head).bind(ns).bind(key).bind(&hash).execute(&mut **tx).await?;
                Ok(())
            }

            /// Moves a run by an operator's command (no lease), with its audit entry.
            pub(crate) async fn operator_move(
                tx: &mut Tx,
                cx: &Cx<'_>,
                dl: &DeadLetter,
                mv: Move,
                reason: Option<&str>,
                actor: &str,
                detail: Value,
            ) -> Result<Option<Run>> {
                let sql = &cx.st.deadletter.operator_move.iter().find(|(m, _)| *m == mv)
                    .ok_or_else(|| StoreError::Corrupt(format!("no operator statement for {mv:?}")))?.1;
                let Some(row) = sqlx::query_as::<_, RunRow>(sql)
                    .bind(cx.now)
                    .bind(&dl.namespace)
                    .bind(&dl.key)
                    .bind(reason)
                    .fetch_optional(&mut **tx)
                    .await?
                else {
                    return Ok(None);
                };
                let run = row.to_run()?;
                record(tx, cx.st, &row, &run, mv, actor, detail).await?;
                Ok(Some(run))
            }

            /// Ends an open record; `false` when it was resolved meanwhile.
            pub(crate) async fn close(
                tx: &mut Tx,
                cx: &Cx<'_>,
                id: &str,
                how: (Resolution, &str, &str),
                retain_ms: i64,
                replayed: bool,
                replaced_by: Option<(&str, &str)>,
            ) -> Result<bool> {
                let (resolution, actor, note) = how;
                let done = sqlx::query(&cx.st.deadletter.resolve)
                    .bind(cx.now)
                    .bind(id)
                    .bind(resolution.as_str())
                    .bind(actor)
                    .bind(note)
                    .bind(retain_ms)
                    .bind(i64::from(replayed))
                    .bind(replaced_by.map(|(ns, _)| ns))
                    .bind(replaced_by.map(|(_, key)| key))
                    .execute(&mut **tx)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            /// Why an open command cannot start from this record, if it cannot.
            pub(crate) fn refusal(dl: Option<&DeadLetter>) -> Option<Refusal> {
                match dl {
                    None => Some(Refusal::NotFound),
                    Some(dl) => dl.resolution.map(Refusal::AlreadyResolved),
                }
            }

            pub(crate) async fn not_dead_lettered(tx: &mut Tx, st: &Statements, dl: &DeadLetter) -> Result<Refusal> {
                let run = run_in(tx, st, &dl.namespace, &dl.key).await?;
                Ok(Refusal::RunNotDeadLettered(run.map(|r| r.state)))
            }

            /// `resolve`: record closed, run `dead_lettered → failed_terminal`.
            pub(crate) async fn resolve(cx: &Cx<'_>, cmd: &ResolveCommand) -> Result<ActionOutcome> {
                let mut tx = cx.write.begin().await?;
                let dl = fetch_in(&mut tx, cx.st, &cmd.id).await?;
                if let Some(refused) = refusal(dl.as_ref()) {
                    return Ok(ActionOutcome::Refused(refused));
                }
                let dl = dl.ok_or_else(|| StoreError::Corrupt("dead letter vanished".into()))?;
                if !close(&mut tx, cx, &cmd.id, (cmd.resolution, &cmd.actor, &cmd.note), cmd.retain_ms, false, None).await? {
                    return Ok(ActionOutcome::Refused(Refusal::AlreadyResolved(cmd.resolution)));
                }
                let detail = json!({ "dead_letter_id": dl.id, "class": dl.class.as_str(),
                    "resolution": cmd.resolution.as_str(), "note": cmd.note });
                let mut moved = None;
                if dl.class.stops_run() {
                    let reason = format!("dead letter resolved ({}) by {}: {}", cmd.resolution, cmd.actor, cmd.note);
                    moved = operator_move(&mut tx, cx, &dl, Move::Resolve, Some(&reason), &cmd.actor, detail).await?;
                    if moved.is_none() {
                        let refused = not_dead_lettered(&mut tx, cx.st, &dl).await?;
                        tx.rollback().await?;
                        return Ok(ActionOutcome::Refused(refused));
                    }
                } else {
                    note(&mut tx, cx.st, &dl, "dead_letter_resolved", &cmd.actor, detail, cx.clock_now).await?;
                }
                let after = fetch_in(&mut tx, cx.st, &cmd.id).await?
                    .ok_or_else(|| StoreError::Corrupt("dead letter vanished".into()))?;
                tx.commit().await?;
                Ok(ActionOutcome::Done { dead_letter: Box::new(after), run: moved.map(Box::new), effects: 0 })
            }

            /// `fail-by-execution`: every `processing` run of the execution
            /// moves, with its audit entry and (not retryable) dead letter.
            pub(crate) async fn fail_by_execution(cx: &Cx<'_>, f: &ExecutionFailure) -> Result<ExecutionFailed> {
                let mv = if f.retryable { Move::ExecutionFailed } else { Move::WorkflowError };
                let sql = &cx.st.deadletter.fail_by_execution.iter().find(|(m, _)| *m == mv)
                    .ok_or_else(|| StoreError::Corrupt(format!("no statement for {mv:?}")))?.1;
                let mut tx = cx.write.begin().await?;
                let reason = (!f.retryable).then_some(f.message.as_str());
                let rows: Vec<RunRow> = sqlx::query_as(sql)
                    .bind(cx.now)
                    .bind(&f.execution_ref)
                    .bind(&f.message)
                    .bind(reason)
                    .fetch_all(&mut *tx)
                    .await?;
                if rows.is_empty() {
                    tx.rollback().await?;
                    let runs: Vec<RunRow> = sqlx::query_as(&cx.st.deadletter.runs_by_execution)
                        .bind(&f.execution_ref)
                        .fetch_all(cx.read)
                        .await?;
                    if runs.is_empty() {
                        return Ok(ExecutionFailed::NoRun);
                    }
                    let runs = runs.iter().map(RunRow::to_run).collect::<Result<_>>()?;
                    return Ok(ExecutionFailed::NotProcessing(runs));
                }
                let mut moved = Vec::with_capacity(rows.len());
                for row in rows {
                    let run = row.to_run()?;
                    record(&mut tx, cx.st, &row, &run, mv, &f.actor, f.evidence()).await?;
                    if !f.retryable {
                        let mut input = DeadLetterInput::new(DeadLetterClass::WorkflowError, f.message.clone(), f.evidence());
                        input.evidence = Some(f.evidence());
                        record_dead_letter(&mut tx, cx.st, &run, &input, run.updated_at).await?;
                    }
                    moved.push(run);
                }
                tx.commit().await?;
                Ok(ExecutionFailed::Moved(moved))
            }

        }
    };
}
