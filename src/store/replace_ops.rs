//! Replacement's transaction logic, expanded per backend like
//! [`ledger_ops!`](crate::ledger_ops): a new event under a new upstream
//! key, claimed and approved with its effects, linked to the original.

/// Expands the replacement operation inside a backend's `ops` module, as a
/// child module `replace` beside `deadletter`.
#[macro_export]
#[doc(hidden)]
macro_rules! replace_ops {
    ($db:ty) => {
        pub(crate) mod replace {
            use serde_json::json;

            use super::deadletter::{close, fetch_in, not_dead_lettered, note, operator_move, refusal, run_in, Tx};
            use super::{insert_effect, insert_raw_event, record, try_claim, Attempt, Cx};
            use $crate::deadletter::{ActionOutcome, DeadLetter, Refusal, ReplaceCommand, Resolution};
            use $crate::ledger::{ClaimRequest, Move, Run};
            use $crate::store::row::RunRow;
            use $crate::store::{Result, StoreError};

            /// `replace`: the record closed, the original run finished
            /// (`failed_terminal`, when it was stopped), and a new run under
            /// the operator's key claimed and approved with its effects, all
            /// linked, in one transaction.
            pub(crate) async fn replace(cx: &Cx<'_>, cmd: &ReplaceCommand) -> Result<ActionOutcome> {
                let mut tx = cx.write.begin().await?;
                let dl = fetch_in(&mut tx, cx.st, &cmd.id).await?;
                if let Some(refused) = refusal(dl.as_ref()) {
                    return Ok(ActionOutcome::Refused(refused));
                }
                let dl = dl.ok_or_else(|| StoreError::Corrupt("dead letter vanished".into()))?;
                let new_key = cmd.new_key.as_str();
                if let Some(taken) = run_in(&mut tx, cx.st, &dl.namespace, new_key).await? {
                    tx.rollback().await?;
                    return Ok(ActionOutcome::Refused(Refusal::KeyTaken(taken.state)));
                }
                if !close(&mut tx, cx, &cmd.id, (Resolution::Replaced, &cmd.actor, &cmd.reason), cmd.retain_ms, false, Some((&dl.namespace, new_key))).await? {
                    return Ok(ActionOutcome::Refused(Refusal::AlreadyResolved(Resolution::Replaced)));
                }
                let link = json!({ "dead_letter_id": dl.id, "replaced_by": { "namespace": dl.namespace, "key": new_key }, "reason": cmd.reason });
                if dl.class.stops_run() {
                    let reason = format!("replaced by {}/{new_key} ({}): {}", dl.namespace, cmd.actor, cmd.reason);
                    if operator_move(&mut tx, cx, &dl, Move::Resolve, Some(&reason), &cmd.actor, link).await?.is_none() {
                        let refused = not_dead_lettered(&mut tx, cx.st, &dl).await?;
                        tx.rollback().await?;
                        return Ok(ActionOutcome::Refused(refused));
                    }
                } else {
                    note(&mut tx, cx.st, &dl, "dead_letter_replaced", &cmd.actor, link, cx.clock_now).await?;
                }
                let Some(run) = claim_replacement(&mut tx, cx, cmd, &dl).await? else {
                    tx.rollback().await?;
                    return Ok(ActionOutcome::Refused(Refusal::KeyTaken($crate::ledger::RunState::Processing)));
                };
                for effect in &cmd.effects {
                    insert_effect(&mut tx, cx, &run, effect).await?;
                }
                if let Some(event) = &cmd.raw_event {
                    insert_raw_event(&mut tx, cx.st, event).await?;
                }
                sqlx::query(&cx.st.deadletter.insert_link)
                    .bind(&dl.namespace).bind(&dl.key).bind(run.namespace.as_str()).bind(new_key)
                    .bind(&dl.id).bind(&cmd.actor).bind(&cmd.reason).bind(run.updated_at)
                    .execute(&mut *tx)
                    .await?;
                let after = fetch_in(&mut tx, cx.st, &cmd.id).await?
                    .ok_or_else(|| StoreError::Corrupt("dead letter vanished".into()))?;
                tx.commit().await?;
                let effects = cmd.effects.len() as u64;
                Ok(ActionOutcome::Done { dead_letter: Box::new(after), run: Some(Box::new(run)), effects })
            }

            /// Claims the replacement key and approves it (its effects are
            /// cleared by the same policy as the original's); `None` when
            /// the key was taken meanwhile.
            async fn claim_replacement(tx: &mut Tx, cx: &Cx<'_>, cmd: &ReplaceCommand, dl: &DeadLetter) -> Result<Option<Run>> {
                let req = ClaimRequest {
                    namespace: $crate::ledger::Namespace::parse(dl.namespace.clone()).map_err(|e| StoreError::Corrupt(e.to_string()))?,
                    key: cmd.new_key.clone(),
                    business_key: None,
                    payload_hash: cmd.payload_hash.clone(),
                    lease_ms: 60_000,
                    metadata: cmd.metadata.clone(),
                    claimed_by: cmd.actor.clone(),
                };
                let Attempt::Won { run, lease } = try_claim(tx, cx, &req).await? else {
                    return Ok(None);
                };
                let row = sqlx::query_as::<_, RunRow>(&cx.st.finish[&Move::Approve])
                    .bind(cx.now)
                    .bind(run.namespace.as_str())
                    .bind(run.key.as_str())
                    .bind(lease.owner.to_hex())
                    .bind(lease.version.get())
                    .bind(None::<String>)
                    .bind(None::<String>)
                    .bind(None::<String>)
                    .fetch_optional(&mut **tx)
                    .await?
                    .ok_or_else(|| StoreError::Corrupt("a just-claimed replacement refused approval".into()))?;
                let approved = row.to_run()?;
                let types: Vec<&str> = cmd.effects.iter().map(|e| e.effect_type.as_str()).collect();
                let detail = json!({ "effects": types, "replaces": { "namespace": dl.namespace, "key": dl.key,
                    "dead_letter_id": dl.id }, "reason": cmd.reason });
                record(tx, cx.st, &row, &approved, Move::Approve, &cmd.actor, detail).await?;
                Ok(Some(approved))
            }
        }
    };
}
