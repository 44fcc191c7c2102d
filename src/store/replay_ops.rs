//! Replay and bulk replay jobs' transaction logic, expanded per backend like
//! [`ledger_ops!`](crate::ledger_ops).

/// Expands the replay operations inside a backend's `ops` module, as a
/// child module `replay` beside `deadletter`.
#[macro_export]
#[doc(hidden)]
macro_rules! replay_ops {
    ($db:ty) => {
        pub(crate) mod replay {
            use serde_json::json;
            use sqlx::Pool;

            use super::deadletter::{close, fetch_in, operator_move, refusal, run_in, Tx};
            use super::{record, Cx};
            use $crate::deadletter::{
                ActionOutcome, JobItem, JobItemRef, NewReplayJob, Refusal, ReplayCommand, ReplayJob,
                Resolution,
            };
            use $crate::ledger::Move;
            use $crate::store::deadletter_rows::{ItemRow, JobRow};
            use $crate::store::row::RunRow;
            use $crate::store::sql::Statements;
            use $crate::store::{Result, StoreError};

            /// Extends the runner's lease inside the item's transaction;
            /// `false` when the job is stopped or another runner holds it.
            async fn renew(tx: &mut Tx, cx: &Cx<'_>, item: &JobItemRef) -> Result<bool> {
                let id: Option<String> = sqlx::query_scalar(&cx.st.deadletter.jobs.renew)
                    .bind(cx.now)
                    .bind(&item.job_id)
                    .bind(&item.owner)
                    .bind(item.lease_ms)
                    .fetch_optional(&mut **tx)
                    .await?;
                Ok(id.is_some())
            }

            async fn mark(tx: &mut Tx, cx: &Cx<'_>, item: &JobItemRef, state: &str, outcome: &str) -> Result<bool> {
                let done = sqlx::query(&cx.st.deadletter.jobs.mark_item)
                    .bind(cx.now)
                    .bind(&item.job_id)
                    .bind(item.seq)
                    .bind(state)
                    .bind(outcome)
                    .execute(&mut **tx)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            /// Marks a job item refused (with why) while the runner still
            /// holds the running job; `false` otherwise.
            pub(crate) async fn refuse_item(cx: &Cx<'_>, item: &JobItemRef, why: &str) -> Result<bool> {
                let mut tx = cx.write.begin().await?;
                if !renew(&mut tx, cx, item).await? || !mark(&mut tx, cx, item, "refused", why).await? {
                    tx.rollback().await?;
                    return Ok(false);
                }
                tx.commit().await?;
                Ok(true)
            }

            async fn refused(tx: Tx, cx: &Cx<'_>, cmd: &ReplayCommand, why: Refusal) -> Result<ActionOutcome> {
                tx.rollback().await?;
                if let Some(item) = &cmd.job_item {
                    if !refuse_item(cx, item, &why.describe()).await? {
                        return Ok(ActionOutcome::Refused(Refusal::JobNotRunning));
                    }
                }
                Ok(ActionOutcome::Refused(why))
            }

            /// `replay`: the record closed as replayed, the run's unfinished
            /// effects back to `pending` under the same keys with a fresh
            /// budget, and the run `dead_lettered → approved` (or, when it
            /// never queued an effect, `→ failed_retryable` for the
            /// workflow's re-run), in one transaction.
            pub(crate) async fn replay(cx: &Cx<'_>, cmd: &ReplayCommand) -> Result<ActionOutcome> {
                let mut tx = cx.write.begin().await?;
                if let Some(item) = &cmd.job_item {
                    if !renew(&mut tx, cx, item).await? {
                        tx.rollback().await?;
                        return Ok(ActionOutcome::Refused(Refusal::JobNotRunning));
                    }
                }
                let dl = fetch_in(&mut tx, cx.st, &cmd.id).await?;
                let why = refusal(dl.as_ref()).or_else(|| {
                    dl.as_ref().filter(|d| !d.class.stops_run()).map(|_| Refusal::NothingToReplay)
                });
                let (Some(dl), None) = (dl, why.clone()) else {
                    return refused(tx, cx, cmd, why.unwrap_or(Refusal::NotFound)).await;
                };
                let how = (Resolution::Replayed, cmd.actor.as_str(), cmd.reason.as_str());
                if !close(&mut tx, cx, &cmd.id, how, cmd.retain_ms, true, None).await? {
                    return refused(tx, cx, cmd, Refusal::AlreadyResolved(Resolution::Replayed)).await;
                }
                let effects: i64 = sqlx::query_scalar(&cx.st.deadletter.count_effects)
                    .bind(&dl.namespace)
                    .bind(&dl.key)
                    .fetch_one(&mut *tx)
                    .await?;
                let mv = match (&cmd.challenge, effects) {
                    (Some(_), _) => Move::ReplayGated,
                    (None, 0) => Move::ReplayRelease,
                    (None, _) => Move::ReplayUngated,
                };
                // A gated replay re-queues nothing now: the approval does.
                let requeued = if cmd.challenge.is_some() {
                    0
                } else {
                    sqlx::query(&cx.st.deadletter.requeue_effects)
                        .bind(cx.now)
                        .bind(&dl.namespace)
                        .bind(&dl.key)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected()
                };
                let job_id = cmd.job_item.as_ref().map(|i| i.job_id.as_str());
                let detail = json!({ "dead_letter_id": dl.id, "class": dl.class.as_str(),
                    "reason": cmd.reason, "requeued": requeued, "job_id": job_id,
                    "replay_count": dl.replay_count + 1 });
                let Some(mut run) = operator_move(&mut tx, cx, &dl, mv, None, &cmd.actor, detail).await? else {
                    let run = run_in(&mut tx, cx.st, &dl.namespace, &dl.key).await?;
                    return refused(tx, cx, cmd, Refusal::RunNotDeadLettered(run.map(|r| r.state))).await;
                };
                if let Some(challenge) = &cmd.challenge {
                    super::approval::insert_challenge(&mut tx, cx.st, &run, challenge, run.updated_at).await?;
                }
                if mv == Move::ReplayUngated {
                    // Nothing left to send (every effect finished meanwhile): complete now.
                    let done = sqlx::query_as::<_, RunRow>(&cx.st.outbox.complete_run)
                        .bind(cx.now)
                        .bind(&dl.namespace)
                        .bind(&dl.key)
                        .fetch_optional(&mut *tx)
                        .await?;
                    if let Some(row) = done {
                        run = row.to_run()?;
                        let detail = json!({ "dead_letter_id": dl.id, "note": "no effect was outstanding" });
                        record(&mut tx, cx.st, &row, &run, Move::EffectsCompleted, &cmd.actor, detail).await?;
                    }
                }
                if let Some(item) = &cmd.job_item {
                    if !mark(&mut tx, cx, item, "replayed", run.state.as_str()).await? {
                        tx.rollback().await?;
                        return Ok(ActionOutcome::Refused(Refusal::ItemDone));
                    }
                }
                let after = fetch_in(&mut tx, cx.st, &cmd.id).await?
                    .ok_or_else(|| StoreError::Corrupt("dead letter vanished".into()))?;
                tx.commit().await?;
                Ok(ActionOutcome::Done { dead_letter: Box::new(after), run: Some(Box::new(run)), effects: requeued })
            }

            /// Creates a running job with its frozen items, in one transaction.
            pub(crate) async fn create_job(cx: &Cx<'_>, job: &NewReplayJob) -> Result<ReplayJob> {
                let jobs = &cx.st.deadletter.jobs;
                let mut tx = cx.write.begin().await?;
                sqlx::query(&jobs.insert)
                    .bind(cx.now)
                    .bind(&job.id)
                    .bind(&job.created_by)
                    .bind(&job.reason)
                    .bind(job.rate_per_sec)
                    .bind(job.selection.to_string())
                    .bind(job.summary.to_string())
                    .bind(job.dead_letter_ids.len() as i64)
                    .execute(&mut *tx)
                    .await?;
                for (i, id) in job.dead_letter_ids.iter().enumerate() {
                    sqlx::query(&jobs.insert_item)
                        .bind(&job.id)
                        .bind(i as i64 + 1)
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                }
                let row = sqlx::query_as::<_, JobRow>(&jobs.fetch).bind(&job.id).fetch_one(&mut *tx).await?;
                tx.commit().await?;
                row.into_job()
            }

            pub(crate) async fn job(pool: &Pool<$db>, st: &Statements, id: &str) -> Result<Option<ReplayJob>> {
                sqlx::query_as::<_, JobRow>(&st.deadletter.jobs.fetch)
                    .bind(id)
                    .fetch_optional(pool)
                    .await?
                    .map(JobRow::into_job)
                    .transpose()
            }

            pub(crate) async fn jobs(pool: &Pool<$db>, st: &Statements, limit: i64) -> Result<Vec<ReplayJob>> {
                sqlx::query_as::<_, JobRow>(&st.deadletter.jobs.list)
                    .bind(limit)
                    .fetch_all(pool)
                    .await?
                    .into_iter()
                    .map(JobRow::into_job)
                    .collect()
            }

            pub(crate) async fn items(pool: &Pool<$db>, st: &Statements, id: &str, after: i64, limit: i64) -> Result<Vec<JobItem>> {
                sqlx::query_as::<_, ItemRow>(&st.deadletter.jobs.items)
                    .bind(id)
                    .bind(after)
                    .bind(limit)
                    .fetch_all(pool)
                    .await?
                    .into_iter()
                    .map(ItemRow::into_item)
                    .collect()
            }

            /// Stops (`running → stopped`) or resumes (`stopped → running`)
            /// a job; the job as it is afterwards, `None` if unknown.
            pub(crate) async fn set_state(cx: &Cx<'_>, id: &str, stop: bool, actor: &str) -> Result<Option<ReplayJob>> {
                let jobs = &cx.st.deadletter.jobs;
                let sql = if stop { &jobs.stop } else { &jobs.resume };
                sqlx::query(sql).bind(cx.now).bind(id).bind(actor).execute(cx.read).await?;
                job(cx.read, cx.st, id).await
            }

            /// Leases the oldest running job whose lease is free or expired.
            pub(crate) async fn lease(cx: &Cx<'_>, owner: &str, lease_ms: i64) -> Result<Option<ReplayJob>> {
                let id: Option<String> = sqlx::query_scalar(&cx.st.deadletter.jobs.lease)
                    .bind(cx.now)
                    .bind(owner)
                    .bind(lease_ms)
                    .fetch_optional(cx.read)
                    .await?;
                match id {
                    Some(id) => job(cx.read, cx.st, &id).await,
                    None => Ok(None),
                }
            }

            pub(crate) async fn next_item(pool: &Pool<$db>, st: &Statements, id: &str) -> Result<Option<JobItem>> {
                sqlx::query_as::<_, ItemRow>(&st.deadletter.jobs.next_item)
                    .bind(id)
                    .fetch_optional(pool)
                    .await?
                    .map(ItemRow::into_item)
                    .transpose()
            }

            /// Completes the runner's job when no item is pending.
            pub(crate) async fn complete(cx: &Cx<'_>, id: &str, owner: &str) -> Result<bool> {
                let done = sqlx::query(&cx.st.deadletter.jobs.complete)
                    .bind(cx.now)
                    .bind(id)
                    .bind(owner)
                    .execute(cx.read)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            pub(crate) async fn release(cx: &Cx<'_>, id: &str, owner: &str) -> Result<()> {
                sqlx::query(&cx.st.deadletter.jobs.release).bind(id).bind(owner).execute(cx.read).await?;
                Ok(())
            }
        }
    };
}
