//! Bulk replay jobs: created with their frozen items in one transaction,
//! leased by one runner at a time, stopped and resumed by operators; and
//! the [`JobStore`] port. Every write goes through the writer.

use async_trait::async_trait;

use crate::db::exec::{Args, Tx};
use crate::db::rows::{ItemRow, JobRow};
use crate::db::{Backend, Db, Finish};
use crate::deadletter::jobs::stored_selection;
use crate::deadletter::port::JobStore;
use crate::deadletter::{JobItem, JobItemRef, NewReplayJob, ReplayJob};
use crate::ledger::storage::Result;

/// Extends the runner's lease inside the item's transaction; `false` when
/// the job is stopped or another runner holds it.
pub(crate) async fn renew(tx: &mut Tx<'_>, item: &JobItemRef) -> Result<bool> {
    let st = tx.st;
    let args = Args::new()
        .bind(tx.now)
        .bind(&item.job_id)
        .bind(&item.owner)
        .bind(item.lease_ms);
    let id: Option<(String,)> = tx.optional(&st.jobs.renew, args).await?;
    Ok(id.is_some())
}

/// Marks a pending item; `false` when it was not pending.
pub(crate) async fn mark(
    tx: &mut Tx<'_>,
    item: &JobItemRef,
    state: &str,
    outcome: &str,
) -> Result<bool> {
    let st = tx.st;
    let args = Args::new()
        .bind(tx.now)
        .bind(&item.job_id)
        .bind(item.seq)
        .bind(state)
        .bind(outcome);
    Ok(tx.execute(&st.jobs.mark_item, args).await? == 1)
}

/// Marks a job item refused (with why) while the runner still holds the
/// running job; `false` (nothing written) otherwise.
pub(crate) async fn refuse_item(
    tx: &mut Tx<'_>,
    item: &JobItemRef,
    why: &str,
) -> Result<Finish<bool>> {
    if !renew(tx, item).await? || !mark(tx, item, "refused", why).await? {
        return Ok(Finish::Rollback(false));
    }
    Ok(Finish::Commit(true))
}

/// Creates a job with its frozen items: running, or stopped until a
/// second operator starts it.
async fn create(tx: &mut Tx<'_>, job: &NewReplayJob) -> Result<JobRow> {
    let st = tx.st;
    let args = Args::new()
        .bind(tx.now)
        .bind(&job.id)
        .bind(&job.created_by)
        .bind(&job.reason)
        .bind(job.rate_per_sec)
        .bind(stored_selection(&job.selection, job.fix.as_ref()).to_string())
        .bind(job.summary.to_string())
        .bind(job.dead_letter_ids.len() as i64)
        .bind(i64::from(job.four_eyes));
    tx.execute(&st.jobs.insert, args).await?;
    for (i, id) in job.dead_letter_ids.iter().enumerate() {
        let args = Args::new().bind(&job.id).bind(i as i64 + 1).bind(id);
        tx.execute(&st.jobs.insert_item, args).await?;
    }
    tx.one(&st.jobs.fetch, Args::new().bind(&job.id)).await
}

#[async_trait]
impl<B: Backend> JobStore for Db<B> {
    async fn create_replay_job(&self, job: &NewReplayJob) -> Result<ReplayJob> {
        let job = job.clone();
        self.commit(move |tx| Box::pin(async move { create(tx, &job).await }))
            .await?
            .into_job()
    }

    async fn replay_job(&self, id: &str) -> Result<Option<ReplayJob>> {
        let rd = self.reader();
        rd.optional::<JobRow>(&rd.st.jobs.fetch, Args::new().bind(id))
            .await?
            .map(JobRow::into_job)
            .transpose()
    }

    async fn replay_jobs(&self, limit: i64) -> Result<Vec<ReplayJob>> {
        let rd = self.reader();
        rd.all::<JobRow>(&rd.st.jobs.list, Args::new().bind(limit))
            .await?
            .into_iter()
            .map(JobRow::into_job)
            .collect()
    }

    async fn replay_job_items(&self, id: &str, after_seq: i64, limit: i64) -> Result<Vec<JobItem>> {
        let rd = self.reader();
        let args = Args::new().bind(id).bind(after_seq).bind(limit);
        rd.all::<ItemRow>(&rd.st.jobs.items, args)
            .await?
            .into_iter()
            .map(ItemRow::into_item)
            .collect()
    }

    async fn set_replay_job_state(
        &self,
        id: &str,
        stop: bool,
        actor: &str,
    ) -> Result<Option<(ReplayJob, bool)>> {
        let (job, actor) = (id.to_owned(), actor.to_owned());
        let moved = self
            .commit(move |tx| {
                Box::pin(async move {
                    let st = tx.st;
                    let sql = if stop { &st.jobs.stop } else { &st.jobs.resume };
                    tx.execute(sql, Args::new().bind(tx.now).bind(&job).bind(&actor))
                        .await
                })
            })
            .await?;
        Ok(self.replay_job(id).await?.map(|job| (job, moved == 1)))
    }

    async fn lease_replay_job(&self, owner: &str, lease_ms: i64) -> Result<Option<ReplayJob>> {
        let lessee = owner.to_owned();
        let id: Option<(String,)> = self
            .commit(move |tx| {
                Box::pin(async move {
                    let st = tx.st;
                    let args = Args::new().bind(tx.now).bind(&lessee).bind(lease_ms);
                    tx.optional(&st.jobs.lease, args).await
                })
            })
            .await?;
        match id {
            Some((id,)) => self.replay_job(&id).await,
            None => Ok(None),
        }
    }

    async fn next_replay_item(&self, job_id: &str) -> Result<Option<JobItem>> {
        let rd = self.reader();
        rd.optional::<ItemRow>(&rd.st.jobs.next_item, Args::new().bind(job_id))
            .await?
            .map(ItemRow::into_item)
            .transpose()
    }

    async fn refuse_replay_item(&self, item: &JobItemRef, why: &str) -> Result<bool> {
        let (item, why) = (item.clone(), why.to_owned());
        self.write(move |tx| Box::pin(async move { refuse_item(tx, &item, &why).await }))
            .await
    }

    async fn complete_replay_job(&self, id: &str, owner: &str) -> Result<bool> {
        let (job, owner) = (id.to_owned(), owner.to_owned());
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                let args = Args::new().bind(tx.now).bind(&job).bind(&owner);
                Ok(tx.execute(&st.jobs.complete, args).await? == 1)
            })
        })
        .await
    }

    async fn release_replay_job(&self, id: &str, owner: &str) -> Result<()> {
        let (job, owner) = (id.to_owned(), owner.to_owned());
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                tx.execute(&st.jobs.release, Args::new().bind(&job).bind(&owner))
                    .await?;
                Ok(())
            })
        })
        .await
    }
}
