//! `oncegate audit verify`: walks every chain, every run head and the
//! latest checkpoint, and names the first bad row of each broken chain.
//!
//! One streamed statement returns, per key and in one consistent snapshot,
//! the run row's head, the latest checkpoint's head and the events in
//! sequence order, so a verify running beside a live service never
//! mistakes a write in flight for a deletion.

use futures_util::StreamExt;
use serde::Serialize;

use super::checkpoint::{Checkpoint, HeadDigest, SYSTEM_NAMESPACE};
use super::{AuditEntry, AuditRecord};
use crate::clock::Millis;
use crate::store::{Result, Store};

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
}

impl ScanRow {
    fn key(&self) -> (&str, &str) {
        match self {
            Self::Run { namespace, key, .. } | Self::Checkpointed { namespace, key, .. } => {
                (namespace, key)
            }
            Self::Event(r) => (&r.entry.namespace, &r.entry.key),
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
}

impl VerifyReport {
    /// Whether everything verified.
    pub fn ok(&self) -> bool {
        self.failures == 0
    }

    fn push(&mut self, finding: Finding) {
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
/// [`crate::store::StoreError`] when the database cannot be read.
pub async fn verify(store: &dyn Store, namespace: Option<&str>) -> Result<VerifyReport> {
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

/// A chain's anchors outside its events: the run row's head and the
/// latest checkpoint's entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainAnchor {
    /// The run row's `(audit_seq, audit_head, archived_at)`, if a run exists.
    pub run: Option<(i64, Option<String>, Option<Millis>)>,
    /// The latest checkpoint's `(id, seq, head)` for the key, if recorded.
    pub checkpointed: Option<(i64, i64, String)>,
}

/// The first bad row of one key's chain, if any.
pub fn check_one(
    namespace: &str,
    key: &str,
    events: Vec<AuditRecord>,
    anchor: &ChainAnchor,
) -> Option<Finding> {
    let mut chain = Chain::new(namespace, key);
    chain.events = events;
    chain.run = anchor.run.clone();
    chain.checkpointed = anchor
        .checkpointed
        .as_ref()
        .map(|(_, s, h)| (*s, h.clone()));
    let checkpoint_id = anchor.checkpointed.as_ref().map_or(0, |c| c.0);
    check_events(&chain)
        .or_else(|| chain.check_run_head())
        .or_else(|| chain.check_checkpointed(checkpoint_id))
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
    store: &dyn Store,
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

/// One key's rows from the scan.
#[derive(Debug, Default)]
struct Chain {
    started: bool,
    namespace: String,
    key: String,
    run: Option<(i64, Option<String>, Option<Millis>)>,
    checkpointed: Option<(i64, String)>,
    events: Vec<AuditRecord>,
}

impl Chain {
    fn new(namespace: &str, key: &str) -> Self {
        Self {
            started: true,
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            ..Self::default()
        }
    }

    fn add(&mut self, row: ScanRow) {
        match row {
            ScanRow::Run {
                seq,
                head,
                archived_at,
                ..
            } => self.run = Some((seq, head, archived_at)),
            ScanRow::Checkpointed { seq, head, .. } => self.checkpointed = Some((seq, head)),
            ScanRow::Event(record) => self.events.push(record),
        }
    }

    fn finding(&self, table: &str, row: Option<i64>, problem: String) -> Finding {
        Finding {
            table: table.into(),
            namespace: self.namespace.clone(),
            key: self.key.clone(),
            row,
            problem,
        }
    }

    fn finish(self, latest: Option<&Checkpoint>, report: &mut VerifyReport) {
        report.chains += 1;
        report.events += self.events.len() as i64;
        let checkpoint_id = latest.map_or(0, |c| c.id);
        let found = check_events(&self)
            .or_else(|| self.check_run_head())
            .or_else(|| self.check_checkpointed(checkpoint_id));
        if let Some(f) = found {
            report.push(f);
        }
    }

    fn check_run_head(&self) -> Option<Finding> {
        let last = self.events.last();
        let Some((seq, head, archived_at)) = &self.run else {
            if self.namespace != SYSTEM_NAMESPACE && !self.events.is_empty() {
                return Some(self.finding(
                    "runs",
                    None,
                    format!(
                        "the run row is missing (deleted) while {} audit event(s) remain",
                        self.events.len()
                    ),
                ));
            }
            return None;
        };
        let Some(last) = last else {
            if archived_at.is_some() || *seq == 0 {
                return None;
            }
            return Some(self.finding(
                "audit_events",
                Some(1),
                format!("every event is missing (deleted): the run row's head is seq {seq}"),
            ));
        };
        let last_seq = last.entry.seq;
        if last_seq < *seq {
            return Some(self.finding("audit_events", Some(last_seq + 1), format!(
                "missing (deleted): the run row's head is seq {seq} ({}) but the last event is seq {last_seq}",
                head.as_deref().unwrap_or("none")
            )));
        }
        if last_seq > *seq {
            return Some(self.finding("runs", None, format!(
                "the run row's head (seq {seq}) is behind its last event (seq {last_seq}): the run row was edited"
            )));
        }
        if head.as_deref() != Some(last.hash.as_str()) {
            return Some(self.finding("audit_events", Some(last_seq), format!(
                "its hash differs from the run row's head {}: the event or the run row was replaced",
                head.as_deref().unwrap_or("(none)")
            )));
        }
        None
    }

    fn check_checkpointed(&self, checkpoint_id: i64) -> Option<Finding> {
        let (seq, head) = self.checkpointed.as_ref()?;
        if self.run.is_none() && self.events.is_empty() {
            return Some(self.finding("runs", None, format!(
                "missing (deleted): checkpoint {checkpoint_id} recorded this key at seq {seq}, now neither its run nor its events exist"
            )));
        }
        if let Some(event) = self.events.iter().find(|e| e.entry.seq == *seq) {
            if event.hash != *head {
                return Some(self.finding("audit_events", Some(*seq), format!(
                    "its hash differs from checkpoint {checkpoint_id}'s head for this key: rewritten after the checkpoint"
                )));
            }
            return None;
        }
        match &self.run {
            Some((run_seq, run_head, Some(_))) if self.events.is_empty() => {
                if run_seq < seq || (run_seq == seq && run_head.as_deref() != Some(head.as_str())) {
                    return Some(self.finding("runs", None, format!(
                        "the tombstone's head (seq {run_seq}) does not extend checkpoint {checkpoint_id}'s (seq {seq})"
                    )));
                }
                None
            }
            _ => Some(self.finding(
                "audit_events",
                Some(*seq),
                format!(
                    "missing (deleted): checkpoint {checkpoint_id} recorded it as this key's head"
                ),
            )),
        }
    }
}

/// Each event against its sequence number, its stored link and its hash.
fn check_events(chain: &Chain) -> Option<Finding> {
    let mut prev: Option<&AuditRecord> = None;
    for (i, record) in chain.events.iter().enumerate() {
        let expected = i as i64 + 1;
        let seq = record.entry.seq;
        if seq != expected {
            let missing = if seq == expected + 1 {
                format!("seq {expected} is")
            } else {
                format!("seqs {expected}..={} are", seq - 1)
            };
            return Some(chain.finding(
                "audit_events",
                Some(expected),
                format!("missing (deleted): {missing} gone and the chain resumes at seq {seq}"),
            ));
        }
        if !self_consistent(&record.entry, record) {
            return Some(chain.finding(
                "audit_events",
                Some(seq),
                "its content does not match its hash (the row was edited)".into(),
            ));
        }
        let linked = record.prev_hash.as_deref() == prev.map(|p| p.hash.as_str());
        if !linked {
            return Some(match prev {
                Some(p) => chain.finding(
                    "audit_events",
                    Some(p.entry.seq),
                    format!("rewritten: its hash is not the one seq {seq} chained to"),
                ),
                None => chain.finding(
                    "audit_events",
                    Some(seq),
                    "the first event links to a predecessor that does not exist".into(),
                ),
            });
        }
        prev = Some(record);
    }
    None
}

fn self_consistent(entry: &AuditEntry, record: &AuditRecord) -> bool {
    entry.chain_hash(record.prev_hash.as_deref()) == record.hash
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chain(n: i64) -> Chain {
        let mut c = Chain::new("ns", "k");
        let mut prev: Option<String> = None;
        for seq in 1..=n {
            let entry = AuditEntry {
                namespace: "ns".into(),
                key: "k".into(),
                seq,
                kind: "claim".into(),
                actor: "t".into(),
                from_state: None,
                to_state: Some("processing".into()),
                version: Some(seq),
                detail: json!({}),
                created_at: seq,
            };
            let hash = entry.chain_hash(prev.as_deref());
            c.events.push(AuditRecord {
                entry,
                prev_hash: prev.clone(),
                hash: hash.clone(),
            });
            prev = Some(hash);
        }
        c.run = Some((n, prev, None));
        c
    }

    fn first(c: &Chain) -> Option<(String, Option<i64>)> {
        check_events(c)
            .or_else(|| c.check_run_head())
            .or_else(|| c.check_checkpointed(1))
            .map(|f| (f.table, f.row))
    }

    #[test]
    fn names_the_first_bad_row() {
        assert_eq!(first(&chain(3)), None);
        let mut edited = chain(3);
        edited.events[1].entry.actor = "mallory".into();
        assert_eq!(first(&edited), Some(("audit_events".into(), Some(2))));
        let mut rehashed = chain(3);
        rehashed.events[1].entry.actor = "mallory".into();
        rehashed.events[1].hash = rehashed.events[1]
            .entry
            .chain_hash(rehashed.events[1].prev_hash.as_deref());
        assert_eq!(first(&rehashed), Some(("audit_events".into(), Some(2))));
        let mut middle = chain(3);
        middle.events.remove(1);
        assert_eq!(first(&middle), Some(("audit_events".into(), Some(2))));
        let mut last = chain(3);
        last.events.pop();
        assert_eq!(first(&last), Some(("audit_events".into(), Some(3))));
        let mut gone = chain(2);
        gone.checkpointed = Some((2, gone.events[1].hash.clone()));
        gone.events.clear();
        gone.run = None;
        assert_eq!(first(&gone), Some(("runs".into(), None)));
    }
}
