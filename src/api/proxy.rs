//! `ANY /proxy/{name}/{path}`: the Idempotency-Key proxy
//! ([`crate::proxy`]), and `POST /v1/proxy/resolve`, an operator's
//! decision on an unknown key.

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::{ApiError, Result};
use super::hooks::unreadable;
use super::runs::RunView;
use super::telemetry::CorrelationId;
use super::{auth, ApiJson, Caller};
use crate::api::auth::Scoped;
use crate::ledger::{IdempotencyKey, Namespace};
use crate::proxy::request::Inbound;
use crate::proxy::resolve::{resolve as decide, Decision, Finding};
use crate::proxy::{Answer, Reply};
use crate::state::AppState;

pub(super) fn router(state: AppState) -> Router<AppState> {
    let proxied = Router::new()
        .route("/proxy/{name}", any(forward))
        .route("/proxy/{name}/{*path}", any(forward))
        .only(state.clone(), auth::PROXY);
    let operator = Router::new()
        .route("/v1/proxy/resolve", post(resolve))
        .only(state, auth::OPERATOR_OR_ADMIN);
    proxied.merge(operator)
}

/// Forwards one request through proxy `name` with the semantics of
/// draft-ietf-httpapi-idempotency-key-header (any method; `path` and the
/// query are appended to the target's base URL).
#[utoipa::path(post, path = "/proxy/{name}/{path}", tag = "proxy",
    params(
        ("name" = String, Path, description = "A configured proxy"),
        ("path" = String, Path, description = "Appended to the target's base URL (any method is forwarded, not only POST)"),
        ("Idempotency-Key" = Option<String>, Header, description = "An RFC 8941 string, e.g. \"order-42\"; required unless the proxy's key is optional"),
    ),
    request_body(content = String, description = "Forwarded byte for byte", content_type = "application/octet-stream"),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The upstream's answer (any status), or the stored answer of the key's first request with `Idempotent-Replayed: true`"),
        (status = 400, description = "Idempotency-Key missing or malformed, or the path leaves the target; nothing sent", body = super::Problem),
        (status = 403, description = "The token lacks the proxy scope", body = super::Problem),
        (status = 409, description = "The key is in flight (`Retry-After`), its outcome is unknown, it is closed, or its answer expired; nothing sent", body = super::Problem),
        (status = 413, description = "Body over the proxy's max_request_bytes; nothing sent", body = super::Problem),
        (status = 422, description = "The key was used for a different request; nothing sent", body = super::Problem),
        (status = 502, description = "Upstream unreachable (nothing sent), no answer after sending (the key is now unknown), or an answer too long to keep", body = super::Problem),
        (status = 503, description = "Kill switch engaged or no free send slot; nothing sent", body = super::Problem),
    ))]
pub(super) async fn forward(
    State(app): State<AppState>,
    caller: Caller,
    correlation: Option<CorrelationId>,
    req: Request,
) -> Result<Response> {
    let (parts, body) = req.into_parts();
    let rest = parts.uri.path().strip_prefix("/proxy/").unwrap_or_default();
    let (name, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let name = name.to_owned();
    let proxy = app
        .proxies
        .get(&name)
        .ok_or_else(|| ApiError::NotFound(format!("no proxy is named {name:?}")))?;
    let limit = proxy.config.max_request_bytes;
    let body = to_bytes(Body::new(body), limit).await.map_err(|err| {
        match unreadable(err, limit, app.config.server.body_read_timeout_ms) {
            ApiError::TooLarge { .. } => crate::proxy::ProxyError::TooLarge(limit).into(),
            other => other,
        }
    })?;
    let inbound = Inbound {
        method: parts.method,
        path: path.to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts.headers,
        body,
    };
    let who = crate::proxy::Caller {
        subject: caller.subject.clone(),
        correlation_id: correlation.map(|c| c.0),
    };
    // The forward runs on its own task: a caller that hangs up (or the
    // request timeout) never cuts a forward off before its outcome is
    // recorded.
    let task = tokio::spawn(async move { app.proxy().handle(&name, &who, inbound).await });
    let reply = task.await.map_err(|e| ApiError::Internal(Box::new(e)))??;
    Ok(match reply {
        Reply::Replayed(answer) => respond(answer, true),
        Reply::Fresh(answer) | Reply::PassedThrough(answer) | Reply::Unprotected(answer) => {
            respond(answer, false)
        }
    })
}

/// The answer as an HTTP response; a replay says so.
fn respond(answer: Answer, replayed: bool) -> Response {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut response = (status, answer.body).into_response();
    let headers = response.headers_mut();
    headers.remove(axum::http::header::CONTENT_TYPE);
    for (name, value) in &answer.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.append(n, v);
        }
    }
    if replayed {
        headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}

/// An operator's decision on an unknown key.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveBody {
    /// The proxy's name.
    pub proxy: String,
    /// The token subject that sent the key.
    pub subject: String,
    /// The key as the client sent it (the string's content, unquoted).
    pub key: String,
    /// `found` (it happened upstream: the key closes) or `not_found` (it
    /// did not: the next request with the key is forwarded).
    pub finding: Finding,
    /// Why (required).
    pub note: String,
}

/// What the decision did.
#[derive(Debug, Serialize, ToSchema)]
pub struct Resolved {
    /// The key's run after the decision.
    pub run: Option<RunView>,
}

/// Resolves an unknown key as found or not found.
#[utoipa::path(post, path = "/v1/proxy/resolve", tag = "proxy", operation_id = "resolve_proxy_key", request_body = ResolveBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Resolved: the run is failed_terminal (found) or failed_retryable (not found)", body = Resolved),
        (status = 400, description = "Malformed request", body = super::Problem),
        (status = 404, description = "No such proxy", body = super::Problem),
        (status = 409, description = "The key is not unknown, or its dead letter refused the command", body = super::Problem),
    ))]
pub(super) async fn resolve(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<ResolveBody>,
) -> Result<Json<Resolved>> {
    if body.note.trim().is_empty() {
        return Err(ApiError::invalid("note", "say what you found upstream"));
    }
    let proxy = app
        .proxies
        .get(&body.proxy)
        .ok_or_else(|| ApiError::NotFound(format!("no proxy is named {:?}", body.proxy)))?;
    let namespace: Namespace = proxy.namespace.clone();
    let key = crate::proxy::key::ProxyKey::unquoted(&body.key)
        .scoped(&body.subject)
        .map_err(|e| ApiError::invalid("key", e.to_string()))?;
    let decision = Decision {
        namespace,
        key: IdempotencyKey::parse(key.as_str())?,
        finding: body.finding,
        actor: caller.subject.clone(),
        note: body.note,
        retain_ms: app.config.dead_letters.retain_ms(),
    };
    let run = decide(app.store.as_ref(), app.store.as_ref(), &decision).await?;
    Ok(Json(Resolved {
        run: run.map(RunView::from),
    }))
}
