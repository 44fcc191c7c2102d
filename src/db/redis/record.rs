//! A run as the Redis tier stores it: one JSON string per run, under a
//! key that names its namespace and key (the value holds neither).
//!
//! The Lua scripts read and rewrite the value with Redis's `cjson`, so
//! every field they touch is a string, `null` or an integer below 10^14
//! (cjson prints numbers with 14 significant digits); the owner's result
//! is kept as JSON *text*, so cjson never reorders or renumbers it. Short
//! field names keep each key small (docs/redis.md gives the cost).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock::Millis;
use crate::ledger::storage::{Result, StoreError};
use crate::ledger::{
    ClaimRequest, FencingVersion, IdempotencyKey, Lease, LeaseOwner, Namespace, PayloadHash, Run,
    RunMetadata, RunState,
};

/// The stored value.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Record {
    /// State.
    s: String,
    /// Previous state.
    #[serde(default)]
    ps: Option<String>,
    /// Payload hash.
    h: String,
    /// Lease owner (32 hex digits) while `processing`.
    #[serde(default)]
    o: Option<String>,
    /// Fencing version.
    v: i64,
    /// Lease expiry.
    #[serde(default)]
    e: Option<Millis>,
    /// Lease start.
    #[serde(default)]
    ls: Option<Millis>,
    /// Attempts.
    a: i64,
    /// Reclaims.
    r: i64,
    /// The result, as JSON text.
    #[serde(default)]
    res: Option<String>,
    /// Last error.
    #[serde(default)]
    err: Option<String>,
    /// Reason.
    #[serde(default)]
    why: Option<String>,
    /// Metadata.
    #[serde(default)]
    m: Meta,
    /// Claimed by.
    cb: String,
    /// Created at.
    c: Millis,
    /// Updated at.
    u: Millis,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Meta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    op: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    wv: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    src: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ex: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    by: Option<String>,
}

/// What a reclaim may change beyond the lease (as the SQL claim does:
/// the claimer, and the execution ref and workflow version it names).
#[derive(Debug, Serialize)]
pub(super) struct ReclaimFields<'a> {
    cb: &'a str,
    ex: Option<&'a str>,
    wv: Option<&'a str>,
}

impl<'a> ReclaimFields<'a> {
    pub(super) fn of(req: &'a ClaimRequest) -> Self {
        Self {
            cb: &req.claimed_by,
            ex: req.metadata.execution_ref.as_deref(),
            wv: req.metadata.workflow_version.as_deref(),
        }
    }
}

/// What an owner's move out of `processing` writes besides the state
/// (as the SQL finish does: each field replaced, `null` when absent).
#[derive(Debug, Serialize)]
pub(super) struct FinishFields<'a> {
    pub(super) res: Option<String>,
    pub(super) err: Option<&'a str>,
    pub(super) why: Option<&'a str>,
}

impl Record {
    /// A new run for `req`, claimed at `now` by `owner`.
    pub(super) fn new_claim(req: &ClaimRequest, owner: LeaseOwner, now: Millis) -> Self {
        let m = &req.metadata;
        Self {
            s: RunState::Processing.as_str().into(),
            ps: None,
            h: req.payload_hash.to_string(),
            o: Some(owner.to_hex()),
            v: FencingVersion::FIRST.get(),
            e: Some(now + req.lease_ms),
            ls: Some(now),
            a: 1,
            r: 0,
            res: None,
            err: None,
            why: None,
            m: Meta {
                op: m.operation.clone(),
                cid: Some(req.correlation_id()),
                wv: m.workflow_version.clone(),
                src: m.source_url.clone(),
                ex: m.execution_ref.clone(),
                by: m.requested_by.clone(),
            },
            cb: req.claimed_by.clone(),
            c: now,
            u: now,
        }
    }

    /// The stored text.
    pub(super) fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads stored text back.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when the text is not a record.
    pub(super) fn decode(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| StoreError::corrupt(format!("redis run: {e}")))
    }

    /// The run this record holds, under `namespace` and `key`.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when a field does not read back.
    pub(super) fn to_run(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Run> {
        let state = |s: &str| {
            s.parse::<RunState>()
                .map_err(|_| StoreError::corrupt(format!("redis run state {s:?}")))
        };
        let version = FencingVersion::new(self.v).map_err(StoreError::corrupt)?;
        let lease = match &self.o {
            Some(owner) => Some(Lease {
                owner: LeaseOwner::from_hex(owner).map_err(StoreError::corrupt)?,
                version,
            }),
            None => None,
        };
        let result = match &self.res {
            Some(text) => Some(
                serde_json::from_str::<Value>(text)
                    .map_err(|e| StoreError::corrupt(format!("redis run result: {e}")))?,
            ),
            None => None,
        };
        Ok(Run {
            namespace: namespace.clone(),
            key: key.clone(),
            business_key: None,
            state: state(&self.s)?,
            prev_state: self.ps.as_deref().map(state).transpose()?,
            payload_hash: PayloadHash::parse(self.h.clone()).map_err(StoreError::corrupt)?,
            lease,
            lease_expires_at: self.e,
            lease_started_at: self.ls,
            version,
            attempts: self.a,
            reclaims: self.r,
            budget_started_at: None,
            result,
            last_error: self.err.clone(),
            reason: self.why.clone(),
            metadata: RunMetadata {
                operation: self.m.op.clone(),
                correlation_id: self.m.cid.clone(),
                workflow_version: self.m.wv.clone(),
                source_url: self.m.src.clone(),
                execution_ref: self.m.ex.clone(),
                requested_by: self.m.by.clone(),
            },
            claimed_by: self.cb.clone(),
            created_at: self.c,
            updated_at: self.u,
            archived_at: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_through_its_text() {
        let req = ClaimRequest {
            namespace: Namespace::parse("hot").unwrap(),
            key: IdempotencyKey::parse("a/b?c").unwrap(),
            business_key: None,
            payload_hash: PayloadHash::of_bytes(b"p"),
            lease_ms: 5_000,
            metadata: RunMetadata {
                execution_ref: Some("exec-1".into()),
                ..RunMetadata::default()
            },
            claimed_by: "n8n".into(),
        };
        let owner = LeaseOwner::generate();
        let text = Record::new_claim(&req, owner, 1_800_000_000_000).encode();
        let run = Record::decode(&text)
            .unwrap()
            .to_run(&req.namespace, &req.key)
            .unwrap();
        assert_eq!(run.state, RunState::Processing);
        assert_eq!(run.lease.unwrap().owner, owner);
        assert_eq!(run.lease_expires_at, Some(1_800_000_005_000));
        assert_eq!(run.metadata.execution_ref.as_deref(), Some("exec-1"));
        assert!(!run.correlation_id().is_empty());
        assert!(Record::decode("{}").is_err());
    }
}
