//! Reading a delivery: its JSON (Slack's form payloads too), a provider
//! handshake, the event id and type where the source says they are, the
//! headers kept as evidence, and the forward to the workflow.

use std::collections::BTreeMap;

use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderMap;
use serde_json::Value;

use super::accept::{AcceptError, FORWARD_OPERATION};
use super::event::RawEvent;
use super::prepared::PreparedSource;
use super::source::{Locator, SchemeName};
use crate::outbox::{default_idempotency_key, EffectRole, EffectSpec, NewEffect};

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

pub(super) fn parse_json(
    source: &PreparedSource,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Option<Value>, AcceptError> {
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
            .ok_or_else(|| super::accept::invalid("body", "the form has no payload field"))?;
        return serde_json::from_str(&payload).map(Some).map_err(|e| {
            super::accept::invalid("body", format!("the form's payload is not JSON: {e}"))
        });
    }
    serde_json::from_slice(body)
        .map(Some)
        .map_err(|e| super::accept::invalid("body", format!("the body is not JSON: {e}")))
}

pub(super) fn slack_handshake(source: &PreparedSource, json: Option<&Value>) -> Option<String> {
    let body = json?;
    (source.config.scheme == SchemeName::Slack && body["type"] == "url_verification")
        .then(|| body["challenge"].as_str().map(str::to_owned))
        .flatten()
}

pub(super) fn locate(
    locator: &Locator,
    headers: &HeaderMap,
    json: Option<&Value>,
) -> Option<String> {
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

pub(super) fn kept_headers(headers: &HeaderMap) -> BTreeMap<String, String> {
    KEPT_HEADERS
        .iter()
        .filter_map(|name| {
            let value = headers.get(*name)?.to_str().ok()?;
            Some(((*name).to_owned(), value.to_owned()))
        })
        .collect()
}

/// The forward of `event` to its source's workflow: the body byte for
/// byte, under the key fixed at acceptance.
pub(super) fn forward_effect(source: &PreparedSource, event: &RawEvent) -> NewEffect {
    let mut headers = BTreeMap::new();
    headers.insert(
        "content-type".to_owned(),
        event
            .content_type
            .clone()
            .unwrap_or_else(|| "application/json".into()),
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
        role: EffectRole::Act,
        schema_version: None,
    }
}
