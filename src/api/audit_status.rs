//! `GET /v1/audit/status`: what the latest audit verification and the
//! latest checkpoint found, for an operator's dashboard or the CLI's
//! `oncegate audit status`. It reads what the periodic jobs (or
//! `oncegate audit verify|checkpoint`) recorded; it does not walk the log.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::ToSchema;

use super::auth;
use super::error::Result;
use crate::api::auth::Scoped;
use crate::clock::to_datetime;
use crate::state::AppState;

pub(super) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/audit/status", get(status))
        .only(state, auth::OPERATOR_OR_ADMIN)
}

/// The latest verification and checkpoint.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditStatus {
    /// The latest verification, if one ever ran.
    pub verification: Option<VerificationView>,
    /// The latest checkpoint, if one was ever written.
    pub checkpoint: Option<CheckpointView>,
}

/// One verification's outcome.
#[derive(Debug, Serialize, ToSchema)]
pub struct VerificationView {
    /// When it finished (RFC 3339).
    pub finished_at: String,
    /// The namespace it was limited to, if any.
    pub namespace: Option<String>,
    /// Chains walked.
    pub chains: i64,
    /// Problems found (0: every chain and the checkpoints verified).
    pub failures: i64,
    /// The first problem, in words.
    pub first_failure: Option<String>,
}

/// One checkpoint.
#[derive(Debug, Serialize, ToSchema)]
pub struct CheckpointView {
    /// Its number.
    pub id: i64,
    /// When it was written (RFC 3339).
    pub created_at: String,
    /// Chains in its head list.
    pub chain_count: i64,
    /// Chains that vanished or went backwards.
    pub anomalies: i64,
    /// `periodic`, `manual` or `retention`.
    pub reason: String,
}

/// The latest audit verification and checkpoint.
#[utoipa::path(get, path = "/v1/audit/status", tag = "audit", security(("bearer" = [])),
    responses((status = 200, description = "What the latest verification and checkpoint found", body = AuditStatus)))]
pub(super) async fn status(State(app): State<AppState>) -> Result<Json<AuditStatus>> {
    let ts = |ms| to_datetime(ms).to_rfc3339();
    let verification = app
        .store
        .last_verification()
        .await?
        .map(|v| VerificationView {
            finished_at: ts(v.finished_at),
            namespace: v.namespace,
            chains: v.chains,
            failures: v.failures,
            first_failure: v.first_failure,
        });
    let checkpoint = app
        .store
        .latest_checkpoint()
        .await?
        .map(|c| CheckpointView {
            id: c.id,
            created_at: ts(c.created_at),
            chain_count: c.chain_count,
            anomalies: c.anomalies,
            reason: c.reason,
        });
    Ok(Json(AuditStatus {
        verification,
        checkpoint,
    }))
}
