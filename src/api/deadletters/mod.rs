//! Dead letters over HTTP (operator scope): list with filters and a keyset
//! cursor, show one with its evidence and the run's timeline, and the
//! operator's commands ([`actions`]); bulk replay jobs ([`jobs`]); and the
//! workflow's failure report by execution ref ([`fail`], workflow scope).

use crate::api::auth::Scoped;
use crate::api::PathId;
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use utoipa::ToSchema;

use super::auth;
use super::effects::EffectView;
use super::error::{ApiError, Result};
use super::records::{views, AuditEventView, RunLinkView};
use super::runs::RunView;
use crate::clock::to_datetime;
use crate::deadletter::filter::Criteria;
use crate::deadletter::{Cursor, Refusal};
use crate::ledger::{IdempotencyKey, Namespace};
use crate::state::AppState;

pub(super) mod actions;
pub(super) mod fail;
pub(super) mod fix;
pub(super) mod jobs;
mod view;

pub use view::DeadLetterView;

pub(super) fn router(state: AppState) -> Router<AppState> {
    let operator = Router::new()
        .route("/v1/dead-letters", get(list))
        .route("/v1/dead-letters/{id}", get(show))
        .route("/v1/dead-letters/{id}/resolve", post(actions::resolve))
        .route("/v1/dead-letters/{id}/replay", post(actions::replay))
        .route("/v1/dead-letters/{id}/replay/dry-run", post(fix::dry_run))
        .route("/v1/dead-letters/{id}/release", post(actions::release))
        .route("/v1/dead-letters/{id}/replace", post(actions::replace))
        .route("/v1/dead-letters/{id}/assign", post(actions::assign))
        .route("/v1/runs/links", get(actions::links))
        .merge(jobs::routes())
        .only(state.clone(), auth::OPERATOR_OR_ADMIN);
    let workflow = Router::new()
        .route("/v1/runs/fail-by-execution", post(fail::fail_by_execution))
        .only(state, auth::WORKFLOW);
    operator.merge(workflow)
}

/// Maps a store refusal to its problem.
pub(super) fn refused(refusal: Refusal) -> ApiError {
    let detail = refusal.describe();
    let (slug, state) = match refusal {
        Refusal::NotFound => return ApiError::NotFound(detail),
        Refusal::AlreadyResolved(_) => ("already-resolved", None),
        Refusal::RunNotDeadLettered(state) => {
            ("run-not-dead-lettered", state.map(|s| s.to_string()))
        }
        Refusal::NothingToReplay => ("nothing-to-replay", None),
        Refusal::KeyTaken(state) => ("key-taken", Some(state.to_string())),
        Refusal::JobNotRunning | Refusal::ItemDone => ("job-not-running", None),
        Refusal::RunHasEffects(_) => ("run-has-effects", None),
        Refusal::EffectNotReplayable(_) => ("effect-not-replayable", None),
    };
    ApiError::Refused {
        slug,
        detail,
        state,
    }
}

/// A page of dead letters.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetterPage {
    /// The records, oldest first.
    pub items: Vec<DeadLetterView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// Lists dead letters, oldest first (open ones unless `resolved` says otherwise).
#[utoipa::path(get, path = "/v1/dead-letters", tag = "dead letters", operation_id = "list_dead_letters", params(Criteria),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A page of dead letters", body = DeadLetterPage),
        (status = 400, description = "A bad filter", body = super::Problem),
    ))]
pub(super) async fn list(
    State(app): State<AppState>,
    crate::api::ApiQuery(q): crate::api::ApiQuery<Criteria>,
) -> Result<Json<DeadLetterPage>> {
    let now = app.clock.now_ms();
    let filter = q.into_filter(now)?;
    let limit = filter.limit;
    let found = app.store.dead_letters(&filter).await?;
    let next_cursor = Cursor::after_full(&found, limit, |d| (d.created_at, &d.id));
    let config = &app.config.dead_letters;
    let items = found
        .into_iter()
        .map(|d| DeadLetterView::summary(d, config, now))
        .collect();
    Ok(Json(DeadLetterPage { items, next_cursor }))
}

/// A raw delivery as shown with its dead letter (never the body).
#[derive(Debug, Serialize, ToSchema)]
pub struct RawEventView {
    /// Stable id.
    pub id: String,
    /// `accepted` or `quarantined`.
    pub status: String,
    /// Provider event type.
    pub event_type: Option<String>,
    /// SHA-256 of the body.
    pub payload_hash: String,
    /// Content type.
    pub content_type: Option<String>,
    /// Size of the stored body in bytes.
    pub body_bytes: usize,
    /// When it arrived (RFC 3339).
    pub received_at: String,
}

/// One dead letter with its evidence, the run, its effects and timeline.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetterDetail {
    /// The record with its evidence.
    pub dead_letter: DeadLetterView,
    /// The run now.
    pub run: Option<RunView>,
    /// The run's effects with their attempt history now.
    pub effects: Vec<EffectView>,
    /// The run's audit trail, in chain order.
    pub timeline: Vec<AuditEventView>,
    /// Replacement links from or to the run.
    pub links: Vec<RunLinkView>,
    /// The stored delivery it is about, if any.
    pub raw_event: Option<RawEventView>,
}

/// Shows one dead letter with its evidence, attempts and the run's timeline.
#[utoipa::path(get, path = "/v1/dead-letters/{id}", tag = "dead letters", operation_id = "show_dead_letter",
    params(("id" = String, Path, description = "Dead letter id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The dead letter", body = DeadLetterDetail),
        (status = 404, description = "No such dead letter", body = super::Problem),
    ))]
pub(super) async fn show(
    State(app): State<AppState>,
    PathId(id): PathId,
) -> Result<Json<DeadLetterDetail>> {
    let dl = app
        .store
        .dead_letter(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no dead letter {id}")))?;
    let corrupt = |e: crate::ledger::InvalidId| ApiError::Internal(Box::new(e));
    let ns = Namespace::parse(dl.namespace.clone()).map_err(corrupt)?;
    let key = IdempotencyKey::parse(dl.key.clone()).map_err(corrupt)?;
    let run = app.store.get_run(&ns, &key).await?;
    let mut effects = Vec::new();
    for effect in app.store.effects_of(&ns, &key).await? {
        let history = app.store.attempts(&effect.id).await?;
        effects.push(EffectView {
            history: views(history),
            ..EffectView::from(effect)
        });
    }
    let raw_event = match &dl.raw_event_id {
        Some(raw) => app.store.raw_event(raw).await?.map(|e| RawEventView {
            id: e.id,
            status: e.status.as_str().to_owned(),
            event_type: e.event_type,
            payload_hash: e.payload_hash.to_string(),
            content_type: e.content_type,
            body_bytes: e.body.len(),
            received_at: to_datetime(e.received_at).to_rfc3339(),
        }),
        None => None,
    };
    Ok(Json(DeadLetterDetail {
        timeline: views(app.store.audit_trail(&ns, &key).await?),
        links: views(app.store.run_links(ns.as_str(), key.as_str()).await?),
        run: run.map(RunView::from),
        effects,
        raw_event,
        dead_letter: DeadLetterView::full(
            dl,
            &app.config.dead_letters,
            &app.config.targets,
            app.clock.now_ms(),
        ),
    }))
}
