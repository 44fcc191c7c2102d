//! One span and one duration sample per HTTP request.
//!
//! The span carries the method, the matched route template (never the raw
//! path or query, which may hold keys), the correlation id, the client's
//! address (the peer, or what a trusted proxy passed: [`super::client`]), and, once a
//! handler knows them, the run's namespace, key and fencing version (see
//! [`record_run`]). The correlation id comes from a well-formed
//! `X-Correlation-Id` header or is generated; it is echoed in the response,
//! handed to handlers as a [`CorrelationId`] extension, and becomes the
//! run's correlation id when a claim names none, so the dispatch of the
//! run's effects logs under the same id.

use std::net::SocketAddr;
use std::time::Instant;

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::field::Empty;
use tracing::Instrument;

use super::client::client_address;
use crate::state::AppState;

/// The correlation id header, read and echoed.
pub const CORRELATION_HEADER: &str = "x-correlation-id";

/// Longest correlation id taken from a caller.
const MAX_CORRELATION_LEN: usize = 128;

/// The request's correlation id, as an extension for handlers, which
/// take it as `Option<CorrelationId>` (absent outside the telemetry layer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorrelationId(pub String);

impl<S: Send + Sync> axum::extract::OptionalFromRequestParts<S> for CorrelationId {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<Self>().cloned())
    }
}

/// The caller's correlation id when it is 1–128 visible ASCII characters
/// (so it cannot forge log lines), else a fresh UUIDv7.
pub fn correlation_id(headers: &HeaderMap) -> String {
    headers
        .get(CORRELATION_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty()
                && v.len() <= MAX_CORRELATION_LEN
                && v.bytes().all(|b| b.is_ascii_graphic())
        })
        .map_or_else(|| uuid::Uuid::now_v7().to_string(), str::to_owned)
}

pub use crate::ledger::span::record_run;

/// Probes scraped every few seconds log at debug, not info.
fn is_probe(route: &str) -> bool {
    matches!(route, "/healthz" | "/readyz" | "/metrics")
}

/// The middleware: span, correlation id, duration histogram, one log line.
pub(crate) async fn observe(State(app): State<AppState>, mut req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let method = req.method().clone();
    let correlation = correlation_id(req.headers());
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    let client = client_address(peer, req.headers(), &app.config.server.trusted_proxies)
        .map_or_else(String::new, |ip| ip.to_string());
    req.extensions_mut()
        .insert(CorrelationId(correlation.clone()));
    let span = tracing::info_span!(
        "request",
        method = %method,
        route = %route,
        correlation_id = %correlation,
        client = %client,
        namespace = Empty,
        key = Empty,
        version = Empty,
    );
    let started = Instant::now();
    let mut response = next.run(req).instrument(span.clone()).await;
    let took = started.elapsed();
    let status = response.status();
    app.metrics.http_request(&route, &method, status, took);
    let ms = took.as_secs_f64() * 1000.0;
    span.in_scope(|| {
        if is_probe(&route) {
            tracing::debug!(status = status.as_u16(), ms, "request finished");
        } else {
            tracing::info!(status = status.as_u16(), ms, "request finished");
        }
    });
    if let Ok(value) = HeaderValue::from_str(&correlation) {
        response.headers_mut().insert(CORRELATION_HEADER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn correlation_ids_are_taken_only_when_well_formed() {
        let mut headers = HeaderMap::new();
        headers.insert(CORRELATION_HEADER, HeaderValue::from_static("req-42"));
        assert_eq!(correlation_id(&headers), "req-42");
        headers.insert(CORRELATION_HEADER, HeaderValue::from_static("two words"));
        assert_ne!(correlation_id(&headers), "two words");
        let long = "x".repeat(129);
        headers.insert(CORRELATION_HEADER, HeaderValue::from_str(&long).unwrap());
        assert_eq!(correlation_id(&headers).len(), 36, "a generated UUID");
        assert_eq!(correlation_id(&HeaderMap::new()).len(), 36);
    }
}
