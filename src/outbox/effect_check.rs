//! An effect as a workflow asks for it, checked against its target before
//! anything is stored: a well-formed effect type, a URL inside the
//! target's allow-list, a known method, no credential or dispatcher
//! header, a probe URL inside the target. What its operation allows (is it
//! declared, is it gated) is [`crate::approval::effects`]'s to say.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::{EffectRole, EffectSpec, ExternalIdAt, NewEffect, RejectRule, TargetConfig};

/// Headers an effect may never carry: credentials, and the ones the
/// dispatcher sets itself.
const FORBIDDEN_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-oncegate-key",
    "x-oncegate-namespace",
    "x-oncegate-version",
    "x-correlation-id",
    "host",
    "content-length",
];

/// One intended HTTP write, as a workflow asks for it (the API reads it
/// straight from the request body, so it carries its schema).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EffectRequest {
    /// A declared operation.
    pub operation: String,
    /// What kind of effect; unique per run and target (`send_email`).
    pub effect_type: String,
    /// A configured target.
    pub target: String,
    /// HTTP method (default POST).
    pub method: Option<String>,
    /// A path under the target's base URL…
    pub path: Option<String>,
    /// …or a full URL inside it.
    pub url: Option<String>,
    /// Non-secret headers (credentials live in the target's config).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// A JSON body.
    #[schema(value_type = Option<Object>)]
    pub body: Option<Value>,
    /// A 2xx whose body has `equals` at `pointer` is a business rejection.
    #[schema(value_type = Option<Object>)]
    pub reject: Option<RejectRule>,
    /// Where the target's id is: `{"header": "Location"}` or `{"pointer": "/id"}`.
    #[schema(value_type = Option<Object>)]
    pub external_id: Option<ExternalIdAt>,
    /// A GET URL template (`{external_ref}`, `{idempotency_key}`) that
    /// tells whether an unknown effect happened.
    pub probe_url: Option<String>,
    /// Not to be sent before this time (RFC 3339).
    pub not_before: Option<String>,
}

/// Why an effect was refused: the request field at fault and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct EffectInvalid {
    /// The field (`effects[2].url`).
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

impl EffectRequest {
    /// The effect to queue for `target` under `idempotency_key`; `at` names
    /// the request in refusals (`effects[2]`).
    ///
    /// # Errors
    /// [`EffectInvalid`] for the first field that does not hold.
    pub fn check(
        self,
        at: &str,
        target: &TargetConfig,
        idempotency_key: String,
    ) -> Result<NewEffect, EffectInvalid> {
        let bad = |f: &str, problem: String| EffectInvalid {
            field: format!("{at}.{f}"),
            problem,
        };
        check_type(&self.effect_type).map_err(|p| bad("effect_type", p.into()))?;
        let url = match (self.path, self.url) {
            (Some(path), None) => target.join(&path).map_err(|e| bad("path", e))?,
            (None, Some(url)) if target.allows(&url) => url,
            (None, Some(url)) => {
                return Err(bad(
                    "url",
                    format!("{url} is outside target {}", target.name),
                ))
            }
            _ => return Err(bad("path", "give path or url, not both".into())),
        };
        let method = self
            .method
            .unwrap_or_else(|| "POST".into())
            .to_ascii_uppercase();
        if !matches!(method.as_str(), "GET" | "POST" | "PUT" | "PATCH" | "DELETE") {
            return Err(bad(
                "method",
                "must be GET, POST, PUT, PATCH or DELETE".into(),
            ));
        }
        let mut headers = checked_headers(self.headers, target).map_err(|p| bad("headers", p))?;
        if let Some(probe) = &self.probe_url {
            // The filled URL is checked again at every probe
            // ([`super::egress`]); this refuses what could never pass.
            target
                .check_probe_template(probe)
                .map_err(|p| bad("probe_url", p))?;
        }
        let body = self.body.map(|b| b.to_string().into_bytes());
        if body.is_some() {
            headers
                .entry("content-type".into())
                .or_insert_with(|| "application/json".into());
        }
        let not_before = self
            .not_before
            .map(|t| chrono::DateTime::parse_from_rfc3339(&t).map(|d| d.timestamp_millis()))
            .transpose()
            .map_err(|e| bad("not_before", format!("not an RFC 3339 time: {e}")))?;
        Ok(NewEffect {
            idempotency_key,
            operation: self.operation,
            effect_type: self.effect_type,
            target: self.target,
            method,
            url,
            headers,
            body,
            spec: EffectSpec {
                reject: self.reject,
                external_id: self.external_id,
                probe_url: self.probe_url,
            },
            not_before,
            role: EffectRole::Act,
            schema_version: None,
        })
    }
}

fn check_type(effect_type: &str) -> Result<(), &'static str> {
    let ok = !effect_type.is_empty()
        && effect_type.len() <= 64
        && effect_type
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err("must be 1-64 letters, digits, '_', '.' or '-'")
    }
}

/// The headers lower-cased, refusing credentials and the dispatcher's own.
fn checked_headers(
    asked: BTreeMap<String, String>,
    target: &TargetConfig,
) -> Result<BTreeMap<String, String>, String> {
    let mut headers = BTreeMap::new();
    for (name, value) in asked {
        let lower = name.to_ascii_lowercase();
        let secret = target
            .secret_headers
            .keys()
            .any(|s| s.eq_ignore_ascii_case(&lower));
        if secret
            || FORBIDDEN_HEADERS.contains(&lower.as_str())
            || lower == target.idempotency_header.to_ascii_lowercase()
        {
            return Err(format!(
                "header {name:?} may not be set on an effect: credentials live only in the target's config"
            ));
        }
        headers.insert(lower, value);
    }
    Ok(headers)
}
