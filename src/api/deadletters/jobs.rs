//! Bulk replay over HTTP: an explicit selection (ids, or a filter frozen
//! into ids), a dry-run summary that writes and sends nothing, then a
//! tracked job the runner works under a rate limit, with stop and resume.

use crate::api::PathId;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::super::error::{ApiError, Result};
use super::super::{ApiJson, ApiQuery, Caller};
use super::actions::{replay_error, required_text};
use super::fix::FixFields;
use crate::clock::to_datetime;
use crate::deadletter::bulk::{Rate, StartJob};
use crate::deadletter::fix::Fix;
use crate::deadletter::four_eyes::{set_job_state, JobStateError};
use crate::deadletter::jobs::Progress;
use crate::deadletter::plan::{Selection, Summary};
use crate::deadletter::{JobItem, JobState, ReplayJob};
use crate::state::AppState;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/replay-jobs", get(list).post(create))
        .route("/v1/replay-jobs/dry-run", post(dry_run))
        .route("/v1/replay-jobs/{id}", get(show))
        .route("/v1/replay-jobs/{id}/stop", post(stop))
        .route("/v1/replay-jobs/{id}/resume", post(resume))
}

/// `POST /v1/replay-jobs/dry-run`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DryRunBody {
    /// What to replay.
    pub selection: Selection,
}

/// `POST /v1/replay-jobs`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateJobBody {
    /// What to replay.
    pub selection: Selection,
    /// Why (recorded with every replay).
    pub reason: String,
    /// Items per second (1 to the configured maximum).
    pub rate_per_sec: i64,
    /// Replay after a fix: the correction every item's replay sends (a
    /// declared transform for any selection; a whole body or a named
    /// effect for a selection of one). A four-eyes job carries it until
    /// its second operator starts it.
    #[serde(default)]
    pub fix: Option<FixFields>,
}

/// The answer to a dry run.
#[derive(Debug, Serialize, ToSchema)]
pub struct DryRunResponse {
    /// What would happen.
    pub summary: Summary,
    /// The frozen selection, in order (pass as `selection.ids` to create the job).
    pub ids: Vec<String>,
}

/// A job as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobView {
    /// Stable id.
    pub id: String,
    /// `running`, `stopped` or `completed`.
    pub state: JobState,
    /// The operator who created it.
    pub created_by: String,
    /// Why.
    pub reason: String,
    /// Items per second.
    pub rate_per_sec: i64,
    /// How the selection was given.
    #[schema(value_type = Object)]
    pub selection: Value,
    /// The dry-run summary at creation.
    #[schema(value_type = Object)]
    pub summary: Value,
    /// Item counts.
    pub progress: Progress,
    /// The runner working it now, if leased.
    pub runner: Option<String>,
    /// Who changed its state last.
    pub changed_by: String,
    /// Created (RFC 3339).
    pub created_at: String,
    /// Last change (RFC 3339).
    pub updated_at: String,
    /// Last item worked (RFC 3339).
    pub finished_at: Option<String>,
    /// It replays an operation of `dead_letters.four_eyes`: created
    /// stopped, started only by an operator other than its creator.
    pub four_eyes: bool,
    /// The second operator who started it.
    pub started_by: Option<String>,
    /// The correction its replays send: `transform` (`name@version`) or
    /// `body_hash` (the SHA-256 of a whole corrected body), and `effect_id`.
    #[schema(value_type = Option<Object>)]
    pub fix: Option<Value>,
}

impl From<ReplayJob> for JobView {
    fn from(j: ReplayJob) -> Self {
        let ts = |ms: i64| to_datetime(ms).to_rfc3339();
        Self {
            runner: j.lease_owner,
            four_eyes: j.four_eyes,
            started_by: j.started_by,
            fix: j.fix.as_ref().map(Fix::shown),
            created_at: ts(j.created_at),
            updated_at: ts(j.updated_at),
            finished_at: j.finished_at.map(ts),
            id: j.id,
            state: j.state,
            created_by: j.created_by,
            reason: j.reason,
            rate_per_sec: j.rate_per_sec,
            selection: j.selection,
            summary: j.summary,
            progress: j.progress,
            changed_by: j.changed_by,
        }
    }
}

/// Shows what a bulk replay would do. Writes nothing, sends nothing.
#[utoipa::path(post, path = "/v1/replay-jobs/dry-run", tag = "dead letters", operation_id = "replay_job_dry_run", request_body = DryRunBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The summary and the frozen selection", body = DryRunResponse),
        (status = 400, description = "No or an oversized selection", body = super::super::Problem),
    ))]
pub(in crate::api) async fn dry_run(
    State(app): State<AppState>,
    ApiJson(body): ApiJson<DryRunBody>,
) -> Result<Json<DryRunResponse>> {
    let run = app.bulk_replay().dry_run(&body.selection).await?;
    Ok(Json(DryRunResponse {
        summary: run.summary,
        ids: run.ids,
    }))
}

/// Creates and starts a bulk replay job over a frozen selection; a job
/// holding an operation of `dead_letters.four_eyes` is created stopped
/// (`four_eyes: true`) until another operator resumes it.
#[utoipa::path(post, path = "/v1/replay-jobs", tag = "dead letters", request_body = CreateJobBody,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Created and running (stopped until a second operator starts it, for four-eyes operations)", body = JobView),
        (status = 400, description = "No selection, missing reason, a rate outside the limits, or a fix that is empty, gives both a body and a transform, or a whole body or effect id for more than one dead letter", body = super::super::Problem),
        (status = 404, description = "A fix names a dead letter that does not exist", body = super::super::Problem),
        (status = 409, description = "A fix for a dead letter already resolved or with nothing to replay", body = super::super::Problem),
        (status = 422, description = "A fix that cannot be made for an item (unknown transform, one for another operation, a patch that does not apply, no effect to correct)", body = super::super::Problem),
    ))]
pub(in crate::api) async fn create(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateJobBody>,
) -> Result<(StatusCode, Json<JobView>)> {
    let rate = Rate::new(body.rate_per_sec, &app.config.dead_letters)
        .map_err(|e| ApiError::invalid("rate_per_sec", e.to_string()))?;
    let reason = required_text("reason", body.reason, 2_000)?;
    let fix =
        match body.fix {
            Some(fields) => Some(fields.parse()?.ok_or_else(|| {
                ApiError::invalid("fix", "give the corrected body or a transform")
            })?),
            None => None,
        };
    let job = StartJob {
        selection: body.selection,
        reason,
        rate,
        actor: caller.subject.clone(),
        via: None,
        fix,
    };
    let created = app.bulk_replay().start(job).await?;
    Ok((StatusCode::CREATED, Json(created.into())))
}

/// `GET /v1/replay-jobs` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct JobsQuery {
    /// At most this many, newest first (default 20, at most 200).
    pub limit: Option<i64>,
}

/// Lists bulk replay jobs, newest first.
#[utoipa::path(get, path = "/v1/replay-jobs", tag = "dead letters", operation_id = "list_replay_jobs", params(JobsQuery),
    security(("bearer" = [])),
    responses((status = 200, description = "Jobs", body = [JobView])))]
pub(in crate::api) async fn list(
    State(app): State<AppState>,
    ApiQuery(q): ApiQuery<JobsQuery>,
) -> Result<Json<Vec<JobView>>> {
    let limit = q.limit.unwrap_or(20);
    if !(1..=200).contains(&limit) {
        return Err(ApiError::invalid("limit", "must be between 1 and 200"));
    }
    Ok(Json(
        app.store
            .replay_jobs(limit)
            .await?
            .into_iter()
            .map(JobView::from)
            .collect(),
    ))
}

/// `GET /v1/replay-jobs/{id}` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ItemsQuery {
    /// Items after this position (default 0).
    pub items_after: Option<i64>,
    /// At most this many items (default 100, at most 1000; 0 for none).
    pub items_limit: Option<i64>,
}

/// A job with a page of its items.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobDetail {
    /// The job.
    pub job: JobView,
    /// Its items after `items_after`, in order: each one's outcome.
    pub items: Vec<JobItem>,
}

async fn job_or_404(app: &AppState, id: &str) -> Result<ReplayJob> {
    app.store
        .replay_job(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no replay job {id}")))
}

/// Shows a job's progress and its items' outcomes.
#[utoipa::path(get, path = "/v1/replay-jobs/{id}", tag = "dead letters", operation_id = "show_replay_job",
    params(("id" = String, Path, description = "Job id"), ItemsQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The job", body = JobDetail),
        (status = 404, description = "No such job", body = super::super::Problem),
    ))]
pub(in crate::api) async fn show(
    State(app): State<AppState>,
    PathId(id): PathId,
    ApiQuery(q): ApiQuery<ItemsQuery>,
) -> Result<Json<JobDetail>> {
    let limit = q.items_limit.unwrap_or(100);
    if !(0..=1000).contains(&limit) {
        return Err(ApiError::invalid(
            "items_limit",
            "must be between 0 and 1000",
        ));
    }
    let job = job_or_404(&app, &id).await?;
    let items = if limit == 0 {
        Vec::new()
    } else {
        app.store
            .replay_job_items(&id, q.items_after.unwrap_or(0), limit)
            .await?
    };
    Ok(Json(JobDetail {
        job: job.into(),
        items,
    }))
}

async fn set_state(app: &AppState, id: &str, stop: bool, actor: &str) -> Result<Json<JobView>> {
    match set_job_state(app.store.as_ref(), id, stop, actor).await {
        Ok(job) => Ok(Json(job.into())),
        Err(JobStateError::NotFound(id)) => Err(ApiError::NotFound(format!("no replay job {id}"))),
        Err(JobStateError::FourEyes(e)) => Err(replay_error(e.into())),
        Err(JobStateError::NotMoved {
            slug,
            detail,
            state,
        }) => Err(ApiError::Refused {
            slug,
            detail,
            state: Some(state.to_string()),
        }),
        Err(JobStateError::Store(e)) => Err(e.into()),
    }
}

/// Stops a running job between items; items already worked stay worked.
#[utoipa::path(post, path = "/v1/replay-jobs/{id}/stop", tag = "dead letters",
    params(("id" = String, Path, description = "Job id")), security(("bearer" = [])),
    responses(
        (status = 200, description = "Stopped", body = JobView),
        (status = 404, description = "No such job", body = super::super::Problem),
        (status = 409, description = "The job is completed", body = super::super::Problem),
    ))]
pub(in crate::api) async fn stop(
    State(app): State<AppState>,
    caller: Caller,
    PathId(id): PathId,
) -> Result<Json<JobView>> {
    set_state(&app, &id, true, &caller.subject).await
}

/// Resumes a stopped job: its pending items are worked, none twice. A
/// four-eyes job (created stopped) is started this way by an operator
/// other than its creator.
#[utoipa::path(post, path = "/v1/replay-jobs/{id}/resume", tag = "dead letters",
    params(("id" = String, Path, description = "Job id")), security(("bearer" = [])),
    responses(
        (status = 200, description = "Running again", body = JobView),
        (status = 403, description = "A four-eyes job's creator tried to start it (four-eyes), whatever its state; nothing changed", body = super::super::Problem),
        (status = 404, description = "No such job", body = super::super::Problem),
        (status = 409, description = "The job is completed (job-completed), or a four-eyes job was already started by another operator (job-already-started)", body = super::super::Problem),
    ))]
pub(in crate::api) async fn resume(
    State(app): State<AppState>,
    caller: Caller,
    PathId(id): PathId,
) -> Result<Json<JobView>> {
    set_state(&app, &id, false, &caller.subject).await
}
