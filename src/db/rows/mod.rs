//! Rows as both backends return them, and their conversion to domain
//! types: runs, audit entries, effects and their attempts here; the other
//! parts' rows in the submodules.

/// Implements [`FromRow`](crate::db::exec::FromRow) for a row struct
/// whose every field is read from the column of the same name, on either
/// backend: the one mapping of a row struct, named once.
macro_rules! from_columns {
    ($row:ident { $($field:ident),* $(,)? }) => {
        impl $crate::db::exec::FromRow for $row {
            fn from_row(
                row: &dyn $crate::db::exec::Row,
            ) -> $crate::ledger::storage::Result<Self> {
                Ok(Self {
                    $($field: row.get(stringify!($field))?,)*
                })
            }
        }
    };
}

mod approval;
mod audit;
mod deadletter;
mod deliveries;
mod health;
mod outbox;
mod tokens;

pub(crate) use approval::{ChallengeRow, OutputRow, SessionRow};
pub(crate) use audit::{AuditScanRow, CheckpointRow, HeadScanRow, StampRow, VerificationRow};
pub(crate) use deadletter::{DeadLetterRow, ItemRow, JobRow, LinkRow, RawEventRow};
pub(crate) use deliveries::DeliveryRow;
pub(crate) use health::HealthRow;
pub(crate) use outbox::{AttemptBatchRow, AttemptRow, EffectRow, SwitchRow, VerdictBatchRow};
pub(crate) use tokens::TokenRow;

use crate::audit::checkpoint::ChainHead;
use crate::audit::{AuditEntry, AuditRecord};
use crate::clock::Millis;
use crate::ledger::storage::{Result, StoreError};
use crate::ledger::{
    BusinessKey, FencingVersion, IdempotencyKey, Lease, LeaseOwner, Namespace, PayloadHash, Run,
    RunMetadata, RunState,
};

/// A `runs` row plus the statement's notion of "now".
#[derive(Debug)]
pub(crate) struct RunRow {
    namespace: String,
    run_key: String,
    business_key: Option<String>,
    state: String,
    prev_state: Option<String>,
    payload_hash: String,
    lease_owner: Option<String>,
    lease_expires_at: Option<i64>,
    lease_started_at: Option<i64>,
    version: i64,
    attempts: i64,
    reclaims: i64,
    budget_started_at: Option<i64>,
    result: Option<String>,
    last_error: Option<String>,
    reason: Option<String>,
    operation: Option<String>,
    correlation_id: String,
    workflow_version: Option<String>,
    source_url: Option<String>,
    execution_ref: Option<String>,
    requested_by: Option<String>,
    claimed_by: String,
    pub(crate) audit_seq: i64,
    pub(crate) audit_head: Option<String>,
    created_at: i64,
    updated_at: i64,
    archived_at: Option<i64>,
}

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

impl RunRow {
    /// Converts the row, refusing values no statement of ours writes.
    pub(crate) fn to_run(&self) -> Result<Run> {
        let state: RunState = self.state.parse().map_err(corrupt)?;
        let prev_state = self
            .prev_state
            .as_deref()
            .map(str::parse::<RunState>)
            .transpose()
            .map_err(corrupt)?;
        let version = FencingVersion::new(self.version).map_err(corrupt)?;
        let lease = self
            .lease_owner
            .as_deref()
            .map(|owner| LeaseOwner::from_hex(owner).map(|owner| Lease { owner, version }))
            .transpose()
            .map_err(corrupt)?;
        let result = self
            .result
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(corrupt)?;
        Ok(Run {
            namespace: Namespace::parse(self.namespace.clone()).map_err(corrupt)?,
            key: IdempotencyKey::parse(self.run_key.clone()).map_err(corrupt)?,
            business_key: self
                .business_key
                .clone()
                .map(BusinessKey::parse)
                .transpose()
                .map_err(corrupt)?,
            state,
            prev_state,
            payload_hash: PayloadHash::parse(self.payload_hash.clone()).map_err(corrupt)?,
            lease,
            lease_expires_at: self.lease_expires_at,
            lease_started_at: self.lease_started_at,
            version,
            attempts: self.attempts,
            reclaims: self.reclaims,
            budget_started_at: self.budget_started_at,
            result,
            last_error: self.last_error.clone(),
            reason: self.reason.clone(),
            metadata: RunMetadata {
                operation: self.operation.clone(),
                correlation_id: Some(self.correlation_id.clone()),
                workflow_version: self.workflow_version.clone(),
                source_url: self.source_url.clone(),
                execution_ref: self.execution_ref.clone(),
                requested_by: self.requested_by.clone(),
            },
            claimed_by: self.claimed_by.clone(),
            created_at: self.created_at,
            updated_at: self.updated_at,
            archived_at: self.archived_at,
        })
    }
}

/// An `audit_events` row.
#[derive(Debug)]
pub(crate) struct AuditRow {
    namespace: String,
    run_key: String,
    seq: i64,
    kind: String,
    actor: String,
    from_state: Option<String>,
    to_state: Option<String>,
    version: Option<i64>,
    detail: String,
    prev_hash: Option<String>,
    hash: String,
    created_at: Millis,
}

impl AuditRow {
    pub(crate) fn into_record(self) -> Result<AuditRecord> {
        Ok(AuditRecord {
            entry: AuditEntry {
                namespace: self.namespace,
                key: self.run_key,
                seq: self.seq,
                kind: self.kind,
                actor: self.actor,
                from_state: self.from_state,
                to_state: self.to_state,
                version: self.version,
                detail: serde_json::from_str(&self.detail).map_err(corrupt)?,
                created_at: self.created_at,
            },
            prev_hash: self.prev_hash,
            hash: self.hash,
        })
    }
}

// Rows written in batches: serialized as one JSON array bound to one
// statement, which reads them back with `Dialect::json_rows` (each field is
// a column of `v`, hence the `v_` prefix).

/// One audit entry of [`Statements::append_audits`](crate::db::sql::runs::RunStatements::append_audits).
#[derive(Debug, serde::Serialize)]
pub(crate) struct AuditBatchRow<'a> {
    v_ns: &'a str,
    v_key: &'a str,
    v_seq: i64,
    v_kind: &'a str,
    v_actor: &'a str,
    v_from: Option<&'a str>,
    v_to: Option<&'a str>,
    v_version: Option<i64>,
    v_detail: String,
    v_prev: Option<&'a str>,
    v_hash: String,
    v_at: Millis,
}

impl<'a> AuditBatchRow<'a> {
    /// `entry` chained onto `prev_hash`, its run's chain head.
    pub(crate) fn new(entry: &'a AuditEntry, prev_hash: Option<&'a str>) -> Self {
        Self {
            v_ns: &entry.namespace,
            v_key: &entry.key,
            v_seq: entry.seq,
            v_kind: &entry.kind,
            v_actor: &entry.actor,
            v_from: entry.from_state.as_deref(),
            v_to: entry.to_state.as_deref(),
            v_version: entry.version,
            v_detail: entry.detail.to_string(),
            v_prev: prev_hash,
            v_hash: entry.chain_hash(prev_hash),
            v_at: entry.created_at,
        }
    }
}

/// A chain head staged by a checkpoint in preparation.
#[derive(Debug, serde::Serialize)]
pub(crate) struct HeadBatchRow<'a> {
    v_ns: &'a str,
    v_key: &'a str,
    v_seq: i64,
    v_head: &'a str,
}

impl<'a> From<&'a ChainHead> for HeadBatchRow<'a> {
    fn from(h: &'a ChainHead) -> Self {
        Self {
            v_ns: &h.namespace,
            v_key: &h.key,
            v_seq: h.seq,
            v_head: &h.head,
        }
    }
}

/// A run named by its identity, for statements over a set of runs.
#[derive(Debug, serde::Serialize)]
pub(crate) struct RunKeyBatchRow<'a> {
    v_ns: &'a str,
    v_key: &'a str,
}

impl<'a> RunKeyBatchRow<'a> {
    pub(crate) fn new(namespace: &'a str, key: &'a str) -> Self {
        Self {
            v_ns: namespace,
            v_key: key,
        }
    }
}

from_columns! {
    RunRow {
        namespace, run_key, business_key, state, prev_state, payload_hash, lease_owner,
        lease_expires_at, lease_started_at, version, attempts, reclaims, budget_started_at, result,
        last_error, reason, operation, correlation_id, workflow_version, source_url, execution_ref,
        requested_by, claimed_by, audit_seq, audit_head, created_at, updated_at, archived_at,
    }
}

from_columns! {
    AuditRow {
        namespace, run_key, seq, kind, actor, from_state, to_state, version, detail, prev_hash,
        hash, created_at,
    }
}
