//! One key's chain against its anchors: each event against its sequence
//! number, stored link and hash; the tail against the run row's head; the
//! chain against the latest checkpoint's entry. Names the first bad row.

use super::checkpoint::Checkpoint;
use super::checkpoint::SYSTEM_NAMESPACE;
use super::verify::{Finding, VerifyReport};
use super::{AuditEntry, AuditRecord};
use crate::clock::Millis;

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

/// One key's rows from the scan.
#[derive(Debug, Default)]
pub(super) struct Chain {
    pub(super) started: bool,
    pub(super) namespace: String,
    pub(super) key: String,
    run: Option<(i64, Option<String>, Option<Millis>)>,
    checkpointed: Option<(i64, String)>,
    events: Vec<AuditRecord>,
    effects: Vec<super::seals::StoredEffect>,
}

impl Chain {
    pub(super) fn new(namespace: &str, key: &str) -> Self {
        Self {
            started: true,
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            ..Self::default()
        }
    }

    pub(super) fn add(&mut self, row: super::ScanRow) {
        match row {
            super::ScanRow::Run {
                seq,
                head,
                archived_at,
                ..
            } => self.run = Some((seq, head, archived_at)),
            super::ScanRow::Checkpointed { seq, head, .. } => self.checkpointed = Some((seq, head)),
            super::ScanRow::Event(record) => self.events.push(record),
            super::ScanRow::Effect(effect) => self.effects.push(effect),
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

    pub(super) fn finish(self, latest: Option<&Checkpoint>, report: &mut VerifyReport) {
        report.chains += 1;
        report.events += self.events.len() as i64;
        let checkpoint_id = latest.map_or(0, |c| c.id);
        let found = check_events(&self)
            .or_else(|| self.check_run_head())
            .or_else(|| self.check_checkpointed(checkpoint_id));
        match found {
            Some(f) => report.push(f),
            // Seals are read from a chain that verified.
            None => super::seals::check_effects(
                &self.namespace,
                &self.key,
                &self.events,
                &self.effects,
                report,
            ),
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
