//! Rows as both backends return them, and their conversion to domain types.

use crate::audit::{AuditEntry, AuditRecord};
use crate::clock::Millis;
use crate::ledger::{
    BusinessKey, FencingVersion, IdempotencyKey, Lease, LeaseOwner, Namespace, PayloadHash, Run,
    RunMetadata, RunState,
};

use super::{StoreError, StoredToken};
use crate::outbox::{ActionSwitch, AttemptView, Effect, EffectState, NewEffect};

/// A `runs` row plus the statement's notion of "now".
#[derive(Debug, sqlx::FromRow)]
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
    pub(crate) fn to_run(&self) -> Result<Run, StoreError> {
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
#[derive(Debug, sqlx::FromRow)]
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
    pub(crate) fn into_record(self) -> Result<AuditRecord, StoreError> {
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
#[derive(Debug, sqlx::FromRow)]
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
#[derive(Debug, sqlx::FromRow)]
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
}

impl EffectRow {
    pub(crate) fn into_effect(self) -> Result<Effect, StoreError> {
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
            },
            state: self.state.parse::<EffectState>().map_err(corrupt)?,
            attempts: self.attempts,
            next_attempt_at: self.next_attempt_at,
            external_ref: self.external_ref,
            last_status: self.last_status,
            last_class: self.last_class,
            last_error: self.last_error,
            first_sent_at: self.first_sent_at,
            created_at: self.created_at,
        })
    }
}

/// An `effect_attempts` row.
#[derive(Debug, sqlx::FromRow)]
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
    pub(crate) fn into_view(self) -> Result<AttemptView, StoreError> {
        Ok(AttemptView {
            attempt: self.attempt,
            dispatcher: self.dispatcher,
            started_at: self.started_at,
            finished_at: self.finished_at,
            class: self.class,
            status: self.status,
            error: self.error,
            evidence: serde_json::from_str(&self.evidence).map_err(corrupt)?,
        })
    }
}

/// An `action_switches` row.
#[derive(Debug, sqlx::FromRow)]
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
