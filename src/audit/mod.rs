//! The append-only audit log.
//!
//! Every claim and move writes one [`AuditEntry`] in the same transaction as
//! the state change. Each key's entries form a hash chain: entry `n` stores
//! the hash of entry `n-1` and its own hash over that and its canonical
//! content, and the run row holds the chain's head (`audit_seq`,
//! `audit_head`). An edited, deleted or truncated entry breaks the chain.
//!
//! - [`checkpoint`]: periodic digests over every chain head, themselves
//!   chained, so a deleted key is detected too.
//! - [`verify`]: walks every chain, head and checkpoint and names the first
//!   bad row (`oncegate audit verify`).
//! - [`redact`]: configured fields replaced before anything is stored.
//! - [`timeline`]: one key's history, arranged to answer "did we process
//!   it, did we send, who approved, which model drafted".

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::canonical;
use crate::clock::Millis;

mod chain;
pub mod checkpoint;
pub mod port;
pub mod redact;
pub mod seals;
pub mod timeline;
pub mod verify;

pub use checkpoint::{write_checkpoint, CheckpointReason, CheckpointReport, SYSTEM_NAMESPACE};
pub use redact::{RedactionRule, Redactor};
pub use verify::{check_one, verify, ChainAnchor, Finding, ScanRow, Verification, VerifyReport};

/// `[audit]`: the periodic integrity work inside `serve`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// Seconds between checkpoints over every chain head (0: none).
    pub checkpoint_interval_secs: u64,
    /// Seconds between full verifications (0: only `oncegate audit verify`).
    pub verify_interval_secs: u64,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            checkpoint_interval_secs: 600,
            verify_interval_secs: 86_400,
        }
    }
}

/// One audit event about a run, before it is chained.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditEntry {
    /// The run's namespace.
    pub namespace: String,
    /// The run's key.
    pub key: String,
    /// Position in the key's chain, from 1.
    pub seq: i64,
    /// What happened (`claim`, `complete`, …).
    pub kind: String,
    /// The token subject or component that caused it.
    pub actor: String,
    /// The state before, if the run existed.
    pub from_state: Option<String>,
    /// The state after.
    pub to_state: Option<String>,
    /// The fencing version after.
    pub version: Option<i64>,
    /// Event details, already redacted.
    pub detail: Value,
    /// When it happened.
    pub created_at: Millis,
}

impl AuditEntry {
    /// An entry that moves no run (a system event, a note on a key): no
    /// states before or after, no version.
    pub fn unmoved(
        namespace: &str,
        key: &str,
        seq: i64,
        kind: &str,
        actor: &str,
        detail: Value,
        created_at: Millis,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            key: key.into(),
            seq,
            kind: kind.into(),
            actor: actor.into(),
            from_state: None,
            to_state: None,
            version: None,
            detail,
            created_at,
        }
    }

    /// The hash of this entry chained onto `prev_hash` (None for the first):
    /// SHA-256 over the previous hash, a newline, and the entry's RFC 8785
    /// canonical JSON (its members in key order, written directly: this runs
    /// on every claim and move).
    pub fn chain_hash(&self, prev_hash: Option<&str>) -> String {
        let mut body = Vec::with_capacity(256);
        body.extend_from_slice(b"{\"actor\":");
        canonical::str_into(&mut body, &self.actor);
        body.extend_from_slice(b",\"created_at\":");
        canonical::int_into(&mut body, self.created_at);
        body.extend_from_slice(b",\"detail\":");
        let detail_at = body.len();
        if canonical::value_into(&mut body, &self.detail).is_err() {
            // Only an arbitrary-precision number could get here; hash
            // serde's form of the detail rather than panic.
            body.truncate(detail_at);
            body.extend_from_slice(self.detail.to_string().as_bytes());
        }
        body.extend_from_slice(b",\"from_state\":");
        opt_str_into(&mut body, self.from_state.as_deref());
        body.extend_from_slice(b",\"key\":");
        canonical::str_into(&mut body, &self.key);
        body.extend_from_slice(b",\"kind\":");
        canonical::str_into(&mut body, &self.kind);
        body.extend_from_slice(b",\"namespace\":");
        canonical::str_into(&mut body, &self.namespace);
        body.extend_from_slice(b",\"seq\":");
        canonical::int_into(&mut body, self.seq);
        body.extend_from_slice(b",\"to_state\":");
        opt_str_into(&mut body, self.to_state.as_deref());
        body.extend_from_slice(b",\"version\":");
        match self.version {
            Some(v) => canonical::int_into(&mut body, v),
            None => body.extend_from_slice(b"null"),
        }
        body.push(b'}');
        let mut hasher = Sha256::new();
        hasher.update(prev_hash.unwrap_or("").as_bytes());
        hasher.update(b"\n");
        hasher.update(&body);
        format!("sha256:{}", hex::encode(hasher.finalize()))
    }
}

fn opt_str_into(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => canonical::str_into(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// A stored audit event with its chain links.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRecord {
    /// The event.
    #[serde(flatten)]
    pub entry: AuditEntry,
    /// The previous entry's hash, if any.
    pub prev_hash: Option<String>,
    /// This entry's hash.
    pub hash: String,
}

/// Checks one key's chain, in sequence order.
///
/// # Errors
/// The sequence number of the first entry whose link or hash is wrong.
pub fn verify_chain(records: &[AuditRecord]) -> Result<(), i64> {
    let mut prev: Option<&str> = None;
    for (i, record) in records.iter().enumerate() {
        let expected_seq = i as i64 + 1;
        if record.entry.seq != expected_seq
            || record.prev_hash.as_deref() != prev
            || record.entry.chain_hash(prev) != record.hash
        {
            return Err(expected_seq);
        }
        prev = Some(&record.hash);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entry(seq: i64, kind: &str) -> AuditEntry {
        AuditEntry {
            namespace: "ns".into(),
            key: "k".into(),
            seq,
            kind: kind.into(),
            actor: "tester".into(),
            from_state: None,
            to_state: Some("processing".into()),
            version: Some(seq),
            detail: json!({"attempt": seq}),
            created_at: 1_000 + seq,
        }
    }

    fn chain(kinds: &[&str]) -> Vec<AuditRecord> {
        let mut prev: Option<String> = None;
        kinds
            .iter()
            .enumerate()
            .map(|(i, kind)| {
                let entry = entry(i as i64 + 1, kind);
                let hash = entry.chain_hash(prev.as_deref());
                let record = AuditRecord {
                    entry,
                    prev_hash: prev.clone(),
                    hash: hash.clone(),
                };
                prev = Some(hash);
                record
            })
            .collect()
    }

    #[test]
    fn intact_chain_verifies() {
        assert_eq!(
            verify_chain(&chain(&["claim", "renew", "complete"])),
            Ok(())
        );
    }

    #[test]
    fn edited_or_deleted_entries_are_found() {
        let mut edited = chain(&["claim", "renew", "complete"]);
        edited[1].entry.actor = "mallory".into();
        assert_eq!(verify_chain(&edited), Err(2));

        let mut deleted = chain(&["claim", "renew", "complete"]);
        deleted.remove(1);
        assert_eq!(verify_chain(&deleted), Err(2));
    }

    /// The hash as every stored chain was written before the direct writer:
    /// serde_json_canonicalizer over the entry as a JSON object.
    fn hash_via_the_crate(e: &AuditEntry, prev: Option<&str>) -> String {
        let body = json!({
            "namespace": e.namespace, "key": e.key, "seq": e.seq, "kind": e.kind,
            "actor": e.actor, "from_state": e.from_state, "to_state": e.to_state,
            "version": e.version, "detail": e.detail, "created_at": e.created_at,
        });
        let canonical = serde_json_canonicalizer::to_vec(&body).expect("canonical");
        let mut hasher = Sha256::new();
        hasher.update(prev.unwrap_or("").as_bytes());
        hasher.update(b"\n");
        hasher.update(&canonical);
        format!("sha256:{}", hex::encode(hasher.finalize()))
    }

    #[test]
    fn chain_hash_is_the_canonical_form_stored_chains_were_written_with() {
        let odd = "k\"\\\n\u{1}é\u{1f600}/";
        let mut cases = vec![entry(1, "claim"), entry(2, "complete")];
        cases.push(AuditEntry {
            from_state: Some("processing".into()),
            to_state: None,
            version: None,
            detail: json!({"z": [1.5, null, {"\u{e000}": 1, "\u{1f600}": 2}], "a": odd, "n": 9_007_199_254_740_993_u64}),
            ..entry(3, odd)
        });
        cases.push(AuditEntry::unmoved(
            odd,
            odd,
            i64::MAX,
            odd,
            odd,
            json!(null),
            i64::MIN,
        ));
        cases.push(AuditEntry::unmoved("ns", "", 0, "", "", json!([]), 0));
        for e in &cases {
            for prev in [None, Some("sha256:00")] {
                assert_eq!(e.chain_hash(prev), hash_via_the_crate(e, prev), "{e:?}");
            }
        }
    }
}
