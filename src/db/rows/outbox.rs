//! Outbox rows: effects, their attempts, kill switches, and the batch rows
//! the dispatcher records with.

use super::corrupt;
use crate::clock::Millis;
use crate::ledger::storage::Result;
use crate::outbox::{
    ActionSwitch, AttemptClass, AttemptOutcome, AttemptView, Decision, Effect, EffectRole,
    EffectState, NewEffect, Verdict,
};

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
    schema_version: Option<String>,
}

impl EffectRow {
    /// The effect's target.
    pub(crate) fn target(&self) -> &str {
        &self.target
    }

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
                schema_version: self.schema_version,
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
            outcome: AttemptOutcome {
                started_at: self.started_at,
                finished_at: self.finished_at,
                class: self.class.parse::<AttemptClass>().map_err(corrupt)?,
                status: self.status,
                error: self.error,
                evidence: serde_json::from_str(&self.evidence).map_err(corrupt)?,
            },
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
        let outcome = attempt.map(|a| &a.outcome);
        let (next_at, error) = match verdict {
            Verdict::Retry { at } | Verdict::Unknown { at } | Verdict::Held { at } => {
                (Some(*at), None)
            }
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
            // A held attempt spends no budget (and starts no elapsed time).
            v_sent: i64::from(
                attempt.is_some_and(|a| a.sent) && !matches!(verdict, Verdict::Held { .. }),
            ),
            v_external_ref: external_ref,
            v_status: outcome.and_then(|o| o.status),
            v_class: outcome.map(|o| o.class.as_str()),
            v_error: error.or(outcome.and_then(|o| o.error.as_deref())),
            v_started_at: outcome.map(|o| o.started_at),
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
        attempt: &'a AttemptOutcome,
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

from_columns! {
    EffectRow {
        id, namespace, run_key, operation, effect_type, target, method, url, headers, body,
        idempotency_key, spec, state, not_before, next_attempt_at, attempts, external_ref,
        last_status, last_class, last_error, first_sent_at, created_at, role, schema_version,
    }
}

from_columns! {
    AttemptRow {
        attempt, dispatcher, started_at, finished_at, class, status, error, evidence,
    }
}

from_columns! { SwitchRow { scope, enabled, changed_by, changed_at } }
