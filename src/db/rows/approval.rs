//! Rows of the approval tables and their conversion to domain types.

use crate::approval::{
    ApproverAuth, AuthMethod, Challenge, ChallengeState, NewChallenge, StagedEffect, StoredSession,
};

use super::corrupt;
use crate::ledger::storage::Result;
use crate::validate::port::StoredOutput;

fn json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(corrupt)
}

/// A `challenges` row.
#[derive(Debug)]
pub(crate) struct ChallengeRow {
    id: String,
    namespace: String,
    run_key: String,
    token_hash: Option<String>,
    operation: String,
    decisions: String,
    audience: String,
    required_roles: String,
    approver_auth: String,
    state: String,
    effects: String,
    callback_url: Option<String>,
    callback_target: Option<String>,
    card: String,
    escalation: i64,
    created_at: i64,
    expires_at: i64,
    decided_at: Option<i64>,
    decided_by: Option<String>,
    auth_method: Option<String>,
    reason: Option<String>,
}

impl ChallengeRow {
    pub(crate) fn into_challenge(self) -> Result<Challenge> {
        let staged: Vec<StagedEffect> = json(&self.effects)?;
        Ok(Challenge {
            new: NewChallenge {
                id: self.id,
                token_hash: self.token_hash,
                operation: self.operation,
                decisions: json(&self.decisions)?,
                audience: json(&self.audience)?,
                required_roles: json(&self.required_roles)?,
                approver_auth: ApproverAuth::parse(&self.approver_auth)
                    .ok_or_else(|| corrupt(&self.approver_auth))?,
                effects: staged.into_iter().map(Into::into).collect(),
                callback_url: self.callback_url,
                callback_target: self.callback_target,
                card: json(&self.card)?,
                escalation: self.escalation,
                expires_at: self.expires_at,
            },
            namespace: self.namespace,
            key: self.run_key,
            state: ChallengeState::parse(&self.state).ok_or_else(|| corrupt(&self.state))?,
            created_at: self.created_at,
            decided_at: self.decided_at,
            decided_by: self.decided_by,
            auth_method: self.auth_method,
            reason: self.reason,
        })
    }
}

/// A `sessions` row.
#[derive(Debug)]
pub(crate) struct SessionRow {
    id_hash: String,
    subject: String,
    scopes: String,
    roles: String,
    auth_method: String,
    expires_at: i64,
    credential: Option<String>,
}

impl SessionRow {
    pub(crate) fn into_session(self) -> Result<StoredSession> {
        let auth = match self.auth_method.as_str() {
            "token" => AuthMethod::Token,
            "sso" => AuthMethod::Sso,
            other => return Err(corrupt(other)),
        };
        Ok(StoredSession {
            id_hash: self.id_hash,
            subject: self.subject,
            scopes: json(&self.scopes)?,
            roles: json(&self.roles)?,
            auth,
            credential: self.credential,
            expires_at: self.expires_at,
        })
    }
}

/// A `run_outputs` row.
#[derive(Debug)]
pub(crate) struct OutputRow {
    attempt: i64,
    operation: String,
    valid: i64,
    output: String,
    violations: String,
    provider_class: String,
    model: String,
    revision: String,
    created_at: i64,
}

impl OutputRow {
    pub(crate) fn into_output(self) -> Result<StoredOutput> {
        Ok(StoredOutput {
            attempt: self.attempt,
            operation: self.operation,
            valid: self.valid != 0,
            output: json(&self.output)?,
            violations: json(&self.violations)?,
            provider_class: self.provider_class,
            model: self.model,
            revision: self.revision,
            created_at: self.created_at,
        })
    }
}

from_columns! {
    ChallengeRow {
        id, namespace, run_key, token_hash, operation, decisions, audience, required_roles,
        approver_auth, state, effects, callback_url, callback_target, card, escalation, created_at,
        expires_at, decided_at, decided_by, auth_method, reason,
    }
}

from_columns! {
    SessionRow {
        id_hash, subject, scopes, roles, auth_method, expires_at, credential,
    }
}

from_columns! {
    OutputRow {
        attempt, operation, valid, output, violations, provider_class, model, revision, created_at,
    }
}
