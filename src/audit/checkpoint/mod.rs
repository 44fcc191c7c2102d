//! Checkpoints: one digest over the head of every chain, chained in turn.
//!
//! Each key's chain proves its own events, and the run row holds its head;
//! a run deleted together with its events would leave no trace in either.
//! A checkpoint records every head (`audit_heads`: one row per chain, the
//! latest checkpoint's list) and a SHA-256 over that list sorted bytewise,
//! and links to the previous checkpoint's hash. `oncegate audit verify`
//! then names a key that vanished since the last checkpoint.
//!
//! Writing one reads every head once (one streamed statement on the read
//! side, so SQLite writers never wait for it) and writes only the heads
//! that moved: nothing is added to the claim path. The moved heads are
//! staged in chunks of [`STAGE_CHUNK`] while the scan streams on, and the
//! transaction that inserts the checkpoint row moves them into the head
//! list, so a checkpoint holds a chunk or two in memory however many heads
//! moved (the first one over a ledger of millions moves every head).
//!
//! A head that vanished or went backwards is never written over: the
//! checkpoint keeps its last known value and counts an anomaly, so a later
//! checkpoint cannot launder a deletion. Retention's intended deletions are
//! the one exception: they are removed in the same transaction that
//! deletes the tombstones.

use std::collections::HashSet;

use serde::Serialize;
use serde_json::json;
use sha2::{Digest as _, Sha256};

use self::builder::scan_heads;
use super::port::AuditStore;
use crate::clock::Millis;
use crate::ledger::storage::{Result, StoreError};

mod builder;

/// The namespace of chains that belong to no run (kill-switch changes,
/// retention records). Their heads come from their last event.
pub const SYSTEM_NAMESPACE: &str = "oncegate";

/// The head of one chain: its last sequence number and hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChainHead {
    /// The chain's namespace.
    pub namespace: String,
    /// The chain's key.
    pub key: String,
    /// Last sequence number.
    pub seq: i64,
    /// Last hash.
    pub head: String,
}

/// One row of the head scan: a chain's current head (from its run row, or
/// its last event for a run-less chain) or its checkpointed head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadRow {
    /// The chain's namespace.
    pub namespace: String,
    /// The chain's key.
    pub key: String,
    /// True for the latest checkpoint's entry, false for the current head.
    pub checkpointed: bool,
    /// Sequence number.
    pub seq: i64,
    /// Hash (`None` only on a damaged run row).
    pub head: Option<String>,
}

/// Why a checkpoint was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointReason {
    /// The periodic task in `serve`.
    Periodic,
    /// `oncegate audit checkpoint`.
    Manual,
    /// Written with a retention deletion of tombstones.
    Retention,
}

impl CheckpointReason {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Periodic => "periodic",
            Self::Manual => "manual",
            Self::Retention => "retention",
        }
    }
}

/// A stored checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Checkpoint {
    /// 1, 2, 3, …: a gap is a deleted checkpoint.
    pub id: i64,
    /// When it was written.
    pub created_at: Millis,
    /// Chains in its head list.
    pub chain_count: i64,
    /// `sha256:<hex>` over the sorted head list.
    pub digest: String,
    /// Heads that moved or appeared since the previous checkpoint.
    pub changed: i64,
    /// Chains retention deleted with it.
    pub removed: i64,
    /// Chains that vanished or went backwards (kept at their last head).
    pub anomalies: i64,
    /// `periodic`, `manual` or `retention`.
    pub reason: String,
    /// The previous checkpoint's hash.
    pub prev_hash: Option<String>,
    /// This checkpoint's hash.
    pub hash: String,
}

impl Checkpoint {
    /// The hash over every field but `hash`.
    pub fn compute_hash(&self) -> String {
        let body = json!({
            "id": self.id,
            "created_at": self.created_at,
            "chain_count": self.chain_count,
            "digest": self.digest,
            "changed": self.changed,
            "removed": self.removed,
            "anomalies": self.anomalies,
            "reason": self.reason,
            "prev_hash": self.prev_hash,
        });
        let canonical =
            crate::canonical::to_vec(&body).unwrap_or_else(|_| body.to_string().into_bytes());
        format!("sha256:{}", hex::encode(Sha256::digest(canonical)))
    }
}

/// SHA-256 over a head list fed in bytewise (namespace, key) order.
#[derive(Debug, Clone, Default)]
pub struct HeadDigest {
    hasher: Sha256,
    count: i64,
}

impl HeadDigest {
    /// Adds the next entry.
    pub fn add(&mut self, namespace: &str, key: &str, seq: i64, head: &str) {
        let line = json!([namespace, key, seq, head]).to_string();
        self.hasher.update(line.as_bytes());
        self.hasher.update(b"\n");
        self.count += 1;
    }

    /// Entries added.
    pub fn count(&self) -> i64 {
        self.count
    }

    /// `sha256:<hex>`.
    pub fn finish(self) -> String {
        format!("sha256:{}", hex::encode(self.hasher.finalize()))
    }
}

/// A tombstone retention deletes together with a checkpoint; the delete is
/// guarded (`archived_at` set, last change before `cutoff`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    /// The run's namespace.
    pub namespace: String,
    /// The run's key.
    pub key: String,
    /// Only a tombstone whose last change is older than this goes.
    pub cutoff: Millis,
}

/// Everything one checkpoint writes, in one transaction.
#[derive(Debug, Clone)]
pub struct CheckpointWrite {
    /// The new row.
    pub checkpoint: Checkpoint,
    /// The preparation whose staged heads move into the head list (staged
    /// under the new row's id).
    pub attempt: String,
    /// Tombstones deleted with it.
    pub removals: Vec<Removal>,
}

/// A chain the checkpoint refused to move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Anomaly {
    /// The chain's namespace.
    pub namespace: String,
    /// The chain's key.
    pub key: String,
    /// What is wrong, in words.
    pub problem: String,
}

/// What writing a checkpoint did.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointReport {
    /// The row written.
    pub checkpoint: Checkpoint,
    /// Up to 100 chains that vanished or went backwards.
    pub anomalies: Vec<Anomaly>,
}

/// Moved heads staged per write while a checkpoint is prepared.
pub const STAGE_CHUNK: usize = 1_000;

/// Writes a checkpoint over every chain head, deleting `removals` (retention
/// tombstones) in the same transaction. Retries once when another process
/// wrote a checkpoint meanwhile.
///
/// # Errors
/// [`StoreError`] on database failure, or when checkpoints kept racing.
pub async fn write_checkpoint<S: AuditStore + ?Sized>(
    store: &S,
    reason: CheckpointReason,
    removals: &[Removal],
    now: Millis,
) -> Result<CheckpointReport> {
    for _ in 0..3 {
        let (write, anomalies) = prepare(store, reason, removals, now).await?;
        if store.commit_checkpoint(&write).await? {
            if write.checkpoint.anomalies > 0 {
                tracing::error!(
                    checkpoint = write.checkpoint.id,
                    anomalies = write.checkpoint.anomalies,
                    "audit checkpoint found chains that vanished or went backwards; run `oncegate audit verify`"
                );
            }
            return Ok(CheckpointReport {
                checkpoint: write.checkpoint,
                anomalies,
            });
        }
    }
    Err(StoreError::Corrupt(
        "another process kept writing audit checkpoints; try again".into(),
    ))
}

/// Stages the moved heads of checkpoint `latest + 1` while the head scan
/// streams past, and builds its row.
async fn prepare<S: AuditStore + ?Sized>(
    store: &S,
    reason: CheckpointReason,
    removals: &[Removal],
    now: Millis,
) -> Result<(CheckpointWrite, Vec<Anomaly>)> {
    let latest = store.latest_checkpoint().await?;
    let id = latest.as_ref().map_or(1, |c| c.id + 1);
    let attempt = uuid::Uuid::new_v4().simple().to_string();
    let removal_keys: HashSet<(String, String)> = removals
        .iter()
        .map(|r| (r.namespace.clone(), r.key.clone()))
        .collect();
    // The scan goes on while the chunk before is staged.
    let (chunks, mut staged) = tokio::sync::mpsc::channel::<Vec<ChainHead>>(1);
    let stage = async {
        while let Some(chunk) = staged.recv().await {
            store.stage_heads(id, &attempt, &chunk).await?;
        }
        Ok(())
    };
    let (builder, ()) = futures_util::try_join!(scan_heads(store, &removal_keys, chunks), stage)?;
    let mut checkpoint = Checkpoint {
        id,
        created_at: now,
        chain_count: builder.digest.count(),
        digest: String::new(),
        changed: builder.changed,
        removed: removals.len() as i64,
        anomalies: builder.anomaly_count,
        reason: reason.as_str().into(),
        prev_hash: latest.map(|c| c.hash),
        hash: String::new(),
    };
    checkpoint.digest = builder.digest.finish();
    checkpoint.hash = checkpoint.compute_hash();
    let write = CheckpointWrite {
        checkpoint,
        attempt,
        removals: removals.to_vec(),
    };
    Ok((write, builder.anomalies))
}

#[cfg(test)]
mod tests;
