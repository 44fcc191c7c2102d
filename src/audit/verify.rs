//! `oncegate audit verify`: walks every chain, every run head and the
//! latest checkpoint, and names the first bad row of each broken chain.
//!
//! One streamed statement returns, per key and in one consistent snapshot,
//! the run row's head, the latest checkpoint's head and the events in
//! sequence order, so a verify running beside a live service never
//! mistakes a write in flight for a deletion.

use futures_util::StreamExt;
use serde::Serialize;

use super::chain::Chain;
pub use super::chain::{check_one, ChainAnchor};
use super::checkpoint::{Checkpoint, HeadDigest};
use super::port::AuditStore;
use super::seals::StoredEffect;
use super::AuditRecord;
use crate::clock::Millis;
use crate::ledger::storage::Result;

/// One row of the verification scan.
#[derive(Debug, Clone, PartialEq)]
pub enum ScanRow {
    /// A run row's chain head.
    Run {
        /// Namespace.
        namespace: String,
        /// Key.
        key: String,
        /// `audit_seq`.
        seq: i64,
        /// `audit_head`.
        head: Option<String>,
        /// Set on a tombstone (its events went to the archive).
        archived_at: Option<Millis>,
    },
    /// The latest checkpoint's head for the key.
    Checkpointed {
        /// Namespace.
        namespace: String,
        /// Key.
        key: String,
        /// Sequence number.
        seq: i64,
        /// Hash.
        head: String,
    },
    /// One audit event.
    Event(AuditRecord),
    /// One of the key's effects, sealed again from its row.
    Effect(StoredEffect),
}

impl ScanRow {
    fn key(&self) -> (&str, &str) {
        match self {
            Self::Run { namespace, key, .. } | Self::Checkpointed { namespace, key, .. } => {
                (namespace, key)
            }
            Self::Event(r) => (&r.entry.namespace, &r.entry.key),
            Self::Effect(e) => (&e.namespace, &e.key),
        }
    }
}

/// A bad row, named precisely.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The table holding (or that should hold) the bad row.
    pub table: String,
    /// The chain's namespace (empty for checkpoint findings).
    pub namespace: String,
    /// The chain's key (empty for checkpoint findings).
    pub key: String,
    /// The event sequence number or checkpoint id, when one row is meant.
    pub row: Option<i64>,
    /// What is wrong.
    pub problem: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.table)?;
        if !self.namespace.is_empty() || !self.key.is_empty() {
            write!(f, " namespace={} key={}", self.namespace, self.key)?;
        }
        match (self.table.as_str(), self.row) {
            ("audit_checkpoints", Some(id)) => write!(f, " id={id}")?,
            (_, Some(seq)) => write!(f, " seq={seq}")?,
            _ => {}
        }
        write!(f, ": {}", self.problem)
    }
}

/// What a verification found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct VerifyReport {
    /// Chains walked.
    pub chains: i64,
    /// Events checked.
    pub events: i64,
    /// The latest checkpoint, if any.
    pub checkpoint_id: Option<i64>,
    /// Every problem found (the first bad row of each chain), up to 1000.
    pub findings: Vec<Finding>,
    /// How many problems in all.
    pub failures: i64,
    /// Effects whose chain holds no seal for them (queued before seals
    /// were recorded); not a failure.
    pub unsealed_effects: i64,
}

impl VerifyReport {
    /// Whether everything verified.
    pub fn ok(&self) -> bool {
        self.failures == 0
    }

    pub(super) fn push(&mut self, finding: Finding) {
        self.failures += 1;
        if self.findings.len() < 1000 {
            self.findings.push(finding);
        }
    }
}

/// A stored verification result (for metrics and the runbook).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verification {
    /// UUID v7.
    pub id: String,
    /// When it started.
    pub started_at: Millis,
    /// When it finished.
    pub finished_at: Millis,
    /// The namespace it was limited to, if any.
    pub namespace: Option<String>,
    /// Chains walked.
    pub chains: i64,
    /// Problems found.
    pub failures: i64,
    /// The first problem, in words.
    pub first_failure: Option<String>,
    /// The latest checkpoint it checked against.
    pub checkpoint_id: Option<i64>,
}

impl Verification {
    /// The record of `report`.
    pub fn of(
        report: &VerifyReport,
        namespace: Option<&str>,
        started_at: Millis,
        finished_at: Millis,
    ) -> Self {
        Self {
            id: uuid::Uuid::now_v7().to_string(),
            started_at,
            finished_at,
            namespace: namespace.map(str::to_owned),
            chains: report.chains,
            failures: report.failures,
            first_failure: report.findings.first().map(ToString::to_string),
            checkpoint_id: report.checkpoint_id,
        }
    }
}

/// Verifies every chain (or one namespace's) and the checkpoints.
///
/// # Errors
/// [`crate::ledger::storage::StoreError`] when the database cannot be read.
pub async fn verify(store: &dyn AuditStore, namespace: Option<&str>) -> Result<VerifyReport> {
    let mut report = VerifyReport::default();
    let checkpoints = store.checkpoints().await?;
    check_checkpoints(&checkpoints, &mut report);
    let latest = checkpoints.last();
    report.checkpoint_id = latest.map(|c| c.id);
    if let Some(latest) = latest {
        check_head_list(store, latest, &mut report).await?;
    }
    let mut rows = store.audit_scan(namespace);
    let mut group = Chain::default();
    while let Some(row) = rows.next().await {
        let row = row?;
        let (ns, key) = row.key();
        if group.namespace != ns || group.key != key {
            if group.started {
                group.finish(latest, &mut report);
            }
            group = Chain::new(ns, key);
        }
        group.add(row);
    }
    if group.started {
        group.finish(latest, &mut report);
    }
    Ok(report)
}

/// The checkpoint chain: consecutive ids, links, and each row's own hash.
fn check_checkpoints(checkpoints: &[Checkpoint], report: &mut VerifyReport) {
    let mut prev: Option<&Checkpoint> = None;
    for c in checkpoints {
        let bad = |problem: String| Finding {
            table: "audit_checkpoints".into(),
            namespace: String::new(),
            key: String::new(),
            row: Some(c.id),
            problem,
        };
        let expected_id = prev.map_or(1, |p| p.id + 1);
        if c.id != expected_id {
            report.push(bad(format!(
                "checkpoint(s) {expected_id}..{} are missing (deleted)",
                c.id - 1
            )));
            return;
        }
        if c.prev_hash.as_deref() != prev.map(|p| p.hash.as_str()) {
            report.push(bad(
                "its prev_hash does not match the previous checkpoint's hash".into(),
            ));
            return;
        }
        if c.compute_hash() != c.hash {
            report.push(bad("its fields do not match its hash (edited)".into()));
            return;
        }
        prev = Some(c);
    }
}

/// The latest checkpoint's head list against its digest.
async fn check_head_list(
    store: &dyn AuditStore,
    latest: &Checkpoint,
    report: &mut VerifyReport,
) -> Result<()> {
    let mut digest = HeadDigest::default();
    let mut heads = store.checkpointed_heads();
    while let Some(head) = heads.next().await {
        let h = head?;
        digest.add(&h.namespace, &h.key, h.seq, &h.head);
    }
    let count = digest.count();
    if count != latest.chain_count || digest.finish() != latest.digest {
        let detail = match latest.chain_count - count {
            0 => "a head was edited".to_owned(),
            n if n > 0 => format!("{n} head(s) were deleted"),
            n => format!("{} head(s) were added", -n),
        };
        report.push(Finding {
            table: "audit_heads".into(),
            namespace: String::new(),
            key: String::new(),
            row: None,
            problem: format!(
                "the head list no longer matches checkpoint {}'s digest ({} heads recorded, {count} found: {detail})",
                latest.id, latest.chain_count
            ),
        });
    }
    Ok(())
}
