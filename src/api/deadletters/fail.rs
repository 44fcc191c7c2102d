//! `POST /v1/runs/fail-by-execution`: a workflow's error handler (n8n's
//! Error Trigger) holds no lease, only the execution id; it reports the
//! failure of the runs that execution holds in `processing`.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::super::error::{ApiError, Result};
use super::super::runs::{optional_text, sanitise_error, RunView};
use super::super::{ApiJson, Caller};
use super::actions::required_text;
use crate::deadletter::{ExecutionFailed, ExecutionFailure};
use crate::state::AppState;
use crate::tokens::{Namespaces, Scope};

/// The reported error.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportedError {
    /// What went wrong (no secrets; stored, shown to operators).
    pub message: String,
    /// The node that failed.
    pub node: Option<String>,
    /// The engine's error class.
    pub class: Option<String>,
}

/// `POST /v1/runs/fail-by-execution`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FailByExecutionBody {
    /// The workflow engine's execution id the runs were claimed with.
    pub execution_ref: String,
    /// The error.
    pub error: ReportedError,
    /// True: the runs become `failed_retryable` (a re-run reclaims them);
    /// false: `dead_lettered` for an operator, with a `workflow_error` record.
    pub retryable: bool,
}

/// The runs a report moved.
#[derive(Debug, Serialize, ToSchema)]
pub struct FailByExecutionResponse {
    /// The runs, after the move.
    pub runs: Vec<RunView>,
}

/// Fails every `processing` run holding `execution_ref`, without a lease.
#[utoipa::path(post, path = "/v1/runs/fail-by-execution", tag = "ledger",
    request_body = FailByExecutionBody, security(("bearer" = [])),
    responses(
        (status = 200, description = "The runs moved", body = FailByExecutionResponse),
        (status = 400, description = "Malformed report", body = super::super::Problem),
        (status = 404, description = "No run holds this execution ref", body = super::super::Problem),
        (status = 409, description = "No run of this execution is processing", body = super::super::Problem),
    ))]
pub(in crate::api) async fn fail_by_execution(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<FailByExecutionBody>,
) -> Result<Json<FailByExecutionResponse>> {
    let execution_ref = required_text("execution_ref", body.execution_ref, 255)?;
    if body.error.message.trim().is_empty() {
        return Err(ApiError::invalid(
            "error.message",
            "describe the failure (no secrets)",
        ));
    }
    let failure = ExecutionFailure {
        execution_ref,
        message: sanitise_error(&body.error.message),
        node: optional_text("error.node", body.error.node, 255)?,
        error_class: optional_text("error.class", body.error.class, 255)?,
        retryable: body.retryable,
        actor: caller.subject.clone(),
        // Only an admin without a namespace list reports for any run; any
        // other token for the runs it claimed, which lay in its namespaces.
        claimed_by: (!caller.has(Scope::Admin) || caller.namespaces != Namespaces::All)
            .then(|| caller.subject.clone()),
    };
    match app.store.fail_by_execution(&failure).await? {
        ExecutionFailed::Moved(runs) => Ok(Json(FailByExecutionResponse {
            runs: runs.into_iter().map(RunView::from).collect(),
        })),
        ExecutionFailed::NoRun => Err(ApiError::NotFound(format!(
            "no run holds execution ref {:?}",
            failure.execution_ref
        ))),
        ExecutionFailed::NotProcessing(runs) => {
            let states: Vec<String> = runs
                .iter()
                .map(|r| format!("{}/{} is {}", r.namespace, r.key, r.state))
                .collect();
            Err(ApiError::Refused {
                slug: "not-processing",
                detail: format!(
                    "no run of execution {:?} is processing: {}",
                    failure.execution_ref,
                    states.join(", ")
                ),
                state: runs.first().map(|r| r.state.to_string()),
            })
        }
    }
}
