//! Rows of the audit-integrity and retention statements.

use crate::audit::checkpoint::{Checkpoint, HeadRow};
use std::collections::BTreeMap;

use crate::audit::seals::StoredEffect;
use crate::audit::{AuditEntry, AuditRecord, ScanRow, Verification};
use crate::ledger::storage::Result;
use crate::outbox::seal::Sealed;
use crate::retention::RunStamp;

/// A head-scan row.
#[derive(Debug)]
pub(crate) struct HeadScanRow {
    namespace: String,
    run_key: String,
    src: i64,
    seq: i64,
    head: Option<String>,
}

impl From<HeadScanRow> for HeadRow {
    fn from(r: HeadScanRow) -> Self {
        Self {
            namespace: r.namespace,
            key: r.run_key,
            checkpointed: r.src == 1,
            seq: r.seq,
            head: r.head,
        }
    }
}

/// A verification-scan row (run head, checkpointed head or event).
#[derive(Debug)]
pub(crate) struct AuditScanRow {
    namespace: String,
    run_key: String,
    src: i64,
    seq: i64,
    kind: Option<String>,
    actor: Option<String>,
    from_state: Option<String>,
    to_state: Option<String>,
    version: Option<i64>,
    detail: Option<String>,
    prev_hash: Option<String>,
    hash: Option<String>,
    created_at: Option<i64>,
    archived_at: Option<i64>,
    body: Option<Vec<u8>>,
}

impl AuditScanRow {
    /// An effect row of the scan (see the statement for its columns),
    /// sealed as it is stored now. Headers that no longer parse seal as
    /// none, which no recorded seal matches.
    fn into_stored_effect(self) -> StoredEffect {
        let text = |v: Option<String>| v.unwrap_or_default();
        let headers: BTreeMap<String, String> = self
            .detail
            .as_deref()
            .and_then(|h| serde_json::from_str(h).ok())
            .unwrap_or_default();
        let (target, effect_type) = (text(self.actor), text(self.kind));
        let (method, url, key) = (
            text(self.from_state),
            text(self.to_state),
            text(self.prev_hash),
        );
        let sealed = Sealed {
            target: &target,
            effect_type: &effect_type,
            method: &method,
            url: &url,
            headers: &headers,
            body: self.body.as_deref(),
            idempotency_key: &key,
        };
        StoredEffect {
            namespace: self.namespace,
            key: self.run_key,
            id: text(self.hash),
            slot: sealed.slot(),
            seal: sealed.seal(),
            body_redacted: self.version.is_some(),
        }
    }

    pub(crate) fn into_scan(self) -> Result<ScanRow> {
        Ok(match self.src {
            0 => ScanRow::Run {
                namespace: self.namespace,
                key: self.run_key,
                seq: self.seq,
                head: self.hash,
                archived_at: self.archived_at,
            },
            1 => ScanRow::Checkpointed {
                namespace: self.namespace,
                key: self.run_key,
                seq: self.seq,
                head: self.hash.unwrap_or_default(),
            },
            3 => ScanRow::Effect(self.into_stored_effect()),
            _ => {
                // An event whose detail is not JSON is still walked: its
                // hash will not match, which names the row.
                let detail = self.detail.unwrap_or_default();
                let detail =
                    serde_json::from_str(&detail).unwrap_or(serde_json::Value::String(detail));
                ScanRow::Event(AuditRecord {
                    entry: AuditEntry {
                        namespace: self.namespace,
                        key: self.run_key,
                        seq: self.seq,
                        kind: self.kind.unwrap_or_default(),
                        actor: self.actor.unwrap_or_default(),
                        from_state: self.from_state,
                        to_state: self.to_state,
                        version: self.version,
                        detail,
                        created_at: self.created_at.unwrap_or_default(),
                    },
                    prev_hash: self.prev_hash,
                    hash: self.hash.unwrap_or_default(),
                })
            }
        })
    }
}

/// An `audit_checkpoints` row.
#[derive(Debug)]
pub(crate) struct CheckpointRow {
    id: i64,
    created_at: i64,
    chain_count: i64,
    digest: String,
    changed: i64,
    removed: i64,
    anomalies: i64,
    reason: String,
    prev_hash: Option<String>,
    hash: String,
}

impl From<CheckpointRow> for Checkpoint {
    fn from(r: CheckpointRow) -> Self {
        Self {
            id: r.id,
            created_at: r.created_at,
            chain_count: r.chain_count,
            digest: r.digest,
            changed: r.changed,
            removed: r.removed,
            anomalies: r.anomalies,
            reason: r.reason,
            prev_hash: r.prev_hash,
            hash: r.hash,
        }
    }
}

/// An `audit_verifications` row.
#[derive(Debug)]
pub(crate) struct VerificationRow {
    id: String,
    started_at: i64,
    finished_at: i64,
    namespace: Option<String>,
    chains: i64,
    failures: i64,
    first_failure: Option<String>,
    checkpoint_id: Option<i64>,
}

impl From<VerificationRow> for Verification {
    fn from(r: VerificationRow) -> Self {
        Self {
            id: r.id,
            started_at: r.started_at,
            finished_at: r.finished_at,
            namespace: r.namespace,
            chains: r.chains,
            failures: r.failures,
            first_failure: r.first_failure,
            checkpoint_id: r.checkpoint_id,
        }
    }
}

/// A retention candidate.
#[derive(Debug)]
pub(crate) struct StampRow {
    namespace: String,
    run_key: String,
    version: i64,
    state: String,
    updated_at: i64,
}

impl From<StampRow> for RunStamp {
    fn from(r: StampRow) -> Self {
        Self {
            namespace: r.namespace,
            key: r.run_key,
            version: r.version,
            state: r.state,
            updated_at: r.updated_at,
        }
    }
}

from_columns! { HeadScanRow { namespace, run_key, src, seq, head } }

from_columns! {
    AuditScanRow {
        namespace, run_key, src, seq, kind, actor, from_state, to_state, version, detail, prev_hash,
        hash, created_at, archived_at, body,
    }
}

from_columns! {
    CheckpointRow {
        id, created_at, chain_count, digest, changed, removed, anomalies, reason, prev_hash, hash,
    }
}

from_columns! {
    VerificationRow {
        id, started_at, finished_at, namespace, chains, failures, first_failure, checkpoint_id,
    }
}

from_columns! { StampRow { namespace, run_key, version, state, updated_at } }
