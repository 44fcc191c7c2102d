//! The audit log's storage port: a run's trail, the scans that verify
//! every chain, checkpoints over every head, and verification records.
//! Entries themselves are appended inside the transaction of the move
//! they record, by the backends.

use async_trait::async_trait;
use futures_util::stream::BoxStream;

use super::checkpoint::{ChainHead, Checkpoint, CheckpointWrite, HeadRow};
use super::{AuditRecord, ChainAnchor, ScanRow, Verification};
use crate::ledger::storage::Result;
use crate::ledger::{IdempotencyKey, Namespace};

/// Storage calls of the audit log.
#[async_trait]
pub trait AuditStore: Send + Sync + std::fmt::Debug {
    /// The audit trail of one run, in chain order.
    ///
    /// # Errors
    /// On database failure.
    async fn audit_trail(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
    ) -> Result<Vec<AuditRecord>>;

    /// Every chain's current head (its run row, or its last event for a
    /// run-less chain) and its checkpointed head, sorted bytewise by
    /// (namespace, key), current first; one statement, one snapshot.
    fn head_scan(&self) -> BoxStream<'_, Result<HeadRow>>;

    /// Per key (one namespace, or all): the run row's head, the
    /// checkpointed head, then the events by sequence; one snapshot.
    fn audit_scan<'a>(&'a self, namespace: Option<&'a str>) -> BoxStream<'a, Result<ScanRow>>;

    /// The latest checkpoint's head list, sorted bytewise.
    fn checkpointed_heads(&self) -> BoxStream<'_, Result<ChainHead>>;

    /// Every checkpoint, by id.
    ///
    /// # Errors
    /// On database failure.
    async fn checkpoints(&self) -> Result<Vec<Checkpoint>>;

    /// The latest checkpoint.
    ///
    /// # Errors
    /// On database failure.
    async fn latest_checkpoint(&self) -> Result<Option<Checkpoint>>;

    /// Writes moved heads of checkpoint `checkpoint_id`, in preparation by
    /// `attempt`, ahead of its row: the head list is unchanged until
    /// [`AuditStore::commit_checkpoint`] moves them into it.
    ///
    /// # Errors
    /// On database failure.
    async fn stage_heads(
        &self,
        checkpoint_id: i64,
        attempt: &str,
        heads: &[ChainHead],
    ) -> Result<()>;

    /// Writes a checkpoint, moves its attempt's staged heads into the head
    /// list, drops every staging of its id or an earlier one, and deletes
    /// its removals (guarded tombstones), in one transaction; `false` when
    /// another checkpoint took the id first (nothing written).
    ///
    /// # Errors
    /// On database failure.
    async fn commit_checkpoint(&self, write: &CheckpointWrite) -> Result<bool>;

    /// A key's run-row head and checkpointed head.
    ///
    /// # Errors
    /// On database failure.
    async fn chain_anchor(&self, namespace: &str, key: &str) -> Result<ChainAnchor>;

    /// Stores a verification result.
    ///
    /// # Errors
    /// On database failure.
    async fn record_verification(&self, verification: &Verification) -> Result<()>;

    /// The latest stored verification result.
    ///
    /// # Errors
    /// On database failure.
    async fn last_verification(&self) -> Result<Option<Verification>>;
}
