//! The operator's commands on one dead letter: resolve, replay, release,
//! replace, assign; and the replacement links of a run.

use crate::api::PathId;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::super::error::{ApiError, Result};
use super::super::records::{views, RunLinkView};
use super::super::runs::{optional_text, RunRef, RunView};
use super::super::{ApiJson, Caller};
use super::fix::{FixFields, TransformRef};
use super::{refused, DeadLetterView};
use crate::deadletter::correct::CorrectionError;
use crate::deadletter::fix::replay_fixed;
use crate::deadletter::replay::{replace_one, replay_one, ReplayError};
use crate::deadletter::{ActionOutcome, ReplayCommand, Resolution, ResolveCommand};
use crate::ledger::IdempotencyKey;
use crate::state::AppState;

/// A required, bounded, single-line text field.
pub(in crate::api) fn required_text(field: &str, value: String, max: usize) -> Result<String> {
    let value = optional_text(field, Some(value), max)?.unwrap_or_default();
    if value.trim().is_empty() {
        return Err(ApiError::invalid(
            field,
            format!("{field} is required: say why"),
        ));
    }
    Ok(value)
}

/// Maps a replay's failure to its problem.
pub(in crate::api) fn replay_error(err: ReplayError) -> ApiError {
    match err {
        ReplayError::Refused(r) => refused(r),
        ReplayError::RequiresApproval(e) => ApiError::ReplayRequiresApproval(e.to_string()),
        ReplayError::UndeclaredOperation(_) => ApiError::Refused {
            slug: "undeclared-operation",
            detail: err.to_string(),
            state: None,
        },
        ReplayError::NothingToReplace => ApiError::Refused {
            slug: "nothing-to-replace",
            detail: err.to_string(),
            state: None,
        },
        ReplayError::Correction(e) => correction_error(e),
        ReplayError::FourEyes(e) => ApiError::Refusal {
            status: StatusCode::FORBIDDEN,
            slug: "four-eyes",
            detail: e.to_string(),
            field: None,
            retry_after: None,
        },
        ReplayError::Store(e) => e.into(),
    }
}

/// A correction that cannot be made: 422 with its own problem type,
/// naming the request field at fault.
fn correction_error(e: CorrectionError) -> ApiError {
    let (slug, field) = match &e {
        CorrectionError::UnknownTransform { .. } => ("unknown-transform", "transform"),
        CorrectionError::Mismatch { .. } => ("transform-mismatch", "transform"),
        CorrectionError::PatchFailed { .. } => ("patch-failed", "transform"),
        CorrectionError::BodyNotJson(_) => ("body-not-json", "transform"),
        CorrectionError::NoEffect(_) => ("no-effect-to-correct", "effect_id"),
        CorrectionError::Unchanged => ("correction-unchanged", "body"),
    };
    ApiError::Refusal {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        slug,
        detail: e.to_string(),
        field: Some(field),
        retry_after: None,
    }
}

/// What a command did: the record after it and the run it moved or created.
#[derive(Debug, Serialize, ToSchema)]
pub struct ActionResponse {
    /// The dead letter after the command.
    pub dead_letter: DeadLetterView,
    /// The run moved (resolve, replay) or created (replace).
    pub run: Option<RunView>,
    /// Effects re-queued (replay) or queued (replace).
    pub effects: u64,
}

fn done(app: &AppState, outcome: ActionOutcome) -> Result<Json<ActionResponse>> {
    match outcome {
        ActionOutcome::Done {
            dead_letter,
            run,
            effects,
        } => Ok(Json(ActionResponse {
            dead_letter: DeadLetterView::full(
                *dead_letter,
                &app.config.dead_letters,
                &app.config.targets,
                app.clock.now_ms(),
            ),
            run: run.map(|r| RunView::from(*r)),
            effects,
        })),
        ActionOutcome::Refused(r) => Err(refused(r)),
    }
}

/// `POST /v1/dead-letters/{id}/resolve`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveBody {
    /// `reject` (nothing more is done) or `compensated` (handled by hand).
    pub resolution: String,
    /// Why, for the audit log (required).
    pub note: String,
}

/// Resolves a dead letter: the run `dead_lettered → failed_terminal`, with the note.
#[utoipa::path(post, path = "/v1/dead-letters/{id}/resolve", tag = "dead letters", operation_id = "resolve_dead_letter",
    params(("id" = String, Path, description = "Dead letter id")), request_body = ResolveBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Resolved", body = ActionResponse),
        (status = 400, description = "Bad resolution or missing note", body = super::super::Problem),
        (status = 404, description = "No such dead letter", body = super::super::Problem),
        (status = 409, description = "Already resolved, or the run is no longer dead-lettered", body = super::super::Problem),
    ))]
pub(in crate::api) async fn resolve(
    State(app): State<AppState>,
    caller: Caller,
    PathId(id): PathId,
    ApiJson(body): ApiJson<ResolveBody>,
) -> Result<Json<ActionResponse>> {
    let resolution = match body.resolution.as_str() {
        "reject" => Resolution::Reject,
        "compensated" => Resolution::Compensated,
        _ => {
            return Err(ApiError::invalid(
                "resolution",
                "must be reject or compensated",
            ))
        }
    };
    let cmd = ResolveCommand {
        id,
        resolution,
        actor: caller.subject.clone(),
        note: required_text("note", body.note, 2_000)?,
        retain_ms: app.config.dead_letters.retain_ms(),
    };
    let outcome = app.store.resolve_dead_letter(&cmd).await?;
    done(&app, outcome)
}

/// `POST /v1/dead-letters/{id}/replay`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayBody {
    /// Why, for the audit log (required).
    pub reason: String,
    /// Replay after a fix: the failed effect's whole corrected JSON body.
    #[schema(value_type = Option<Object>)]
    pub body: Option<serde_json::Value>,
    /// Replay after a fix: a declared transform applied to the body that
    /// was sent (see the dry run).
    pub transform: Option<TransformRef>,
    /// The effect a body or transform corrects; by default the one whose
    /// request failed.
    pub effect_id: Option<String>,
}

/// `POST /v1/dead-letters/{id}/release`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBody {
    /// Why, for the audit log (required).
    pub reason: String,
}

/// Replays a dead letter: the same effects under the same idempotency keys
/// (`dead_lettered → approved`, or `→ awaiting_human` through the gate
/// again), or for a run that never queued an effect, back to the
/// workflow's re-run (`→ failed_retryable`). With a `body` or a
/// `transform`, the failed effect goes out corrected: under its own key
/// when the target refused every request under it with a 4xx, otherwise
/// under a new key linked to the old one in the audit log.
#[utoipa::path(post, path = "/v1/dead-letters/{id}/replay", tag = "dead letters",
    params(("id" = String, Path, description = "Dead letter id")), request_body = ReplayBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Replayed", body = ActionResponse),
        (status = 400, description = "Missing reason, or both a body and a transform", body = super::super::Problem),
        (status = 403, description = "The operation needs two operators: replay it through a job another operator starts (four-eyes)", body = super::super::Problem),
        (status = 404, description = "No such dead letter", body = super::super::Problem),
        (status = 409, description = "Already resolved, or run not dead-lettered", body = super::super::Problem),
        (status = 422, description = "The correction cannot be made (unknown-transform, transform-mismatch, patch-failed, body-not-json, no-effect-to-correct, correction-unchanged); nothing was changed", body = super::super::Problem),
    ))]
pub(in crate::api) async fn replay(
    State(app): State<AppState>,
    caller: Caller,
    PathId(id): PathId,
    ApiJson(body): ApiJson<ReplayBody>,
) -> Result<Json<ActionResponse>> {
    let fields = FixFields {
        body: body.body,
        transform: body.transform,
        effect_id: body.effect_id,
    };
    let Some(fix) = fields.parse()? else {
        return replay_by(&app, &caller, id, body.reason, false).await;
    };
    let reason = required_text("reason", body.reason, 2_000)?;
    let retain_ms = app.config.dead_letters.retain_ms();
    let cmd = ReplayCommand::by_operator(id, caller.subject.clone(), reason, retain_ms, false);
    let outcome = replay_fixed(&app.replay, cmd, &fix)
        .await
        .map_err(replay_error)?;
    done(&app, outcome)
}

/// Releases a dead-lettered run that queued no effect (a stranded run, a
/// spent reclaim budget, a workflow error) back to the workflow's re-run:
/// `dead_lettered → failed_retryable` with its reclaim budget restarted,
/// so the next claim of the key reclaims it. A run with effects is
/// refused (409 `run-has-effects`) and nothing changes.
#[utoipa::path(post, path = "/v1/dead-letters/{id}/release", tag = "dead letters",
    params(("id" = String, Path, description = "Dead letter id")), request_body = ReleaseBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Released; the run is failed_retryable", body = ActionResponse),
        (status = 400, description = "Missing reason", body = super::super::Problem),
        (status = 404, description = "No such dead letter", body = super::super::Problem),
        (status = 409, description = "Already resolved, run not dead-lettered, nothing to release, or the run has effects (run-has-effects)", body = super::super::Problem),
    ))]
pub(in crate::api) async fn release(
    State(app): State<AppState>,
    caller: Caller,
    PathId(id): PathId,
    ApiJson(body): ApiJson<ReleaseBody>,
) -> Result<Json<ActionResponse>> {
    replay_by(&app, &caller, id, body.reason, true).await
}

/// An operator's replay of dead letter `id`, or (`release`) its release
/// to the workflow's re-run.
async fn replay_by(
    app: &AppState,
    caller: &Caller,
    id: String,
    reason: String,
    release: bool,
) -> Result<Json<ActionResponse>> {
    let reason = required_text("reason", reason, 2_000)?;
    let retain_ms = app.config.dead_letters.retain_ms();
    let cmd = ReplayCommand::by_operator(id, caller.subject.clone(), reason, retain_ms, release);
    let outcome = replay_one(&app.replay, cmd).await.map_err(replay_error)?;
    done(app, outcome)
}

/// `POST /v1/dead-letters/{id}/replace`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplaceBody {
    /// The new upstream-issued key (same namespace); never derived by oncegate.
    pub key: String,
    /// Why, for the audit log (required).
    pub reason: String,
}

/// Replaces a dead letter with a new event under the operator's new key,
/// linked to the original both ways; the original run (if stopped) ends
/// `failed_terminal`.
#[utoipa::path(post, path = "/v1/dead-letters/{id}/replace", tag = "dead letters",
    params(("id" = String, Path, description = "Dead letter id")), request_body = ReplaceBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Replaced; `run` is the new run", body = ActionResponse),
        (status = 400, description = "Malformed key or missing reason", body = super::super::Problem),
        (status = 404, description = "No such dead letter", body = super::super::Problem),
        (status = 409, description = "Already resolved, key taken, nothing to replace, or gated", body = super::super::Problem),
    ))]
pub(in crate::api) async fn replace(
    State(app): State<AppState>,
    caller: Caller,
    PathId(id): PathId,
    ApiJson(body): ApiJson<ReplaceBody>,
) -> Result<Json<ActionResponse>> {
    let key = IdempotencyKey::parse(body.key)?;
    let reason = required_text("reason", body.reason, 2_000)?;
    let outcome = replace_one(&app.replay, &id, key, &caller.subject, &reason)
        .await
        .map_err(replay_error)?;
    done(&app, outcome)
}

/// `POST /v1/dead-letters/{id}/assign`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AssignBody {
    /// The person or team now responsible.
    pub owner: String,
}

/// Assigns a dead letter to an owner.
#[utoipa::path(post, path = "/v1/dead-letters/{id}/assign", tag = "dead letters",
    params(("id" = String, Path, description = "Dead letter id")), request_body = AssignBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Assigned", body = DeadLetterView),
        (status = 404, description = "No such dead letter", body = super::super::Problem),
    ))]
pub(in crate::api) async fn assign(
    State(app): State<AppState>,
    PathId(id): PathId,
    ApiJson(body): ApiJson<AssignBody>,
) -> Result<Json<DeadLetterView>> {
    let owner = required_text("owner", body.owner, 200)?;
    let dl = app
        .store
        .assign_dead_letter(&id, &owner)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no dead letter {id}")))?;
    Ok(Json(DeadLetterView::full(
        dl,
        &app.config.dead_letters,
        &app.config.targets,
        app.clock.now_ms(),
    )))
}

/// Replacement links from or to a run.
#[utoipa::path(get, path = "/v1/runs/links", tag = "dead letters", params(RunRef),
    security(("bearer" = [])),
    responses((status = 200, description = "Links, oldest first", body = [RunLinkView])))]
pub(in crate::api) async fn links(
    State(app): State<AppState>,
    caller: Caller,
    crate::api::ApiQuery(query): crate::api::ApiQuery<RunRef>,
) -> Result<Json<Vec<RunLinkView>>> {
    let (ns, key) = query.parse(&app, &caller)?;
    crate::api::access::sql_tier(&app, &ns, "dead letters and their links")?;
    Ok(Json(views(
        app.store.run_links(ns.as_str(), key.as_str()).await?,
    )))
}
