//! The approvals inbox over the API: `GET /v1/approvals` lists challenges
//! as approval cards (built by `approval::card`; these are their wire
//! types, with their schemas).

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{middleware, Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::auth;
use super::error::Result;
use crate::approval::{card, Challenge};
use crate::state::AppState;

pub(super) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/approvals", get(list))
        .route_layer(middleware::from_fn_with_state(
            state,
            auth::approver_or_operator,
        ))
}

/// `GET /v1/approvals` query.
#[derive(Debug, Deserialize, IntoParams)]
pub struct ApprovalsQuery {
    /// `pending` (default), `approved`, `rejected`, `expired`, `escalated`, or `all`.
    pub state: Option<String>,
    /// Most rows (default 100, at most 1000).
    pub limit: Option<i64>,
}

/// One proposed effect on a card: everything that will be sent but the
/// target's secret headers.
#[derive(Debug, Serialize, ToSchema)]
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

/// Who a challenge is meant for. Both lists empty: any approver.
#[derive(Debug, Serialize, ToSchema)]
pub struct Audience {
    /// By subject.
    pub subjects: Vec<String>,
    /// By role.
    pub roles: Vec<String>,
}

/// An approval card (the wire form of [`card::ApprovalCard`]).
#[derive(Debug, Serialize, ToSchema)]
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
    pub state: String,
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
    /// Who decided, and how (`token` or `sso`).
    pub decided_by: Option<String>,
    /// How the decider signed in.
    pub auth_method: Option<String>,
    /// When (RFC 3339).
    pub decided_at: Option<String>,
}

impl From<card::ApprovalCard> for ApprovalCard {
    fn from(c: card::ApprovalCard) -> Self {
        Self {
            id: c.id,
            page: c.page,
            namespace: c.namespace,
            key: c.key,
            operation: c.operation,
            state: c.state.as_str().into(),
            source_url: c.source_url,
            summary: c.summary,
            reason: c.reason,
            output: c.output,
            model: c.model,
            validation: c.validation,
            audience: Audience {
                subjects: c.audience.subjects,
                roles: c.audience.roles,
            },
            required_roles: c.required_roles,
            approver_auth: c.approver_auth,
            requested_by: c.requested_by,
            effects: c.effects.into_iter().map(ProposedEffect::from).collect(),
            effects_digest: c.effects_digest,
            escalation: c.escalation,
            created_at: c.created_at,
            expires_at: c.expires_at,
            decided_by: c.decided_by,
            auth_method: c.auth_method,
            decided_at: c.decided_at,
        }
    }
}

impl From<&Challenge> for ApprovalCard {
    fn from(c: &Challenge) -> Self {
        card::ApprovalCard::from(c).into()
    }
}

impl From<card::ProposedEffect> for ProposedEffect {
    fn from(e: card::ProposedEffect) -> Self {
        Self {
            effect_type: e.effect_type,
            target: e.target,
            method: e.method,
            url: e.url,
            idempotency_key: e.idempotency_key,
            headers: e.headers,
            body: e.body,
            not_before: e.not_before,
            reject: e.reject,
            external_id: e.external_id,
            probe_url: e.probe_url,
        }
    }
}

/// Approval challenges as cards, newest first.
#[utoipa::path(get, path = "/v1/approvals", tag = "approvals", params(ApprovalsQuery),
    security(("bearer" = [])),
    responses((status = 200, description = "Approval cards", body = [ApprovalCard])))]
pub(super) async fn list(
    State(app): State<AppState>,
    Query(q): Query<ApprovalsQuery>,
) -> Result<Json<Vec<ApprovalCard>>> {
    let state = card::state_filter(q.state.as_deref())?;
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let challenges = app.store.challenges(state, limit).await?;
    Ok(Json(challenges.iter().map(ApprovalCard::from).collect()))
}
