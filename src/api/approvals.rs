//! The approvals inbox over the API: `GET /v1/approvals` lists challenges
//! as approval cards (../shared/seeds/000: idempotency key, source record
//! link, model output, validation errors, approver identity, expiry).

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{middleware, Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::auth;
use super::error::{ApiError, Result};
use crate::approval::{Audience, Challenge, ChallengeState};
use crate::clock::to_datetime;
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

/// One proposed effect on a card (never its body or headers).
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
}

/// An approval card.
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
            effects: c
                .new
                .effects
                .iter()
                .map(|e| ProposedEffect {
                    effect_type: e.effect_type.clone(),
                    target: e.target.clone(),
                    method: e.method.clone(),
                    url: e.url.clone(),
                    idempotency_key: e.idempotency_key.clone(),
                })
                .collect(),
            escalation: c.new.escalation,
            created_at: to_datetime(c.created_at).to_rfc3339(),
            expires_at: to_datetime(c.new.expires_at).to_rfc3339(),
            decided_by: c.decided_by.clone(),
            auth_method: c.auth_method.clone(),
            decided_at: c.decided_at.map(|t| to_datetime(t).to_rfc3339()),
        }
    }
}

/// Cards as a plain-text table for the terminal.
pub fn card_table(cards: &[ApprovalCard]) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "{:<36}  {:<9}  {:<16}  {:<30}  {:<12}  {:<25}  {}\n",
        "ID", "STATE", "OPERATION", "NAMESPACE / KEY", "REQUESTED BY", "EXPIRES", "EFFECTS"
    );
    for c in cards {
        let effects: Vec<String> = c
            .effects
            .iter()
            .map(|e| format!("{}→{}", e.effect_type, e.target))
            .collect();
        let _ = writeln!(
            out,
            "{:<36}  {:<9}  {:<16}  {:<30}  {:<12}  {:<25}  {}",
            c.id,
            c.state.as_str(),
            c.operation,
            format!("{} / {}", c.namespace, c.key),
            c.requested_by.as_deref().unwrap_or("-"),
            c.expires_at,
            effects.join(", ")
        );
    }
    if cards.is_empty() {
        out.push_str("(none)\n");
    }
    out
}

/// Parses the `state` filter.
///
/// # Errors
/// [`ApiError::Invalid`] for an unknown state.
pub fn state_filter(state: Option<&str>) -> Result<Option<ChallengeState>> {
    match state.unwrap_or("pending") {
        "all" => Ok(None),
        other => ChallengeState::parse(other).map(Some).ok_or_else(|| {
            ApiError::invalid(
                "state",
                "must be pending, approved, rejected, expired, escalated or all",
            )
        }),
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
    let state = state_filter(q.state.as_deref())?;
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let challenges = app.store.challenges(state, limit).await?;
    Ok(Json(challenges.iter().map(ApprovalCard::from).collect()))
}
