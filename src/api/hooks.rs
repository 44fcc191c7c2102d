//! `POST /hooks/{source}`: reads the delivery's body within its source's
//! limit, hands it to the intake ([`crate::ingress::Intake::accept`]) and
//! answers the provider.

use crate::api::PathId;
use axum::body::{to_bytes, Body};
use axum::extract::State;
use axum::http::header::{CONTENT_LENGTH, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::json;

use super::error::ApiError;
use super::telemetry::CorrelationId;
use crate::ingress::{AcceptError, Answer, Delivery};
use crate::state::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/hooks/{source}", post(receive))
}

/// Receives one delivery from a configured source.
#[utoipa::path(post, path = "/hooks/{source}", tag = "ingress",
    params(("source" = String, Path, description = "A configured source name")),
    request_body(content = String, description = "The provider's raw body, signed", content_type = "application/json"),
    responses(
        (status = 200, description = "Accepted, duplicate, or quarantined: {\"received\":true,…}"),
        (status = 400, description = "Unreadable body, or no event id", body = super::Problem),
        (status = 408, description = "The body stalled past `[server] body_read_timeout_ms`; nothing stored", body = super::Problem),
        (status = 401, description = "Signature refused; nothing stored", body = super::Problem),
        (status = 404, description = "Unknown source", body = super::Problem),
        (status = 409, description = "In flight, and the source asks providers to retry", body = super::Problem),
        (status = 413, description = "Body over the source's limit; nothing stored", body = super::Problem),
        (status = 422, description = "Conflicting body, and the source rejects", body = super::Problem),
        (status = 503, description = "The database is unavailable (down, restarting, read-only, full), or unauthenticated bodies fill their budget; nothing was acknowledged, redeliver later", body = super::Problem),
    ))]
pub(crate) async fn receive(
    State(app): State<AppState>,
    PathId(name): PathId,
    correlation: Option<CorrelationId>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let intake = app.intake();
    let limit = intake.body_limit(&name)?;
    let body = match to_bytes(body, limit).await {
        Ok(body) => body,
        Err(err) => {
            let err = unreadable(err, limit, app.config.server.body_read_timeout_ms);
            if matches!(err, ApiError::TooLarge { .. }) {
                let declared = headers
                    .get(CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok()?.parse().ok());
                intake.too_large(&name, declared);
            }
            return Err(err);
        }
    };
    let delivery = Delivery {
        headers: &headers,
        body: &body,
        correlation_id: correlation.as_ref().map(|c| c.0.as_str()),
    };
    let answer = match intake.accept(&name, delivery).await {
        Ok(answer) => answer,
        Err(AcceptError::InFlight {
            key,
            state,
            retry_after_secs,
        }) => return Ok(retry_later(&key, state, retry_after_secs)),
        Err(err) => return Err(err.into()),
    };
    let body = match answer {
        Answer::Handshake(challenge) => json!({ "challenge": challenge }),
        Answer::Accepted => json!({ "received": true }),
        Answer::Duplicate => json!({ "received": true, "duplicate": true }),
        Answer::DuplicateOf { namespace, key } => json!({
            "received": true,
            "duplicate": true,
            "duplicate_of": { "namespace": namespace, "key": key },
        }),
        Answer::InFlight => json!({ "received": true, "duplicate": true, "in_flight": true }),
        Answer::Quarantined => json!({ "received": true, "quarantined": true }),
    };
    Ok(Json(body).into_response())
}

/// Why a body could not be read: over the limit (413), stalled past the
/// body read timeout (408), or cut off (400).
pub(super) fn unreadable(err: axum::Error, limit: usize, timeout_ms: u64) -> ApiError {
    let err = err.into_inner();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err.as_ref());
    while let Some(e) = cause {
        if e.is::<http_body_util::LengthLimitError>() {
            return ApiError::TooLarge { limit };
        }
        if e.is::<tower_http::timeout::TimeoutError>() {
            return ApiError::Timeout(timeout_ms);
        }
        cause = e.source();
    }
    ApiError::Invalid {
        field: None,
        detail: format!("the request body could not be read: {err}"),
    }
}

/// 409 with `Retry-After`: the provider redelivers later.
fn retry_later(key: &str, state: crate::ledger::RunState, secs: i64) -> Response {
    let mut response = ApiError::InFlight(format!(
        "event {key} is still being handled ({state}); retry later"
    ))
    .into_response();
    if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
        response.headers_mut().insert(RETRY_AFTER, value);
    }
    response
}
