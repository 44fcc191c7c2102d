//! Dead-letter, link, job and raw-event rows, and their conversion to
//! domain types.

use serde_json::Value;

use super::corrupt;
use crate::deadletter::jobs::Progress;
use crate::deadletter::{DeadLetter, JobItem, ReplayJob, RunLink};
use crate::ingress::{RawEvent, RawStatus};
use crate::ledger::storage::{Result, StoreError};
use crate::ledger::PayloadHash;

fn json_or_null(text: Option<&str>) -> Result<Option<Value>, StoreError> {
    text.map(serde_json::from_str).transpose().map_err(corrupt)
}

/// A `dead_letters` row joined with its run's state.
#[derive(Debug)]
pub(crate) struct DeadLetterRow {
    id: String,
    namespace: String,
    run_key: String,
    class: String,
    component: String,
    raw_event_id: Option<String>,
    detail: String,
    created_at: i64,
    resolved_at: Option<i64>,
    resolution: Option<String>,
    event_id: Option<String>,
    correlation_id: Option<String>,
    operation: Option<String>,
    workflow_version: Option<String>,
    schema_version: Option<String>,
    payload_ref: Option<String>,
    payload_hash: Option<String>,
    error: Option<String>,
    attempts: Option<String>,
    last_evidence: Option<String>,
    run_state: Option<String>,
    next_action: Option<String>,
    previous_id: Option<String>,
    owner: Option<String>,
    retain_until: Option<i64>,
    replay_count: i64,
    resolved_by: Option<String>,
    resolution_note: Option<String>,
    replaced_by_namespace: Option<String>,
    replaced_by_key: Option<String>,
    last_request: Option<String>,
    current_state: Option<String>,
}

impl DeadLetterRow {
    pub(crate) fn into_dead_letter(self) -> Result<DeadLetter> {
        Ok(DeadLetter {
            class: self.class.parse().map_err(corrupt)?,
            detail: serde_json::from_str(&self.detail).map_err(corrupt)?,
            attempts: json_or_null(self.attempts.as_deref())?.unwrap_or(Value::Array(Vec::new())),
            last_evidence: json_or_null(self.last_evidence.as_deref())?,
            last_request: json_or_null(self.last_request.as_deref())?,
            current_state: self
                .current_state
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(corrupt)?,
            resolution: self
                .resolution
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(corrupt)?,
            replaced_by: self.replaced_by_namespace.zip(self.replaced_by_key),
            id: self.id,
            namespace: self.namespace,
            key: self.run_key,
            component: self.component,
            event_id: self.event_id,
            correlation_id: self.correlation_id,
            operation: self.operation,
            workflow_version: self.workflow_version,
            schema_version: self.schema_version,
            payload_ref: self.payload_ref,
            payload_hash: self.payload_hash,
            raw_event_id: self.raw_event_id,
            error: self.error,
            run_state: self.run_state,
            next_action: self.next_action,
            previous_id: self.previous_id,
            owner: self.owner,
            retain_until: self.retain_until,
            replay_count: self.replay_count,
            created_at: self.created_at,
            resolved_at: self.resolved_at,
            resolved_by: self.resolved_by,
            resolution_note: self.resolution_note,
        })
    }
}

/// A `run_links` row.
#[derive(Debug)]
pub(crate) struct LinkRow {
    namespace: String,
    run_key: String,
    replaced_by_ns: String,
    replaced_by_key: String,
    dead_letter_id: String,
    actor: String,
    reason: String,
    created_at: i64,
}

impl From<LinkRow> for RunLink {
    fn from(row: LinkRow) -> Self {
        Self {
            namespace: row.namespace,
            key: row.run_key,
            replaced_by_namespace: row.replaced_by_ns,
            replaced_by_key: row.replaced_by_key,
            dead_letter_id: row.dead_letter_id,
            actor: row.actor,
            reason: row.reason,
            created_at: row.created_at,
        }
    }
}

/// A `replay_jobs` row with its item counts.
#[derive(Debug)]
pub(crate) struct JobRow {
    id: String,
    state: String,
    created_by: String,
    reason: String,
    rate_per_sec: i64,
    selection: String,
    summary: String,
    total: i64,
    lease_owner: Option<String>,
    lease_expires_at: Option<i64>,
    changed_by: String,
    created_at: i64,
    updated_at: i64,
    finished_at: Option<i64>,
    replayed: i64,
    refused: i64,
    four_eyes: i64,
    started_by: Option<String>,
}

impl JobRow {
    pub(crate) fn into_job(self) -> Result<ReplayJob> {
        let stored = serde_json::from_str(&self.selection).map_err(corrupt)?;
        let (selection, fix) = crate::deadletter::jobs::split_selection(stored).map_err(corrupt)?;
        Ok(ReplayJob {
            state: self.state.parse().map_err(corrupt)?,
            selection,
            fix,
            summary: serde_json::from_str(&self.summary).map_err(corrupt)?,
            progress: Progress {
                total: self.total,
                replayed: self.replayed,
                refused: self.refused,
                pending: self.total - self.replayed - self.refused,
            },
            id: self.id,
            created_by: self.created_by,
            reason: self.reason,
            rate_per_sec: self.rate_per_sec,
            lease_owner: self.lease_owner,
            lease_expires_at: self.lease_expires_at,
            changed_by: self.changed_by,
            created_at: self.created_at,
            updated_at: self.updated_at,
            finished_at: self.finished_at,
            four_eyes: self.four_eyes != 0,
            started_by: self.started_by,
        })
    }
}

/// A `replay_job_items` row.
#[derive(Debug)]
pub(crate) struct ItemRow {
    job_id: String,
    seq: i64,
    dead_letter_id: String,
    state: String,
    outcome: Option<String>,
    finished_at: Option<i64>,
}

impl ItemRow {
    pub(crate) fn into_item(self) -> Result<JobItem> {
        Ok(JobItem {
            state: self.state.parse().map_err(corrupt)?,
            job_id: self.job_id,
            seq: self.seq,
            dead_letter_id: self.dead_letter_id,
            outcome: self.outcome,
            finished_at: self.finished_at,
        })
    }
}

/// A `raw_events` row.
#[derive(Debug)]
pub(crate) struct RawEventRow {
    id: String,
    source: String,
    event_id: String,
    event_type: Option<String>,
    status: String,
    payload_hash: String,
    content_type: Option<String>,
    headers: String,
    body: Vec<u8>,
    received_at: i64,
}

impl RawEventRow {
    pub(crate) fn into_event(self) -> Result<RawEvent> {
        let status = match self.status.as_str() {
            "accepted" => RawStatus::Accepted,
            "quarantined" => RawStatus::Quarantined,
            "duplicate_of" => RawStatus::DuplicateOf,
            other => return Err(corrupt(format!("unknown raw event status {other:?}"))),
        };
        Ok(RawEvent {
            id: self.id,
            source: self.source,
            event_id: self.event_id,
            event_type: self.event_type,
            status,
            payload_hash: PayloadHash::parse(self.payload_hash).map_err(corrupt)?,
            content_type: self.content_type,
            headers: serde_json::from_str(&self.headers).map_err(corrupt)?,
            body: self.body,
            received_at: self.received_at,
        })
    }
}

from_columns! {
    DeadLetterRow {
        id, namespace, run_key, class, component, raw_event_id, detail, created_at, resolved_at,
        resolution, event_id, correlation_id, operation, workflow_version, schema_version,
        payload_ref, payload_hash, error, attempts, last_evidence, run_state, next_action,
        previous_id, owner, retain_until, replay_count, resolved_by, resolution_note,
        replaced_by_namespace, replaced_by_key, last_request, current_state,
    }
}

from_columns! {
    LinkRow {
        namespace, run_key, replaced_by_ns, replaced_by_key, dead_letter_id, actor, reason,
        created_at,
    }
}

from_columns! {
    JobRow {
        id, state, created_by, reason, rate_per_sec, selection, summary, total, lease_owner,
        lease_expires_at, changed_by, created_at, updated_at, finished_at, replayed, refused,
        four_eyes, started_by,
    }
}

from_columns! { ItemRow { job_id, seq, dead_letter_id, state, outcome, finished_at } }

from_columns! {
    RawEventRow {
        id, source, event_id, event_type, status, payload_hash, content_type, headers, body,
        received_at,
    }
}
