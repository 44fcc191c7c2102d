//! The deliveries log over HTTP (operator scope): search what every
//! request to `/hooks/{source}` came to, see the latest unauthenticated
//! refusals (kept in memory only), and the operator's forwards of a
//! stored delivery: forward anyway (a `duplicate_of` event, once) and
//! redeliver (an event that reached its workflow, as a new run).

use crate::api::auth::Scoped;
use crate::api::PathId;
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::access::{check, Access};
use super::auth;
use super::deadletters::actions::required_text;
use super::error::{ApiError, Result};
use super::runs::{RunRef, RunView};
use super::{ApiJson, Caller};
use crate::clock::to_datetime;
use crate::criteria::Cursor;
use crate::ingress::{DeliveryCriteria, DeliveryEntry, ForwardAsk, Refused};
use crate::state::AppState;
use crate::tokens::Principal;

pub(super) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/deliveries", get(list))
        .route("/v1/deliveries/refused", get(refused))
        .route("/v1/deliveries/{id}", get(show))
        .route("/v1/deliveries/{id}/forward", post(forward))
        .route("/v1/deliveries/{id}/redeliver", post(redeliver))
        .only(state, auth::OPERATOR_OR_ADMIN)
}

/// One entry of the deliveries log (never the body).
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryView {
    /// Stable id.
    pub id: String,
    /// The configured source.
    pub source: String,
    /// The provider's event id, when it was read.
    pub event_id: Option<String>,
    /// The provider's event type, when it was read.
    pub event_type: Option<String>,
    /// `accepted`, `duplicate`, `in_flight`, `duplicate_of`, `quarantined`,
    /// `conflict_rejected`, `handshake` or `bad_request`.
    pub outcome: String,
    /// The HTTP status the provider was answered with.
    pub status: u16,
    /// SHA-256 of the body.
    pub payload_hash: String,
    /// Size of the body in bytes.
    pub body_bytes: i64,
    /// The stored raw event (accepted, quarantined, duplicate_of).
    pub raw_event_id: Option<String>,
    /// The run it concerns: its own, or (duplicate_of) the one holding its business key.
    pub run: Option<RunRef>,
    /// Why a bad request was refused.
    pub detail: Option<String>,
    /// The run an operator's "forward anyway" made of it.
    pub forwarded: Option<ForwardedView>,
    /// How many times an operator redelivered it.
    pub redeliveries: i64,
    /// When it arrived (RFC 3339).
    pub received_at: String,
}

/// An operator's "forward anyway".
#[derive(Debug, Serialize, ToSchema)]
pub struct ForwardedView {
    /// The run it was forwarded as.
    pub run: RunRef,
    /// The operator.
    pub by: String,
    /// When (RFC 3339).
    pub at: String,
}

impl From<DeliveryEntry> for DeliveryView {
    fn from(e: DeliveryEntry) -> Self {
        let forwarded = e.forwarded.map(|f| ForwardedView {
            run: RunRef {
                namespace: e.source.clone(),
                key: f.key,
            },
            by: f.by,
            at: to_datetime(f.at).to_rfc3339(),
        });
        Self {
            id: e.id,
            source: e.source,
            event_id: e.event_id,
            event_type: e.event_type,
            outcome: e.outcome.to_string(),
            status: e.status,
            payload_hash: e.payload_hash,
            body_bytes: e.body_bytes,
            raw_event_id: e.raw_event_id,
            run: e.run.map(|(namespace, key)| RunRef { namespace, key }),
            detail: e.detail,
            forwarded,
            redeliveries: e.redeliveries,
            received_at: to_datetime(e.received_at).to_rfc3339(),
        }
    }
}

/// A page of the log.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryPage {
    /// The entries, newest first.
    pub items: Vec<DeliveryView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// A token limited to some namespaces must name a source it reaches.
fn reach(app: &AppState, caller: &Principal, source: Option<&str>) -> Result<()> {
    match source {
        Some(source) => check(app, caller, source, Access::Read),
        None => match caller.namespaces.describe() {
            None => Ok(()),
            Some(list) => Err(ApiError::NamespaceRefused {
                slug: "namespace-not-allowed",
                detail: format!("this token reaches only the namespaces {list}: name a source"),
            }),
        },
    }
}

/// Searches the deliveries log, newest first.
#[utoipa::path(get, path = "/v1/deliveries", tag = "ingress", operation_id = "list_deliveries", params(DeliveryCriteria),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A page of the log", body = DeliveryPage),
        (status = 400, description = "A bad criterion", body = super::Problem),
        (status = 403, description = "A source outside the token's namespaces (or none named by a limited token)", body = super::Problem),
    ))]
pub(super) async fn list(
    State(app): State<AppState>,
    caller: Caller,
    crate::api::ApiQuery(criteria): crate::api::ApiQuery<DeliveryCriteria>,
) -> Result<Json<DeliveryPage>> {
    let filter = criteria.into_filter(app.clock.now_ms())?;
    reach(&app, &caller, filter.source.as_deref())?;
    app.logbook.flush().await;
    let found = app.store.deliveries(&filter).await?;
    let next_cursor = Cursor::after_full(&found, filter.limit, |e| (e.received_at, &e.id));
    let items = found.into_iter().map(DeliveryView::from).collect();
    Ok(Json(DeliveryPage { items, next_cursor }))
}

/// Shows one entry of the log.
#[utoipa::path(get, path = "/v1/deliveries/{id}", tag = "ingress", operation_id = "show_delivery",
    params(("id" = String, Path, description = "Delivery id")), security(("bearer" = [])),
    responses(
        (status = 200, description = "The entry", body = DeliveryView),
        (status = 403, description = "Its source is outside the token's namespaces", body = super::Problem),
        (status = 404, description = "No such entry", body = super::Problem),
    ))]
pub(super) async fn show(
    State(app): State<AppState>,
    caller: Caller,
    PathId(id): PathId,
) -> Result<Json<DeliveryView>> {
    app.logbook.flush().await;
    let entry = app
        .store
        .delivery(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no delivery {id:?} in the log")))?;
    reach(&app, &caller, Some(&entry.source))?;
    Ok(Json(entry.into()))
}

/// Which refusals to show.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RefusedQuery {
    /// Only this source.
    pub source: Option<String>,
    /// At most this many, 1–500 (default 50).
    pub limit: Option<usize>,
}

/// One unauthenticated request, as this process remembers it.
#[derive(Debug, Serialize, ToSchema)]
pub struct RefusedView {
    /// The configured source.
    pub source: String,
    /// `signature_refused` or `too_large`.
    pub outcome: String,
    /// The HTTP status answered.
    pub status: u16,
    /// Why.
    pub reason: String,
    /// SHA-256 of the body, when it was read.
    pub payload_hash: Option<String>,
    /// Size of the body in bytes (-1: unknown).
    pub body_bytes: i64,
    /// When it arrived (RFC 3339).
    pub received_at: String,
}

impl From<Refused> for RefusedView {
    fn from(r: Refused) -> Self {
        Self {
            source: r.source,
            outcome: r.outcome.to_string(),
            status: r.status,
            reason: r.reason,
            payload_hash: r.payload_hash,
            body_bytes: r.body_bytes,
            received_at: to_datetime(r.received_at).to_rfc3339(),
        }
    }
}

/// The latest unauthenticated requests, newest first: kept in this
/// process's memory only (a bounded ring per source), never in the database.
#[utoipa::path(get, path = "/v1/deliveries/refused", tag = "ingress", operation_id = "list_refused_deliveries", params(RefusedQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The latest refusals", body = Vec<RefusedView>),
        (status = 400, description = "A bad parameter", body = super::Problem),
        (status = 403, description = "A source outside the token's namespaces", body = super::Problem),
    ))]
pub(super) async fn refused(
    State(app): State<AppState>,
    caller: Caller,
    crate::api::ApiQuery(q): crate::api::ApiQuery<RefusedQuery>,
) -> Result<Json<Vec<RefusedView>>> {
    let limit = q.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::invalid("limit", "must be between 1 and 500"));
    }
    let source = q.source.filter(|s| !s.trim().is_empty());
    reach(&app, &caller, source.as_deref())?;
    let latest = app.refused.latest(source.as_deref(), limit);
    Ok(Json(latest.into_iter().map(RefusedView::from).collect()))
}

/// `POST /v1/deliveries/{id}/forward` and `…/redeliver`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForwardBody {
    /// Why, for the audit log (required).
    pub reason: String,
}

/// What a forward made: the new run, and the entry after it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ForwardResponse {
    /// The new run (approved, its forward queued).
    pub run: RunView,
    /// The log entry after the forward.
    pub delivery: DeliveryView,
}

async fn forwarded(
    app: &AppState,
    caller: &Principal,
    id: String,
    body: ForwardBody,
    ask: ForwardAsk,
) -> Result<Json<ForwardResponse>> {
    let reason = required_text("reason", body.reason, 2_000)?;
    let actor = caller.subject.as_str();
    let done = app
        .delivery_actions()
        .forward(&id, ask, actor, &reason, |entry| {
            reach(app, caller, Some(&entry.source))
        })
        .await?;
    Ok(Json(ForwardResponse {
        run: done.run.into(),
        delivery: done.entry.into(),
    }))
}

/// Forwards a `duplicate_of` delivery anyway, once: its own event id
/// becomes a run with the forward queued, audited and linked to the run
/// that holds its business key.
#[utoipa::path(post, path = "/v1/deliveries/{id}/forward", tag = "ingress", operation_id = "forward_delivery",
    params(("id" = String, Path, description = "Delivery id")), request_body = ForwardBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Forward queued", body = ForwardResponse),
        (status = 400, description = "No reason given", body = super::Problem),
        (status = 403, description = "Its source is outside the token's namespaces", body = super::Problem),
        (status = 404, description = "No such entry", body = super::Problem),
        (status = 409, description = "Not a duplicate_of delivery, forwarded already, its body redacted or gone, or its key taken; nothing changed", body = super::Problem),
    ))]
pub(super) async fn forward(
    State(app): State<AppState>,
    caller: Caller,
    PathId(id): PathId,
    ApiJson(body): ApiJson<ForwardBody>,
) -> Result<Json<ForwardResponse>> {
    forwarded(&app, &caller, id, body, ForwardAsk::Anyway).await
}

/// Redelivers a stored event to its workflow: a new run
/// (`<event id>~redelivery-<n>`) with the forward queued, audited and
/// linked to the first.
#[utoipa::path(post, path = "/v1/deliveries/{id}/redeliver", tag = "ingress", operation_id = "redeliver_delivery",
    params(("id" = String, Path, description = "Delivery id")), request_body = ForwardBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Forward queued", body = ForwardResponse),
        (status = 400, description = "No reason given", body = super::Problem),
        (status = 403, description = "Its source is outside the token's namespaces", body = super::Problem),
        (status = 404, description = "No such entry", body = super::Problem),
        (status = 409, description = "Not an event that reached its workflow, its body redacted or gone, or changed meanwhile; nothing changed", body = super::Problem),
    ))]
pub(super) async fn redeliver(
    State(app): State<AppState>,
    caller: Caller,
    PathId(id): PathId,
    ApiJson(body): ApiJson<ForwardBody>,
) -> Result<Json<ForwardResponse>> {
    forwarded(&app, &caller, id, body, ForwardAsk::Redeliver).await
}
