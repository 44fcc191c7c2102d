//! A challenge as an approval card (../shared/seeds/000: idempotency key,
//! source record link, model output, validation errors, approver identity,
//! expiry), for the API, the console and the CLI alike; and the inbox's
//! state filter.
//!
//! The card is a view built for every adapter, so it carries its OpenAPI
//! schema itself instead of being copied field by field into an API type
//! (docs/architecture.md, "View types").

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::challenge::{Audience, Challenge, ChallengeState};
use crate::clock::to_datetime;
use crate::outbox::NewEffect;

/// One proposed effect on a card: everything that will be sent (secret
/// headers never live on an effect: the target adds them at send time).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProposedEffect {
    /// Effect type.
    pub effect_type: String,
    /// Target.
    pub target: String,
    /// Method.
    pub method: String,
    /// URL.
    pub url: String,
    /// Downstream idempotency key.
    pub idempotency_key: String,
    /// The effect's own request headers.
    pub headers: std::collections::BTreeMap<String, String>,
    /// The request body, as text.
    pub body: Option<String>,
    /// Not sent before (RFC 3339).
    pub not_before: Option<String>,
    /// The business-rejection rule for 2xx answers.
    #[schema(value_type = Option<Object>)]
    pub reject: Option<Value>,
    /// Where the target's id for the created thing is read.
    #[schema(value_type = Option<Object>)]
    pub external_id: Option<Value>,
    /// The probe that reconciles an unknown outcome.
    pub probe_url: Option<String>,
}

/// An approval card.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ApprovalCard {
    /// Challenge id; the page for people is `page`.
    pub id: String,
    /// The confirmation page in the inbox (sign-in needed).
    pub page: String,
    /// The run's namespace.
    pub namespace: String,
    /// The run's key (the idempotency key).
    pub key: String,
    /// The gated operation.
    pub operation: String,
    /// `pending`, `approved`, `rejected`, `expired`, `escalated`.
    #[schema(value_type = String)]
    pub state: ChallengeState,
    /// Link to the source record, when the workflow gave one.
    pub source_url: Option<String>,
    /// One line from the workflow.
    pub summary: Option<String>,
    /// Why a person decides (policy, failed rule, sample).
    pub reason: Option<String>,
    /// The model output (untrusted text).
    #[schema(value_type = Object)]
    pub output: Value,
    /// The model that drafted it.
    #[schema(value_type = Object)]
    pub model: Value,
    /// Validation result of the output.
    #[schema(value_type = Object)]
    pub validation: Value,
    /// Intended approvers.
    pub audience: Audience,
    /// Roles the approver must hold.
    pub required_roles: Vec<String>,
    /// `token_or_sso` or `sso`.
    pub approver_auth: String,
    /// The person the workflow acts for (may not approve).
    pub requested_by: Option<String>,
    /// What approval releases.
    pub effects: Vec<ProposedEffect>,
    /// The digest of the effects the approval is bound to.
    pub effects_digest: Option<String>,
    /// 0 for the first challenge, 1 for an escalation.
    pub escalation: i64,
    /// Created (RFC 3339).
    pub created_at: String,
    /// Expires (RFC 3339).
    pub expires_at: String,
    /// Who decided.
    pub decided_by: Option<String>,
    /// How the decider signed in (`token` or `sso`).
    pub auth_method: Option<String>,
    /// When (RFC 3339).
    pub decided_at: Option<String>,
}

impl From<&Challenge> for ApprovalCard {
    fn from(c: &Challenge) -> Self {
        let card = |field: &str| c.new.card.get(field).cloned().unwrap_or(Value::Null);
        let text = |field: &str| card(field).as_str().map(str::to_owned);
        Self {
            id: c.new.id.clone(),
            page: format!("/approvals/{}", c.new.id),
            namespace: c.namespace.clone(),
            key: c.key.clone(),
            operation: c.new.operation.clone(),
            state: c.state,
            source_url: text("source_url"),
            summary: text("summary"),
            reason: text("reason"),
            output: card("output"),
            model: card("model"),
            validation: card("validation"),
            audience: c.new.audience.clone(),
            required_roles: c.new.required_roles.clone(),
            approver_auth: c.new.approver_auth.as_str().into(),
            requested_by: text("requested_by"),
            effects: c.new.effects.iter().map(ProposedEffect::from).collect(),
            effects_digest: text("effects_digest"),
            escalation: c.new.escalation,
            created_at: to_datetime(c.created_at).to_rfc3339(),
            expires_at: to_datetime(c.new.expires_at).to_rfc3339(),
            decided_by: c.decided_by.clone(),
            auth_method: c.auth_method.clone(),
            decided_at: c.decided_at.map(|t| to_datetime(t).to_rfc3339()),
        }
    }
}

impl From<&NewEffect> for ProposedEffect {
    fn from(e: &NewEffect) -> Self {
        Self {
            effect_type: e.effect_type.clone(),
            target: e.target.clone(),
            method: e.method.clone(),
            url: e.url.clone(),
            idempotency_key: e.idempotency_key.clone(),
            headers: e.headers.clone(),
            body: e
                .body
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned()),
            not_before: e.not_before.map(|t| to_datetime(t).to_rfc3339()),
            reject: to_json(e.spec.reject.as_ref()),
            external_id: to_json(e.spec.external_id.as_ref()),
            probe_url: e.spec.probe_url.clone(),
        }
    }
}

fn to_json<T: Serialize>(value: Option<&T>) -> Option<Value> {
    value.and_then(|v| serde_json::to_value(v).ok())
}

/// An inbox filter that names no state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be pending, approved, rejected, expired, escalated or all")]
pub struct UnknownState;

/// Parses the `state` filter (default `pending`; `all` is no filter).
///
/// # Errors
/// [`UnknownState`] for anything else.
pub fn state_filter(state: Option<&str>) -> Result<Option<ChallengeState>, UnknownState> {
    match state.unwrap_or("pending") {
        "all" => Ok(None),
        other => ChallengeState::parse(other).map(Some).ok_or(UnknownState),
    }
}
