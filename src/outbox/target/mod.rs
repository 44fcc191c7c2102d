//! Targets: where effects may go (the allow-list) and how to reach them.

use std::collections::BTreeMap;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

/// What sits behind a target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// An external system (email, CRM, payments).
    #[default]
    Http,
    /// A workflow engine's webhook (n8n): retry-safe by construction, so it
    /// honours keys by default, and the statuses a restarting engine gives
    /// (404 before its webhook is registered, 502/503 behind a proxy) are
    /// transient.
    Workflow,
}

/// The retry budget of one target; the dispatcher is the one layer that owns it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryBudget {
    /// Attempts including the first.
    pub max_attempts: u32,
    /// Base delay of full-jitter backoff, in milliseconds.
    pub base_ms: u64,
    /// Cap of one delay (and of an honoured `Retry-After`), in milliseconds.
    pub cap_ms: u64,
    /// No retry starts later than this after the first attempt, in milliseconds.
    pub max_elapsed_ms: u64,
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self {
            max_attempts: 8,
            base_ms: 500,
            cap_ms: 60_000,
            max_elapsed_ms: 3_600_000,
        }
    }
}

/// `[[targets]]`: one allowed destination for effects.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetConfig {
    /// The name effects and sources refer to.
    pub name: String,
    /// Every effect URL must start with this (scheme, host, port, path prefix).
    pub base_url: String,
    /// External system or workflow engine.
    #[serde(default)]
    pub kind: TargetKind,
    /// Whether the target deduplicates by idempotency key (default: true
    /// for workflows, false otherwise).
    #[serde(default)]
    pub honours_idempotency_keys: Option<bool>,
    /// The header that carries the idempotency key.
    #[serde(default = "default_key_header")]
    pub idempotency_header: String,
    /// Credentials and other secret headers, added at send time only. A
    /// value `env:NAME` is read from the environment at start.
    #[serde(default)]
    pub secret_headers: BTreeMap<String, SecretString>,
    /// Standard Webhooks signing secrets (`whsec_<base64>`, or `env:NAME`):
    /// when any is set, every request carries `webhook-id` (the effect's
    /// idempotency key), `webhook-timestamp` and `webhook-signature` with
    /// one entry per secret, so a secret can be rotated without a gap.
    #[serde(default)]
    pub signing_secrets: Vec<SecretString>,
    /// Connect timeout in milliseconds.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_ms: u64,
    /// Whole-request timeout in milliseconds.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// Status code → outcome class overrides (`"404" = "transient"`).
    #[serde(default)]
    pub status_classes: BTreeMap<String, String>,
    /// The retry budget.
    #[serde(default)]
    pub retry: RetryBudget,
    /// Most sends per second (0 = unlimited).
    #[serde(default)]
    pub rate_per_second: u32,
    /// Most sends in flight at once.
    #[serde(default = "default_concurrency")]
    pub concurrency: u32,
    /// When repeated transient failures pause the target for every
    /// instance, and for how long.
    #[serde(default)]
    pub health: super::health::HealthConfig,
}

fn default_key_header() -> String {
    "Idempotency-Key".into()
}
fn default_connect_timeout() -> u64 {
    2_000
}
fn default_timeout() -> u64 {
    10_000
}
fn default_concurrency() -> u32 {
    8
}

impl TargetConfig {
    /// Whether the target honours idempotency keys, with the kind's default.
    pub fn honours_keys(&self) -> bool {
        self.honours_idempotency_keys
            .unwrap_or(self.kind == TargetKind::Workflow)
    }

    /// Whether `url` lies inside this target's base URL.
    pub fn allows(&self, url: &str) -> bool {
        self.resolve(url).is_some()
    }

    /// The normalised form of `url` (dot segments removed) when it lies
    /// inside this target's base URL. The comparison is on the parsed
    /// origin and path prefix, so `https://a.example.evil` or
    /// `https://a.example@evil.example` does not pass for `https://a.example`.
    pub fn resolve(&self, url: &str) -> Option<String> {
        let base = url::Url::parse(&self.base_url).ok()?;
        let candidate = url::Url::parse(url).ok()?;
        if base.origin() != candidate.origin()
            || !candidate.username().is_empty()
            || candidate.password().is_some()
        {
            return None;
        }
        let prefix = base.path().trim_end_matches('/');
        // Compared as a server that decodes `%2e` and `%2f` before routing
        // would see it, so `/v1/..%2fadmin` is `/admin`, outside `/v1`.
        let path = normalised_path(candidate.path());
        let inside = prefix.is_empty() || path == prefix || path.starts_with(&format!("{prefix}/"));
        inside.then(|| candidate.to_string())
    }

    /// Joins a path onto the base URL.
    ///
    /// # Errors
    /// A message when the result is not a valid URL inside the target.
    pub fn join(&self, path: &str) -> Result<String, String> {
        let base = self.base_url.trim_end_matches('/');
        let url = if path.is_empty() {
            base.to_owned()
        } else if path.starts_with('/') {
            format!("{base}{path}")
        } else {
            format!("{base}/{path}")
        };
        self.resolve(&url)
            .ok_or_else(|| format!("{url} is outside target {}", self.name))
    }

    /// Replaces every `env:NAME` secret header value and signing secret with the value `lookup`
    /// gives for `NAME` (the process environment, in `serve`), so config
    /// files need not hold credentials.
    ///
    /// # Errors
    /// `(field, message)` naming the header whose variable is not set.
    pub fn resolve_env_secrets(
        &mut self,
        at: &str,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<(), (String, String)> {
        let resolve = |value: &mut SecretString, field: String| -> Result<(), (String, String)> {
            let Some(var) = value.expose_secret().strip_prefix("env:") else {
                return Ok(());
            };
            let resolved = lookup(var)
                .ok_or_else(|| (field, format!("environment variable {var} is not set")))?;
            *value = SecretString::from(resolved);
            Ok(())
        };
        for (name, value) in self.secret_headers.iter_mut() {
            resolve(value, format!("{at}.secret_headers.{name}"))?;
        }
        for (i, value) in self.signing_secrets.iter_mut().enumerate() {
            resolve(value, format!("{at}.signing_secrets[{i}]"))?;
        }
        Ok(())
    }

    /// Checks the fields; `at` prefixes the field names in messages.
    ///
    /// # Errors
    /// `(field, message)` for the first bad field.
    pub fn validate(&self, at: &str) -> Result<(), (String, String)> {
        let field = |f: &str| format!("{at}.{f}");
        if self.name.is_empty()
            || !self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err((field("name"), "must be letters, digits, '_' or '-'".into()));
        }
        match url::Url::parse(&self.base_url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            _ => return Err((field("base_url"), "must be an absolute http(s) URL".into())),
        }
        for (status, class) in &self.status_classes {
            if !matches!(status.parse::<u16>(), Ok(100..=599)) {
                return Err((
                    field("status_classes"),
                    format!("{status:?} is not an HTTP status"),
                ));
            }
            if super::classify::StatusClass::parse(class).is_none() {
                return Err((
                    field("status_classes"),
                    format!(
                        "{class:?} is not one of {}",
                        super::classify::StatusClass::NAMES
                    ),
                ));
            }
        }
        for (name, value) in &self.secret_headers {
            if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err((
                    field("secret_headers"),
                    format!("{name:?} is not a valid header name"),
                ));
            }
            if axum::http::HeaderValue::from_str(value.expose_secret()).is_err() {
                return Err((
                    format!("{at}.secret_headers.{name}"),
                    "is not a valid header value (control characters or non-ASCII)".into(),
                ));
            }
        }
        if let Err((i, why)) = super::signing::check(&self.signing_secrets) {
            return Err((
                format!("{at}.signing_secrets[{i}]"),
                format!("is not a whsec_<base64> secret: {why}"),
            ));
        }
        if self.retry.max_attempts == 0 {
            return Err((field("retry.max_attempts"), "must be at least 1".into()));
        }
        if self.retry.cap_ms < self.retry.base_ms {
            return Err((
                field("retry.cap_ms"),
                "must be at least retry.base_ms".into(),
            ));
        }
        if self.health.cool_down_cap_ms < self.health.cool_down_ms {
            return Err((
                field("health.cool_down_cap_ms"),
                "must be at least health.cool_down_ms".into(),
            ));
        }
        if self.concurrency == 0 {
            return Err((field("concurrency"), "must be at least 1".into()));
        }
        if self.timeout_ms == 0 || self.connect_timeout_ms == 0 {
            return Err((field("timeout_ms"), "timeouts must be positive".into()));
        }
        Ok(())
    }
}

/// `path` with encoded dots and slashes (`%2e`, `%2f`, `%5c`) decoded and
/// its dot segments removed (RFC 3986 §5.2.4).
fn normalised_path(path: &str) -> String {
    let mut decoded = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(i) = rest.find('%') {
        decoded.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 3).map(str::to_ascii_lowercase);
        match code.as_deref() {
            Some("2e") => decoded.push('.'),
            Some("2f" | "5c") => decoded.push('/'),
            _ => {
                decoded.push('%');
                rest = &rest[i + 1..];
                continue;
            }
        }
        rest = &rest[i + 3..];
    }
    decoded.push_str(rest);
    let segments: Vec<&str> = decoded.split('/').skip(1).collect();
    let mut out: Vec<&str> = Vec::with_capacity(segments.len());
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *segment {
            "." | ".." => {
                if *segment == ".." {
                    out.pop();
                }
                if last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

#[cfg(test)]
mod tests;
