//! Rows as both backends return them, and their conversion to domain
//! types: runs, audit entries, effects and their attempts here; the other
//! parts' rows in the submodules.

mod approval;
mod audit;
mod deadletter;

pub(crate) use approval::{ChallengeRow, OutputRow, SessionRow};
pub(crate) use audit::{AuditScanRow, CheckpointRow, HeadScanRow, StampRow, VerificationRow};
pub(crate) use deadletter::{DeadLetterRow, ItemRow, JobRow, LinkRow, RawEventRow};

use crate::audit::{AuditEntry, AuditRecord};
use crate::clock::Millis;
use crate::db::exec::{FromRow, Row};
use crate::ledger::storage::{Result, StoreError};
use crate::ledger::{
    BusinessKey, FencingVersion, IdempotencyKey, Lease, LeaseOwner, Namespace, PayloadHash, Run,
    RunMetadata, RunState,
};
use crate::outbox::{
    ActionSwitch, AttemptClass, AttemptRecord, AttemptView, Decision, Effect, EffectRole,
    EffectState, NewEffect, Verdict,
};
use crate::tokens::port::StoredToken;

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

/// An `api_tokens` row.
#[derive(Debug)]
pub(crate) struct TokenRow {
    digest: String,
    subject: String,
    scopes: String,
    roles: String,
}

fn split_list(list: &str) -> Vec<String> {
    list.split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

impl From<TokenRow> for StoredToken {
    fn from(row: TokenRow) -> Self {
        Self {
            digest: row.digest,
            subject: row.subject,
            scopes: split_list(&row.scopes),
            roles: split_list(&row.roles),
        }
    }
}

/// An `effects` row.
#[derive(Debug)]
pub(crate) struct EffectRow {
    id: String,
    namespace: String,
    run_key: String,
    operation: String,
    effect_type: String,
    target: String,
    method: String,
    url: String,
    headers: String,
    body: Option<Vec<u8>>,
    idempotency_key: String,
    spec: String,
    state: String,
    not_before: Option<i64>,
    next_attempt_at: i64,
    attempts: i64,
    external_ref: Option<String>,
    last_status: Option<i64>,
    last_class: Option<String>,
    last_error: Option<String>,
    first_sent_at: Option<i64>,
    created_at: i64,
    role: String,
}

impl EffectRow {
    pub(crate) fn into_effect(self) -> Result<Effect> {
        Ok(Effect {
            id: self.id,
            namespace: self.namespace,
            key: self.run_key,
            new: NewEffect {
                operation: self.operation,
                effect_type: self.effect_type,
                target: self.target,
                method: self.method,
                url: self.url,
                headers: serde_json::from_str(&self.headers).map_err(corrupt)?,
                body: self.body,
                idempotency_key: self.idempotency_key,
                spec: serde_json::from_str(&self.spec).map_err(corrupt)?,
                not_before: self.not_before,
                role: self.role.parse::<EffectRole>().map_err(corrupt)?,
            },
            state: self.state.parse::<EffectState>().map_err(corrupt)?,
            attempts: self.attempts,
            next_attempt_at: self.next_attempt_at,
            external_ref: self.external_ref,
            last_status: self.last_status,
            last_class: self
                .last_class
                .map(|c| c.parse::<AttemptClass>())
                .transpose()
                .map_err(corrupt)?,
            last_error: self.last_error,
            first_sent_at: self.first_sent_at,
            created_at: self.created_at,
        })
    }
}

/// An `effect_attempts` row.
#[derive(Debug)]
pub(crate) struct AttemptRow {
    attempt: i64,
    dispatcher: String,
    started_at: i64,
    finished_at: i64,
    class: String,
    status: Option<i64>,
    error: Option<String>,
    evidence: String,
}

impl AttemptRow {
    pub(crate) fn into_view(self) -> Result<AttemptView> {
        Ok(AttemptView {
            attempt: self.attempt,
            dispatcher: self.dispatcher,
            started_at: self.started_at,
            finished_at: self.finished_at,
            class: self.class.parse::<AttemptClass>().map_err(corrupt)?,
            status: self.status,
            error: self.error,
            evidence: serde_json::from_str(&self.evidence).map_err(corrupt)?,
        })
    }
}

/// An `action_switches` row.
#[derive(Debug)]
pub(crate) struct SwitchRow {
    scope: String,
    enabled: i64,
    changed_by: String,
    changed_at: i64,
}

impl From<SwitchRow> for ActionSwitch {
    fn from(row: SwitchRow) -> Self {
        Self {
            scope: row.scope,
            enabled: row.enabled != 0,
            changed_by: row.changed_by,
            changed_at: row.changed_at,
        }
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

/// One verdict of [`OutboxStatements::record_batch`](crate::db::sql::outbox::OutboxStatements::record_batch).
#[derive(Debug, serde::Serialize)]
pub(crate) struct VerdictBatchRow<'a> {
    v_id: &'a str,
    v_owner: &'a str,
    v_state: &'static str,
    v_next_at: Option<Millis>,
    v_sent: i64,
    v_external_ref: Option<&'a str>,
    v_status: Option<i64>,
    v_class: Option<&'a str>,
    v_error: Option<&'a str>,
    v_started_at: Option<Millis>,
}

impl<'a> VerdictBatchRow<'a> {
    pub(crate) fn new(decision: &'a Decision) -> Self {
        let Decision {
            leased,
            verdict,
            attempt,
        } = decision;
        let attempt = attempt.as_ref();
        let (next_at, error) = match verdict {
            Verdict::Retry { at } | Verdict::Unknown { at } => (Some(*at), None),
            Verdict::Failed { reason, .. } => (None, Some(reason.as_str())),
            Verdict::Completed { .. } | Verdict::Release => (None, None),
        };
        let external_ref = match verdict {
            Verdict::Completed { external_ref } => external_ref.as_deref(),
            _ => None,
        };
        Self {
            v_id: &leased.effect.id,
            v_owner: &leased.owner,
            v_state: verdict.state(),
            v_next_at: next_at,
            v_sent: i64::from(attempt.is_some_and(|a| a.sent)),
            v_external_ref: external_ref,
            v_status: attempt.and_then(|a| a.status),
            v_class: attempt.map(|a| a.class.as_str()),
            v_error: error.or(attempt.and_then(|a| a.error.as_deref())),
            v_started_at: attempt.map(|a| a.started_at),
        }
    }
}

/// One attempt of [`OutboxStatements::insert_attempts`](crate::db::sql::outbox::OutboxStatements::insert_attempts).
#[derive(Debug, serde::Serialize)]
pub(crate) struct AttemptBatchRow<'a> {
    v_id: &'a str,
    v_owner: &'a str,
    v_started_at: Millis,
    v_finished_at: Millis,
    v_class: &'a str,
    v_status: Option<i64>,
    v_error: Option<&'a str>,
    v_evidence: String,
}

impl<'a> AttemptBatchRow<'a> {
    /// `attempt` of the effect `id`, with its evidence as stored (redacted).
    pub(crate) fn new(
        id: &'a str,
        owner: &'a str,
        attempt: &'a AttemptRecord,
        evidence: &serde_json::Value,
    ) -> Self {
        Self {
            v_id: id,
            v_owner: owner,
            v_started_at: attempt.started_at,
            v_finished_at: attempt.finished_at,
            v_class: attempt.class.as_str(),
            v_status: attempt.status,
            v_error: attempt.error.as_deref(),
            v_evidence: evidence.to_string(),
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

impl FromRow for RunRow {
    fn from_row(row: &dyn Row) -> Result<Self> {
        Ok(Self {
            namespace: row.get("namespace")?,
            run_key: row.get("run_key")?,
            business_key: row.get("business_key")?,
            state: row.get("state")?,
            prev_state: row.get("prev_state")?,
            payload_hash: row.get("payload_hash")?,
            lease_owner: row.get("lease_owner")?,
            lease_expires_at: row.get("lease_expires_at")?,
            lease_started_at: row.get("lease_started_at")?,
            version: row.get("version")?,
            attempts: row.get("attempts")?,
            result: row.get("result")?,
            last_error: row.get("last_error")?,
            reason: row.get("reason")?,
            operation: row.get("operation")?,
            correlation_id: row.get("correlation_id")?,
            workflow_version: row.get("workflow_version")?,
            source_url: row.get("source_url")?,
            execution_ref: row.get("execution_ref")?,
            requested_by: row.get("requested_by")?,
            claimed_by: row.get("claimed_by")?,
            audit_seq: row.get("audit_seq")?,
            audit_head: row.get("audit_head")?,
            created_at: row.get("created_at")?,
            updated_at: row.get("updated_at")?,
            archived_at: row.get("archived_at")?,
        })
    }
}

impl FromRow for AuditRow {
    fn from_row(row: &dyn Row) -> Result<Self> {
        Ok(Self {
            namespace: row.get("namespace")?,
            run_key: row.get("run_key")?,
            seq: row.get("seq")?,
            kind: row.get("kind")?,
            actor: row.get("actor")?,
            from_state: row.get("from_state")?,
            to_state: row.get("to_state")?,
            version: row.get("version")?,
            detail: row.get("detail")?,
            prev_hash: row.get("prev_hash")?,
            hash: row.get("hash")?,
            created_at: row.get("created_at")?,
        })
    }
}

impl FromRow for TokenRow {
    fn from_row(row: &dyn Row) -> Result<Self> {
        Ok(Self {
            digest: row.get("digest")?,
            subject: row.get("subject")?,
            scopes: row.get("scopes")?,
            roles: row.get("roles")?,
        })
    }
}

impl FromRow for EffectRow {
    fn from_row(row: &dyn Row) -> Result<Self> {
        Ok(Self {
            id: row.get("id")?,
            namespace: row.get("namespace")?,
            run_key: row.get("run_key")?,
            operation: row.get("operation")?,
            effect_type: row.get("effect_type")?,
            target: row.get("target")?,
            method: row.get("method")?,
            url: row.get("url")?,
            headers: row.get("headers")?,
            body: row.get("body")?,
            idempotency_key: row.get("idempotency_key")?,
            spec: row.get("spec")?,
            state: row.get("state")?,
            not_before: row.get("not_before")?,
            next_attempt_at: row.get("next_attempt_at")?,
            attempts: row.get("attempts")?,
            external_ref: row.get("external_ref")?,
            last_status: row.get("last_status")?,
            last_class: row.get("last_class")?,
            last_error: row.get("last_error")?,
            first_sent_at: row.get("first_sent_at")?,
            created_at: row.get("created_at")?,
            role: row.get("role")?,
        })
    }
}

impl FromRow for AttemptRow {
    fn from_row(row: &dyn Row) -> Result<Self> {
        Ok(Self {
            attempt: row.get("attempt")?,
            dispatcher: row.get("dispatcher")?,
            started_at: row.get("started_at")?,
            finished_at: row.get("finished_at")?,
            class: row.get("class")?,
            status: row.get("status")?,
            error: row.get("error")?,
            evidence: row.get("evidence")?,
        })
    }
}

impl FromRow for SwitchRow {
    fn from_row(row: &dyn Row) -> Result<Self> {
        Ok(Self {
            scope: row.get("scope")?,
            enabled: row.get("enabled")?,
            changed_by: row.get("changed_by")?,
            changed_at: row.get("changed_at")?,
        })
    }
}
