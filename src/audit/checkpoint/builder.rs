//! The new head list, built while the head scan streams past: each chain's
//! current head against its checkpointed one, the digest over the kept
//! heads, and the moved heads handed on in chunks to be staged.

use std::collections::HashSet;

use futures_util::StreamExt;

use super::{Anomaly, ChainHead, HeadDigest, STAGE_CHUNK};
use crate::audit::port::AuditStore;
use crate::ledger::storage::Result;

/// How many anomalies a report lists (all are counted).
const ANOMALY_SAMPLES: usize = 100;

/// The new head list, built while the head scan streams past.
pub(super) struct Builder<'a> {
    pub(super) removals: &'a HashSet<(String, String)>,
    pub(super) digest: HeadDigest,
    /// Moved heads not staged yet.
    pub(super) upserts: Vec<ChainHead>,
    /// Moved heads, staged or not.
    pub(super) changed: i64,
    pub(super) anomalies: Vec<Anomaly>,
    pub(super) anomaly_count: i64,
}

impl Builder<'_> {
    pub(super) fn chain(
        &mut self,
        namespace: &str,
        key: &str,
        now: Option<(i64, String)>,
        old: Option<(i64, String)>,
    ) {
        if self
            .removals
            .contains(&(namespace.to_owned(), key.to_owned()))
        {
            return;
        }
        let keep = match (now, old) {
            (None, None) => return,
            (Some(now), None) => {
                self.upsert(namespace, key, &now);
                now
            }
            (None, Some(old)) => {
                self.anomaly(namespace, key, format!("vanished: the last checkpoint has it at seq {}, now neither its run nor its events exist", old.0));
                old
            }
            (Some(now), Some(old)) if now.0 > old.0 => {
                self.upsert(namespace, key, &now);
                now
            }
            (Some(now), Some(old)) if now == old => old,
            (Some(now), Some(old)) => {
                self.anomaly(
                    namespace,
                    key,
                    format!(
                        "went backwards: the last checkpoint has seq {} ({}), now seq {} ({})",
                        old.0, old.1, now.0, now.1
                    ),
                );
                old
            }
        };
        self.digest.add(namespace, key, keep.0, &keep.1);
    }

    fn upsert(&mut self, namespace: &str, key: &str, head: &(i64, String)) {
        self.changed += 1;
        self.upserts.push(ChainHead {
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            seq: head.0,
            head: head.1.clone(),
        });
    }

    fn anomaly(&mut self, namespace: &str, key: &str, problem: String) {
        self.anomaly_count += 1;
        if self.anomalies.len() < ANOMALY_SAMPLES {
            self.anomalies.push(Anomaly {
                namespace: namespace.to_owned(),
                key: key.to_owned(),
                problem,
            });
        }
    }
}

/// Streams the head scan through a [`Builder`], sending the moved heads to
/// `chunks` [`STAGE_CHUNK`] at a time (the last chunk may be shorter).
pub(super) async fn scan_heads<'a, S: AuditStore + ?Sized>(
    store: &S,
    removals: &'a HashSet<(String, String)>,
    chunks: tokio::sync::mpsc::Sender<Vec<ChainHead>>,
) -> Result<Builder<'a>> {
    let mut builder = Builder {
        removals,
        digest: HeadDigest::default(),
        upserts: Vec::new(),
        changed: 0,
        anomalies: Vec::new(),
        anomaly_count: 0,
    };
    let mut rows = store.head_scan();
    let mut current: Option<(String, String)> = None;
    let (mut now_head, mut old_head) = (None, None);
    loop {
        let row = rows.next().await.transpose()?;
        let next = row.as_ref().map(|r| (r.namespace.clone(), r.key.clone()));
        if next.is_none() || current != next {
            if let Some((ns, key)) = current.take() {
                builder.chain(&ns, &key, now_head.take(), old_head.take());
            }
            let full = builder.upserts.len() >= STAGE_CHUNK;
            if (full || next.is_none()) && !builder.upserts.is_empty() {
                let chunk = std::mem::take(&mut builder.upserts);
                if chunks.send(chunk).await.is_err() {
                    // The stager stopped on an error, which it returns.
                    break;
                }
            }
            current = next;
        }
        let Some(row) = row else { break };
        let head = (row.seq, row.head.unwrap_or_default());
        if row.checkpointed {
            old_head = Some(head);
        } else {
            now_head = Some(head);
        }
    }
    Ok(builder)
}
