//! `POST /hooks/{source}`: authenticate, parse, claim, store, acknowledge.

use std::collections::BTreeMap;

use axum::body::{to_bytes, Body};
use axum::extract::{Path, State};
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::event::{RawEvent, RawStatus};
use super::prepared::PreparedSource;
use super::source::{ConflictPolicy, InFlightPolicy, Locator, SchemeName};
use crate::api::telemetry::{record_run, CorrelationId};
use crate::api::ApiError;
use crate::ledger::{
    BusinessKey, ClaimOutcome, ClaimRequest, IdempotencyKey, Namespace, PayloadHash, RunMetadata,
};
use crate::outbox::{default_idempotency_key, EffectSpec, NewEffect};
use crate::state::AppState;

/// The operation every ingress forward belongs to (the one ungated kind).
pub const FORWARD_OPERATION: &str = "ingress.forward";

/// Headers kept with a stored delivery (never signatures or credentials).
const KEPT_HEADERS: &[&str] = &[
    "content-type",
    "user-agent",
    "x-github-event",
    "x-github-delivery",
    "x-github-hook-id",
    "x-shopify-topic",
    "x-shopify-webhook-id",
    "x-shopify-shop-domain",
    "x-slack-request-timestamp",
    "webhook-id",
    "webhook-timestamp",
    "svix-id",
    "svix-timestamp",
];

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/hooks/{source}", post(receive))
}

/// Receives one delivery from a configured source.
#[utoipa::path(post, path = "/hooks/{source}", tag = "ingress",
    params(("source" = String, Path, description = "A configured source name")),
    request_body(content = String, description = "The provider's raw body, signed", content_type = "application/json"),
    responses(
        (status = 200, description = "Accepted, duplicate, or quarantined: {\"received\":true,…}"),
        (status = 400, description = "Unreadable body, or no event id", body = crate::api::Problem),
        (status = 401, description = "Signature refused; nothing stored", body = crate::api::Problem),
        (status = 404, description = "Unknown source", body = crate::api::Problem),
        (status = 409, description = "In flight, and the source asks providers to retry", body = crate::api::Problem),
        (status = 413, description = "Body over the source's limit; nothing stored", body = crate::api::Problem),
        (status = 422, description = "Conflicting body, and the source rejects", body = crate::api::Problem),
        (status = 503, description = "The database is unavailable (down, restarting, read-only, full); nothing was acknowledged, redeliver later", body = crate::api::Problem),
    ))]
pub(crate) async fn receive(
    State(app): State<AppState>,
    Path(name): Path<String>,
    correlation: Option<axum::Extension<CorrelationId>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let source = app
        .sources
        .get(&name)
        .ok_or_else(|| ApiError::NotFound(format!("no source is configured as {name:?}")))?;
    let limit = source.config.max_body_bytes;
    let body = to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::TooLarge { limit })?;

    let now_ms = app.clock.now_ms();
    if let Err(err) = source
        .verifier
        .verify(&headers, &body, now_ms.div_euclid(1000))
    {
        app.metrics.signature_failed(&name);
        tracing::warn!(source = %name, reason = %err, "webhook signature refused");
        return Err(ApiError::Unauthenticated(format!(
            "signature refused: {err}"
        )));
    }

    let json = parse_json(source, &headers, &body)?;
    if let Some(challenge) = slack_handshake(source, json.as_ref()) {
        return Ok(Json(json!({ "challenge": challenge })).into_response());
    }
    let event_id = locate(&source.event_id, &headers, json.as_ref()).ok_or_else(|| {
        ApiError::invalid(
            "event_id",
            format!("the delivery has no event id at {:?}", source.event_id),
        )
    })?;
    let key = IdempotencyKey::parse(event_id.clone()).map_err(|e| {
        ApiError::invalid(
            "event_id",
            format!("the event id is unusable as a key: {e}"),
        )
    })?;
    record_run(&name, key.as_str(), None);
    let event_type = source
        .event_type
        .as_ref()
        .and_then(|l| locate(l, &headers, json.as_ref()));
    let business_key = match (&source.business_key, &json) {
        (Some(template), Some(body)) => Some(
            template
                .render(body)
                .and_then(|k| BusinessKey::parse(k).map_err(|e| e.to_string()))
                .map_err(|e| ApiError::invalid("business_key", e))?,
        ),
        _ => None,
    };

    let payload_hash = PayloadHash::of_bytes(&body);
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let event = RawEvent {
        id: uuid::Uuid::now_v7().to_string(),
        source: name.clone(),
        event_id: event_id.clone(),
        event_type: event_type.clone(),
        status: RawStatus::Accepted,
        payload_hash: payload_hash.clone(),
        content_type: content_type.clone(),
        headers: kept_headers(&headers),
        body: body.to_vec(),
        received_at: now_ms,
    };
    let claim = ClaimRequest {
        namespace: Namespace::parse(name.clone())?,
        key,
        business_key,
        payload_hash,
        lease_ms: app.config.ledger.default_lease_ms,
        metadata: RunMetadata {
            operation: Some(FORWARD_OPERATION.into()),
            // The delivery's log lines and its forward's share one id.
            correlation_id: correlation.map(|axum::Extension(c)| c.0),
            ..RunMetadata::default()
        },
        claimed_by: format!("ingress:{name}"),
    };
    let forward = forward_effect(source, &event, content_type);
    let outcome = app.store.accept_event(&claim, &event, &forward).await?;
    if let ClaimOutcome::Claimed { run, .. } = &outcome {
        // Stored with its forward, not yet acknowledged (chaos tests).
        crate::chaos::point("after_effect_insert");
        tracing::Span::current().record("version", run.version.get());
        app.wake.notify_one();
    }
    app.metrics.claim_answered(&name, &outcome);
    app.metrics
        .ingress_event(&name, event_type.as_deref(), &outcome);
    answer(&app, source, outcome, event).await
}

/// Turns the claim's outcome into the provider's answer.
async fn answer(
    app: &AppState,
    source: &PreparedSource,
    outcome: ClaimOutcome,
    event: RawEvent,
) -> Result<Response, ApiError> {
    let body = match outcome {
        ClaimOutcome::Claimed { .. } => json!({ "received": true }),
        ClaimOutcome::Duplicate(_) | ClaimOutcome::Finished(_) => {
            json!({ "received": true, "duplicate": true })
        }
        ClaimOutcome::DuplicateOf(holder) => json!({
            "received": true,
            "duplicate": true,
            "duplicate_of": { "namespace": holder.namespace.as_str(), "key": holder.key.as_str() },
        }),
        ClaimOutcome::InFlight(run) => match source.config.in_flight {
            InFlightPolicy::Ack => {
                json!({ "received": true, "duplicate": true, "in_flight": true })
            }
            InFlightPolicy::Retry => {
                let secs = (app.config.ledger.in_flight_retry_after_ms + 999) / 1000;
                let mut response = ApiError::InFlight(format!(
                    "event {} is still being handled ({}); retry later",
                    run.key, run.state
                ))
                .into_response();
                if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
                    response.headers_mut().insert(RETRY_AFTER, value);
                }
                return Ok(response);
            }
        },
        ClaimOutcome::Conflict(run) => {
            app.metrics.payload_conflict(&source.config.name);
            tracing::warn!(source = %source.config.name, "same event id, different body");
            match source.config.on_conflict {
                ConflictPolicy::Reject => {
                    return Err(ApiError::PayloadConflict {
                        namespace: run.namespace.to_string(),
                        key: run.key.to_string(),
                        stored_hash: run.payload_hash.to_string(),
                        offered_hash: event.payload_hash.to_string(),
                    })
                }
                ConflictPolicy::Quarantine => {
                    let event = RawEvent {
                        status: RawStatus::Quarantined,
                        ..event
                    };
                    app.store.quarantine_event(&event, &run).await?;
                    json!({ "received": true, "quarantined": true })
                }
            }
        }
    };
    Ok(Json(body).into_response())
}

fn parse_json(
    source: &PreparedSource,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Option<Value>, ApiError> {
    if !source.needs_json() {
        return Ok(None);
    }
    let form = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/x-www-form-urlencoded"));
    if form && source.config.scheme == SchemeName::Slack {
        // Slack's interactive payloads arrive as a form with one `payload` field.
        let payload = url::form_urlencoded::parse(body)
            .find(|(k, _)| k == "payload")
            .map(|(_, v)| v.into_owned())
            .ok_or_else(|| ApiError::invalid("body", "the form has no payload field"))?;
        return serde_json::from_str(&payload).map(Some).map_err(|e| {
            ApiError::invalid("body", format!("the form's payload is not JSON: {e}"))
        });
    }
    serde_json::from_slice(body)
        .map(Some)
        .map_err(|e| ApiError::invalid("body", format!("the body is not JSON: {e}")))
}

fn slack_handshake(source: &PreparedSource, json: Option<&Value>) -> Option<String> {
    let body = json?;
    (source.config.scheme == SchemeName::Slack && body["type"] == "url_verification")
        .then(|| body["challenge"].as_str().map(str::to_owned))
        .flatten()
}

fn locate(locator: &Locator, headers: &HeaderMap, json: Option<&Value>) -> Option<String> {
    match locator {
        Locator::Header(name) => headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        Locator::Pointer(pointer) => match json?.pointer(pointer)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        },
    }
    .filter(|v| !v.is_empty())
}

fn kept_headers(headers: &HeaderMap) -> BTreeMap<String, String> {
    KEPT_HEADERS
        .iter()
        .filter_map(|name| {
            let value = headers.get(*name)?.to_str().ok()?;
            Some(((*name).to_owned(), value.to_owned()))
        })
        .collect()
}

fn forward_effect(
    source: &PreparedSource,
    event: &RawEvent,
    content_type: Option<String>,
) -> NewEffect {
    let mut headers = BTreeMap::new();
    headers.insert(
        "content-type".to_owned(),
        content_type.unwrap_or_else(|| "application/json".into()),
    );
    headers.insert("x-oncegate-source".to_owned(), event.source.clone());
    headers.insert("x-oncegate-event-id".to_owned(), event.event_id.clone());
    if let Some(kind) = &event.event_type {
        headers.insert("x-oncegate-event-type".to_owned(), kind.clone());
    }
    NewEffect {
        operation: FORWARD_OPERATION.into(),
        effect_type: "forward".into(),
        target: source.config.target.clone(),
        method: "POST".into(),
        url: source.forward_url.clone(),
        headers,
        body: Some(event.body.clone()),
        idempotency_key: default_idempotency_key(&event.source, &event.event_id, "forward"),
        spec: EffectSpec::default(),
        not_before: None,
        role: crate::outbox::EffectRole::Act,
    }
}
