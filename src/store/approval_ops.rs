//! The approval gate's transaction logic, expanded per backend like
//! [`ledger_ops!`](crate::ledger_ops).

/// Expands the approval operations inside a backend's `ops` module, as a
/// child module `approval` that reuses the ledger's audit, fetch and
/// effect helpers.
#[macro_export]
#[doc(hidden)]
macro_rules! approval_ops {
    ($db:ty) => {
        pub(crate) mod approval {
            use serde_json::{json, Value};
            use sqlx::Pool;
            use super::WriteTx;

            use super::{append_audit, insert_effect, lost, owner_move, record, Cx, MoveFields};
            use $crate::approval::{Challenge, ChallengeState, NewChallenge, StagedEffect, StoredSession, Verdict};
            use $crate::audit::AuditEntry;
            use $crate::ledger::{IdempotencyKey, Move, Moved, Namespace, OwnerCall, Run};
            use $crate::outbox::NewEffect;
            use $crate::store::approval::{Decided, NewOutput, OutputRecorded, StoredOutput};
            use $crate::store::approval_row::{ChallengeRow, OutputRow, SessionRow};
            use $crate::store::row::RunRow;
            use $crate::store::sql::Statements;
            use $crate::store::{Result, StoreError};

            /// The actor of the expiry sweeper's moves.
            const SWEEPER: &str = "oncegate:approval-sweeper";

            fn text<T: serde::Serialize>(value: &T) -> Result<String> {
                serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.to_string()))
            }

            pub(crate) async fn insert_challenge(
                tx: &mut WriteTx,
                st: &Statements,
                run: &Run,
                c: &NewChallenge,
                created_at: i64,
            ) -> Result<()> {
                let staged: Vec<StagedEffect> = c.effects.iter().map(StagedEffect::from).collect();
                sqlx::query(&st.approval.insert_challenge)
                    .bind(&c.id)
                    .bind(run.namespace.as_str())
                    .bind(run.key.as_str())
                    .bind(c.token_hash.as_deref())
                    .bind(&c.operation)
                    .bind(text(&c.decisions)?)
                    .bind(text(&c.audience)?)
                    .bind(text(&c.required_roles)?)
                    .bind(c.approver_auth.as_str())
                    .bind(ChallengeState::Pending.as_str())
                    .bind(text(&staged)?)
                    .bind(c.callback_url.as_deref())
                    .bind(c.callback_target.as_deref())
                    .bind(c.card.to_string())
                    .bind(c.escalation)
                    .bind(created_at)
                    .bind(c.expires_at)
                    .bind(None::<i64>)
                    .bind(None::<String>)
                    .bind(None::<String>)
                    .bind(None::<String>)
                    .execute(&mut **tx)
                    .await?;
                Ok(())
            }

            /// Audits an event that does not move the run (it still takes
            /// the next sequence number of the run's chain).
            async fn note(
                tx: &mut WriteTx,
                st: &Statements,
                row: &RunRow,
                kind: &str,
                actor: &str,
                detail: Value,
                at: i64,
            ) -> Result<Run> {
                let run = row.to_run()?;
                let entry = AuditEntry {
                    namespace: run.namespace.to_string(),
                    key: run.key.to_string(),
                    seq: row.audit_seq,
                    kind: kind.into(),
                    actor: actor.into(),
                    from_state: None,
                    to_state: Some(run.state.as_str().to_owned()),
                    version: Some(run.version.get()),
                    detail,
                    created_at: at,
                };
                append_audit(tx, st, row, &entry).await?;
                Ok(run)
            }

            pub(crate) async fn gate(cx: &Cx<'_>, call: &OwnerCall, challenge: &NewChallenge, detail: Value) -> Result<Moved> {
                let mut tx = cx.write.begin().await?;
                let updated = sqlx::query_as::<_, RunRow>(&cx.st.finish[&Move::Gate])
                    .bind(cx.now)
                    .bind(call.namespace.as_str())
                    .bind(call.key.as_str())
                    .bind(call.lease.owner.to_hex())
                    .bind(call.lease.version.get())
                    .bind(None::<String>)
                    .bind(None::<String>)
                    .bind(None::<String>)
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some(row) = updated else {
                    return Err(lost(cx, tx, call).await);
                };
                let run = row.to_run()?;
                record(&mut tx, cx.st, &row, &run, Move::Gate, &call.actor, detail).await?;
                insert_challenge(&mut tx, cx.st, &run, challenge, run.updated_at).await?;
                tx.commit().await?;
                let lease = run.lease;
                Ok(Moved { run, lease })
            }

            pub(crate) async fn approve_by_policy(cx: &Cx<'_>, call: &OwnerCall, effects: &[NewEffect], detail: Value) -> Result<Moved> {
                let fields = MoveFields { result: None, error: None, reason: None };
                owner_move(cx, call, Move::Approve, fields, detail, effects).await
            }

            pub(crate) async fn by_token(pool: &Pool<$db>, st: &Statements, token_hash: &str) -> Result<Option<Challenge>> {
                sqlx::query_as::<_, ChallengeRow>(&st.approval.by_token)
                    .bind(token_hash)
                    .fetch_optional(pool)
                    .await?
                    .map(ChallengeRow::into_challenge)
                    .transpose()
            }

            pub(crate) async fn by_id(pool: &Pool<$db>, st: &Statements, id: &str) -> Result<Option<Challenge>> {
                sqlx::query_as::<_, ChallengeRow>(&st.approval.by_id)
                    .bind(id)
                    .fetch_optional(pool)
                    .await?
                    .map(ChallengeRow::into_challenge)
                    .transpose()
            }

            pub(crate) async fn list(pool: &Pool<$db>, st: &Statements, state: Option<ChallengeState>, limit: i64) -> Result<Vec<Challenge>> {
                let rows = match state {
                    Some(state) => {
                        sqlx::query_as::<_, ChallengeRow>(&st.approval.in_state)
                            .bind(state.as_str())
                            .bind(limit)
                            .fetch_all(pool)
                            .await?
                    }
                    None => sqlx::query_as::<_, ChallengeRow>(&st.approval.newest).bind(limit).fetch_all(pool).await?,
                };
                rows.into_iter().map(ChallengeRow::into_challenge).collect()
            }

            /// Consume, move and enqueue in one transaction, or nothing.
            pub(crate) async fn decide(cx: &Cx<'_>, d: &Decided) -> Result<Option<Run>> {
                let mut tx = cx.write.begin().await?;
                let (state, mv) = match d.verdict {
                    Verdict::Approve => (ChallengeState::Approved, Move::ApprovalConsumed),
                    Verdict::Reject => (ChallengeState::Rejected, Move::ApprovalRejected),
                };
                let consumed = sqlx::query_as::<_, ChallengeRow>(&cx.st.approval.consume)
                    .bind(cx.now)
                    .bind(&d.challenge_id)
                    .bind(state.as_str())
                    .bind(&d.approver)
                    .bind(&d.auth_method)
                    .bind(d.reason.as_deref())
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some(consumed) = consumed else {
                    tx.rollback().await?;
                    return Ok(None);
                };
                let challenge = consumed.into_challenge()?;
                let reason = match d.verdict {
                    Verdict::Approve => None,
                    Verdict::Reject => Some(format!(
                        "rejected by {}: {}",
                        d.approver,
                        d.reason.as_deref().unwrap_or("no reason given")
                    )),
                };
                let row = sqlx::query_as::<_, RunRow>(&cx.st.approval.system_move[&mv])
                    .bind(cx.now)
                    .bind(&challenge.namespace)
                    .bind(&challenge.key)
                    .bind(reason.as_deref())
                    .fetch_optional(&mut *tx)
                    .await?
                    .ok_or_else(|| StoreError::Corrupt(format!(
                        "challenge {} is pending but its run is not awaiting_human", challenge.new.id
                    )))?;
                let run = row.to_run()?;
                let types: Vec<&str> = d.effects.iter().map(|e| e.effect_type.as_str()).collect();
                let detail = json!({
                    "challenge_id": challenge.new.id,
                    "decision": d.verdict.as_str(),
                    "approver": d.approver,
                    "auth_method": d.auth_method,
                    "reason": d.reason,
                    "effects": types,
                    "waited_ms": run.updated_at - challenge.created_at,
                });
                record(&mut tx, cx.st, &row, &run, mv, &d.approver, detail).await?;
                // Consumed and moved, effects not yet inserted: a crash here
                // must undo the consume (one transaction or nothing).
                $crate::chaos::point("approval_decide");
                for effect in &d.effects {
                    insert_effect(&mut tx, cx, &run, effect).await?;
                }
                if d.verdict == Verdict::Approve {
                    // After a gated replay the run's effects exist already
                    // (failed or unknown): approval gives them a fresh budget
                    // under the same keys.
                    sqlx::query(&cx.st.deadletter.requeue_effects)
                        .bind(cx.now)
                        .bind(&challenge.namespace)
                        .bind(&challenge.key)
                        .execute(&mut *tx)
                        .await?;
                }
                $crate::chaos::before_commit::<$db>();
                tx.commit().await?;
                Ok(Some(run))
            }

            pub(crate) async fn due(cx: &Cx<'_>, limit: i64) -> Result<Vec<Challenge>> {
                sqlx::query_as::<_, ChallengeRow>(&cx.st.approval.due)
                    .bind(cx.now)
                    .bind(limit)
                    .fetch_all(cx.read)
                    .await?
                    .into_iter()
                    .map(ChallengeRow::into_challenge)
                    .collect()
            }

            async fn close_due(tx: &mut WriteTx, cx: &Cx<'_>, id: &str, state: ChallengeState) -> Result<Option<Challenge>> {
                sqlx::query_as::<_, ChallengeRow>(&cx.st.approval.close_due)
                    .bind(cx.now)
                    .bind(id)
                    .bind(state.as_str())
                    .fetch_optional(&mut **tx)
                    .await?
                    .map(ChallengeRow::into_challenge)
                    .transpose()
            }

            pub(crate) async fn expire(cx: &Cx<'_>, id: &str, callback: Option<&NewEffect>) -> Result<bool> {
                let mut tx = cx.write.begin().await?;
                let Some(challenge) = close_due(&mut tx, cx, id, ChallengeState::Expired).await? else {
                    tx.rollback().await?;
                    return Ok(false);
                };
                let row = sqlx::query_as::<_, RunRow>(&cx.st.approval.system_move[&Move::ApprovalExpired])
                    .bind(cx.now)
                    .bind(&challenge.namespace)
                    .bind(&challenge.key)
                    .bind("approval_expired")
                    .fetch_optional(&mut *tx)
                    .await?;
                if let Some(row) = row {
                    let run = row.to_run()?;
                    let detail = json!({
                        "challenge_id": challenge.new.id,
                        "operation": challenge.new.operation,
                        "expired_at": challenge.new.expires_at,
                        "escalation": challenge.new.escalation,
                        "staged_effects": challenge.new.effects.iter().map(|e| e.effect_type.as_str()).collect::<Vec<_>>(),
                    });
                    record(&mut tx, cx.st, &row, &run, Move::ApprovalExpired, SWEEPER, detail.clone()).await?;
                    let input = $crate::deadletter::DeadLetterInput::new(
                        $crate::deadletter::DeadLetterClass::ApprovalExpired,
                        "nobody decided the approval before it expired; nothing was sent",
                        detail,
                    );
                    super::deadletter::record_dead_letter(&mut tx, cx.st, &run, &input, run.updated_at).await?;
                    if let Some(callback) = callback {
                        insert_effect(&mut tx, cx, &run, callback).await?;
                    }
                }
                tx.commit().await?;
                Ok(true)
            }

            pub(crate) async fn escalate(cx: &Cx<'_>, id: &str, next: &NewChallenge) -> Result<bool> {
                let mut tx = cx.write.begin().await?;
                let Some(challenge) = close_due(&mut tx, cx, id, ChallengeState::Escalated).await? else {
                    tx.rollback().await?;
                    return Ok(false);
                };
                let row = sqlx::query_as::<_, RunRow>(&cx.st.approval.touch)
                    .bind(&challenge.namespace)
                    .bind(&challenge.key)
                    .fetch_one(&mut *tx)
                    .await?;
                let detail = json!({
                    "challenge_id": challenge.new.id,
                    "escalated_to": next.id,
                    "audience": next.audience,
                    "expires_at": next.expires_at,
                });
                let at = challenge.new.expires_at.max(cx.clock_now);
                let run = note(&mut tx, cx.st, &row, "approval_escalated", SWEEPER, detail, at).await?;
                insert_challenge(&mut tx, cx.st, &run, next, at).await?;
                tx.commit().await?;
                Ok(true)
            }

            pub(crate) async fn insert_session(cx: &Cx<'_>, s: &StoredSession, now: i64) -> Result<()> {
                sqlx::query(&cx.st.approval.insert_session)
                    .bind(&s.id_hash)
                    .bind(&s.subject)
                    .bind(text(&s.scopes)?)
                    .bind(text(&s.roles)?)
                    .bind(s.auth.as_str())
                    .bind(now)
                    .bind(s.expires_at)
                    .execute(cx.read)
                    .await?;
                Ok(())
            }

            pub(crate) async fn session(cx: &Cx<'_>, id_hash: &str) -> Result<Option<StoredSession>> {
                sqlx::query_as::<_, SessionRow>(&cx.st.approval.session)
                    .bind(cx.now)
                    .bind(id_hash)
                    .fetch_optional(cx.read)
                    .await?
                    .map(SessionRow::into_session)
                    .transpose()
            }

            pub(crate) async fn delete_session(cx: &Cx<'_>, id_hash: &str) -> Result<()> {
                sqlx::query(&cx.st.approval.delete_session).bind(id_hash).execute(cx.read).await?;
                Ok(())
            }

            pub(crate) async fn purge_sessions(cx: &Cx<'_>) -> Result<u64> {
                Ok(sqlx::query(&cx.st.approval.purge_sessions).bind(cx.now).execute(cx.read).await?.rows_affected())
            }

            pub(crate) async fn record_output(cx: &Cx<'_>, call: &OwnerCall, out: &NewOutput, max_repairs: u32) -> Result<OutputRecorded> {
                let mut tx = cx.write.begin().await?;
                let touched = sqlx::query_as::<_, RunRow>(&cx.st.approval.owner_touch)
                    .bind(cx.now)
                    .bind(call.namespace.as_str())
                    .bind(call.key.as_str())
                    .bind(call.lease.owner.to_hex())
                    .bind(call.lease.version.get())
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some(row) = touched else {
                    return Err(lost(cx, tx, call).await);
                };
                let valid = out.violations.is_empty();
                let now = row.to_run()?.updated_at;
                let (attempt,): (i64,) = sqlx::query_as(&cx.st.approval.insert_output)
                    .bind(call.namespace.as_str())
                    .bind(call.key.as_str())
                    .bind(&out.operation)
                    .bind(i64::from(valid))
                    .bind(out.output.to_string())
                    .bind(text(&out.violations)?)
                    .bind(&out.provider_class)
                    .bind(&out.model)
                    .bind(&out.revision)
                    .bind(&call.actor)
                    .bind(now)
                    .fetch_one(&mut *tx)
                    .await?;
                let detail = json!({
                    "attempt": attempt,
                    "operation": out.operation,
                    "valid": valid,
                    "violations": out.violations.len(),
                    "model": { "provider_class": out.provider_class, "model": out.model, "revision": out.revision },
                });
                let kind = if valid { "output_recorded" } else { "output_invalid" };
                let mut run = note(&mut tx, cx.st, &row, kind, &call.actor, detail, now).await?;
                let exhausted = !valid && attempt > i64::from(max_repairs);
                if exhausted {
                    let error = format!("model output still invalid after {attempt} attempts (max_repairs {max_repairs})");
                    let failed = sqlx::query_as::<_, RunRow>(&cx.st.finish[&Move::FailTerminal])
                        .bind(cx.now)
                        .bind(call.namespace.as_str())
                        .bind(call.key.as_str())
                        .bind(call.lease.owner.to_hex())
                        .bind(call.lease.version.get())
                        .bind(None::<String>)
                        .bind(error.as_str())
                        .bind("output_invalid")
                        .fetch_one(&mut *tx)
                        .await?;
                    run = failed.to_run()?;
                    let detail = json!({ "error": error, "attempts": attempt });
                    record(&mut tx, cx.st, &failed, &run, Move::FailTerminal, &call.actor, detail).await?;
                }
                tx.commit().await?;
                let lease = run.lease;
                Ok(OutputRecorded { attempt, moved: Moved { run, lease }, exhausted })
            }

            pub(crate) async fn latest_output(pool: &Pool<$db>, st: &Statements, namespace: &Namespace, key: &IdempotencyKey) -> Result<Option<StoredOutput>> {
                sqlx::query_as::<_, OutputRow>(&st.approval.latest_output)
                    .bind(namespace.as_str())
                    .bind(key.as_str())
                    .fetch_optional(pool)
                    .await?
                    .map(OutputRow::into_output)
                    .transpose()
            }
        }
    };
}

/// Implements [`ApprovalStore`](crate::store::approval::ApprovalStore) for a
/// backend whose `ops` module expanded [`approval_ops!`] and which has a
/// `cx()` method: every call forwards to the shared transaction logic.
#[macro_export]
#[doc(hidden)]
macro_rules! impl_approval_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::approval::ApprovalStore for $store {
            async fn gate(
                &self,
                call: &$crate::ledger::OwnerCall,
                challenge: &$crate::approval::NewChallenge,
                detail: serde_json::Value,
            ) -> $crate::store::Result<$crate::ledger::Moved> {
                ops::approval::gate(&self.cx(), call, challenge, detail).await
            }

            async fn approve_by_policy(
                &self,
                call: &$crate::ledger::OwnerCall,
                effects: &[$crate::outbox::NewEffect],
                detail: serde_json::Value,
            ) -> $crate::store::Result<$crate::ledger::Moved> {
                ops::approval::approve_by_policy(&self.cx(), call, effects, detail).await
            }

            async fn challenge_by_token(
                &self,
                token_hash: &str,
            ) -> $crate::store::Result<Option<$crate::approval::Challenge>> {
                let cx = self.cx();
                ops::approval::by_token(cx.read, cx.st, token_hash).await
            }

            async fn challenge(
                &self,
                id: &str,
            ) -> $crate::store::Result<Option<$crate::approval::Challenge>> {
                let cx = self.cx();
                ops::approval::by_id(cx.read, cx.st, id).await
            }

            async fn challenges(
                &self,
                state: Option<$crate::approval::ChallengeState>,
                limit: i64,
            ) -> $crate::store::Result<Vec<$crate::approval::Challenge>> {
                let cx = self.cx();
                ops::approval::list(cx.read, cx.st, state, limit).await
            }

            async fn decide(
                &self,
                decided: &$crate::store::approval::Decided,
            ) -> $crate::store::Result<Option<$crate::ledger::Run>> {
                ops::approval::decide(&self.cx(), decided).await
            }

            async fn due_challenges(
                &self,
                limit: i64,
            ) -> $crate::store::Result<Vec<$crate::approval::Challenge>> {
                ops::approval::due(&self.cx(), limit).await
            }

            async fn expire_challenge(
                &self,
                id: &str,
                callback: Option<&$crate::outbox::NewEffect>,
            ) -> $crate::store::Result<bool> {
                ops::approval::expire(&self.cx(), id, callback).await
            }

            async fn escalate_challenge(
                &self,
                id: &str,
                next: &$crate::approval::NewChallenge,
            ) -> $crate::store::Result<bool> {
                ops::approval::escalate(&self.cx(), id, next).await
            }

            async fn insert_session(
                &self,
                session: &$crate::approval::StoredSession,
            ) -> $crate::store::Result<()> {
                let cx = self.cx();
                ops::approval::insert_session(&cx, session, cx.clock_now).await
            }

            async fn session(
                &self,
                id_hash: &str,
            ) -> $crate::store::Result<Option<$crate::approval::StoredSession>> {
                ops::approval::session(&self.cx(), id_hash).await
            }

            async fn delete_session(&self, id_hash: &str) -> $crate::store::Result<()> {
                ops::approval::delete_session(&self.cx(), id_hash).await
            }

            async fn purge_sessions(&self) -> $crate::store::Result<u64> {
                ops::approval::purge_sessions(&self.cx()).await
            }

            async fn record_output(
                &self,
                call: &$crate::ledger::OwnerCall,
                output: &$crate::store::approval::NewOutput,
                max_repairs: u32,
            ) -> $crate::store::Result<$crate::store::approval::OutputRecorded> {
                ops::approval::record_output(&self.cx(), call, output, max_repairs).await
            }

            async fn latest_output(
                &self,
                namespace: &$crate::ledger::Namespace,
                key: &$crate::ledger::IdempotencyKey,
            ) -> $crate::store::Result<Option<$crate::store::approval::StoredOutput>> {
                let cx = self.cx();
                ops::approval::latest_output(cx.read, cx.st, namespace, key).await
            }
        }
    };
}
