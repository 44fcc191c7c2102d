//! The audit log's reads and checkpoints: the scans `audit verify` walks,
//! moved heads staged ahead of their checkpoint, the checkpoint written
//! with them and its tombstone deletions in one transaction, verification
//! records; and the [`AuditStore`] port.

use async_trait::async_trait;
use futures_util::stream::{BoxStream, StreamExt};
use serde_json::json;

use super::chain::append_system_event;
use crate::audit::checkpoint::{ChainHead, Checkpoint, CheckpointWrite, HeadRow};
use crate::audit::port::AuditStore;
use crate::audit::{AuditRecord, ChainAnchor, ScanRow, Verification};
use crate::db::exec::{Args, Tx};
use crate::db::rows::{
    AuditRow, AuditScanRow, CheckpointRow, HeadBatchRow, HeadScanRow, VerificationRow,
};
use crate::db::tx::to_json;
use crate::db::{Backend, Db, Finish};
use crate::ledger::storage::Result;
use crate::ledger::{IdempotencyKey, Namespace};

/// Writes a checkpoint, moves its attempt's staged heads into the head
/// list, clears every staging of its id or an earlier one, and deletes its
/// removals; `false` (nothing written) when another checkpoint took its id.
async fn commit_checkpoint(tx: &mut Tx<'_>, write: &CheckpointWrite) -> Result<Finish<bool>> {
    let st = tx.st;
    let c = &write.checkpoint;
    let args = Args::new()
        .bind(c.id)
        .bind(c.created_at)
        .bind(c.chain_count)
        .bind(&c.digest)
        .bind(c.changed)
        .bind(c.removed)
        .bind(c.anomalies)
        .bind(&c.reason)
        .bind(&c.prev_hash)
        .bind(&c.hash);
    match tx.execute(&st.audit.insert_checkpoint, args).await {
        Err(err) if err.is_unique_violation() => return Ok(Finish::Rollback(false)),
        other => other?,
    };
    let staged = Args::new().bind(c.id).bind(&write.attempt);
    tx.execute(&st.audit.merge_staged, staged).await?;
    tx.execute(&st.audit.clear_staged, Args::new().bind(c.id))
        .await?;
    let mut deleted = Vec::new();
    for r in &write.removals {
        let key = Args::new().bind(&r.namespace).bind(&r.key);
        let gone = tx
            .execute(&st.runs.delete_tombstone, key.clone().bind(r.cutoff))
            .await?;
        if gone == 1 {
            for sql in [&st.audit.delete_head, &st.audit.delete_events] {
                tx.execute(sql, key.clone()).await?;
            }
            deleted.push(json!([r.namespace, r.key]));
        }
    }
    if !deleted.is_empty() {
        let detail = json!({ "checkpoint_id": c.id, "count": deleted.len(), "keys": deleted });
        append_system_event(
            tx,
            "retention",
            "tombstones_deleted",
            RETENTION_ACTOR,
            detail,
            c.created_at,
        )
        .await?;
    }
    Ok(Finish::Commit(true))
}

/// The actor of retention's records in the `oncegate / retention` chain.
pub(crate) const RETENTION_ACTOR: &str = "oncegate:retention";

#[async_trait]
impl<B: Backend> AuditStore for Db<B> {
    async fn audit_trail(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
    ) -> Result<Vec<AuditRecord>> {
        let rd = self.reader();
        let args = Args::new().bind(namespace.as_str()).bind(key.as_str());
        rd.all::<AuditRow>(&rd.st.audit.audit_trail, args)
            .await?
            .into_iter()
            .map(AuditRow::into_record)
            .collect()
    }

    fn head_scan(&self) -> BoxStream<'_, Result<HeadRow>> {
        let rd = self.reader();
        rd.stream::<HeadScanRow>(&self.backend().statements().audit.head_scan, Args::new())
            .map(|r| r.map(HeadRow::from))
            .boxed()
    }

    fn audit_scan<'a>(&'a self, namespace: Option<&'a str>) -> BoxStream<'a, Result<ScanRow>> {
        let rd = self.reader();
        let scans = &self.backend().statements().audit.audit_scan;
        let rows = match namespace {
            Some(ns) => rd.stream::<AuditScanRow>(&scans[1], Args::new().bind(ns)),
            None => rd.stream::<AuditScanRow>(&scans[0], Args::new()),
        };
        rows.map(|r| r.and_then(AuditScanRow::into_scan)).boxed()
    }

    fn checkpointed_heads(&self) -> BoxStream<'_, Result<ChainHead>> {
        let rd = self.reader();
        rd.stream::<(String, String, i64, String)>(
            &self.backend().statements().audit.heads,
            Args::new(),
        )
        .map(|r| {
            r.map(|(namespace, key, seq, head)| ChainHead {
                namespace,
                key,
                seq,
                head,
            })
        })
        .boxed()
    }

    async fn checkpoints(&self) -> Result<Vec<Checkpoint>> {
        let rd = self.reader();
        let rows: Vec<CheckpointRow> = rd.all(&rd.st.audit.checkpoints, Args::new()).await?;
        Ok(rows.into_iter().map(Checkpoint::from).collect())
    }

    async fn latest_checkpoint(&self) -> Result<Option<Checkpoint>> {
        let rd = self.reader();
        let row: Option<CheckpointRow> = rd
            .optional(&rd.st.audit.latest_checkpoint, Args::new())
            .await?;
        Ok(row.map(Checkpoint::from))
    }

    async fn stage_heads(
        &self,
        checkpoint_id: i64,
        attempt: &str,
        heads: &[ChainHead],
    ) -> Result<()> {
        let rows: Vec<HeadBatchRow<'_>> = heads.iter().map(HeadBatchRow::from).collect();
        let (attempt, rows) = (attempt.to_owned(), to_json(&rows)?);
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                if let Some(sql) = &st.audit.stage_unsynced {
                    tx.execute(sql, Args::new()).await?;
                }
                let args = Args::new().bind(checkpoint_id).bind(&attempt).bind(&rows);
                tx.execute(&st.audit.stage_heads, args).await?;
                Ok(())
            })
        })
        .await
    }

    async fn commit_checkpoint(&self, write: &CheckpointWrite) -> Result<bool> {
        let write = write.clone();
        self.write(move |tx| Box::pin(async move { commit_checkpoint(tx, &write).await }))
            .await
    }

    async fn chain_anchor(&self, namespace: &str, key: &str) -> Result<ChainAnchor> {
        let rd = self.reader();
        let args = Args::new().bind(namespace).bind(key);
        let run = rd.optional(&rd.st.audit.run_head, args.clone()).await?;
        let checkpointed = rd.optional(&rd.st.audit.checkpointed_head, args).await?;
        Ok(ChainAnchor { run, checkpointed })
    }

    async fn record_verification(&self, verification: &Verification) -> Result<()> {
        let v = verification.clone();
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                let args = Args::new()
                    .bind(&v.id)
                    .bind(v.started_at)
                    .bind(v.finished_at)
                    .bind(&v.namespace)
                    .bind(v.chains)
                    .bind(v.failures)
                    .bind(&v.first_failure)
                    .bind(v.checkpoint_id);
                tx.execute(&st.audit.insert_verification, args).await?;
                Ok(())
            })
        })
        .await
    }

    async fn last_verification(&self) -> Result<Option<Verification>> {
        let rd = self.reader();
        let row: Option<VerificationRow> = rd
            .optional(&rd.st.audit.last_verification, Args::new())
            .await?;
        Ok(row.map(Verification::from))
    }
}
