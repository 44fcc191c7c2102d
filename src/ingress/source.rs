//! `[[sources]]`: one webhook provider in front of one workflow.

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use super::signature::Encoding;

/// The signature scheme a source uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemeName {
    /// `Stripe-Signature: t=…,v1=…`.
    Stripe,
    /// `X-Hub-Signature-256: sha256=…`.
    Github,
    /// `X-Shopify-Hmac-Sha256: <base64>`.
    Shopify,
    /// `X-Slack-Signature: v0=…` with `X-Slack-Request-Timestamp`.
    Slack,
    /// Standard Webhooks / Svix: `webhook-id`, `webhook-timestamp`, `webhook-signature`.
    StandardWebhooks,
    /// HMAC-SHA256 of the body in a header of your choice.
    Hmac,
    /// No verification: only when configured explicitly (logged at start).
    None,
}

/// `[sources.hmac]`: the generic HMAC scheme's header.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HmacHeader {
    /// The header holding the signature.
    pub header: String,
    /// `hex` or `base64`.
    #[serde(default = "default_encoding")]
    pub encoding: Encoding,
    /// A prefix before the signature, such as `sha256=`.
    #[serde(default)]
    pub prefix: Option<String>,
}

fn default_encoding() -> Encoding {
    Encoding::Hex
}

/// What a duplicate of an event still in flight gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InFlightPolicy {
    /// 200: the provider stops; the first delivery is being handled.
    #[default]
    Ack,
    /// 409: the provider retries later.
    Retry,
}

/// What the same event id with a different body gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConflictPolicy {
    /// Store it, never forward it, record a dead letter, answer 2xx.
    #[default]
    Quarantine,
    /// Answer 422 and store nothing.
    Reject,
}

/// Where a value is found in a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locator {
    /// A JSON pointer into the body (`/data/object/id`).
    Pointer(String),
    /// A request header.
    Header(String),
}

impl Locator {
    /// Parses `"/json/pointer"` or `"header:Name"`.
    ///
    /// # Errors
    /// A message when the text is neither.
    pub fn parse(text: &str) -> Result<Self, String> {
        if let Some(name) = text.strip_prefix("header:") {
            let name = name.trim();
            if name.is_empty() || axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(format!("{text:?} does not name a valid header"));
            }
            Ok(Self::Header(name.to_ascii_lowercase()))
        } else if text.starts_with('/') {
            Ok(Self::Pointer(text.to_owned()))
        } else {
            Err(format!(
                "{text:?} is neither a JSON pointer (\"/id\") nor \"header:Name\""
            ))
        }
    }

    /// Whether reading it needs the body parsed as JSON.
    pub fn needs_json(&self) -> bool {
        matches!(self, Self::Pointer(_))
    }
}

/// `[[sources]]`: one webhook provider.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// The path segment (`POST /hooks/<name>`) and the runs' namespace.
    pub name: String,
    /// The signature scheme.
    pub scheme: SchemeName,
    /// Signing secrets; any one may match (rotation). `env:NAME` reads a
    /// variable at start, so the file need not hold the secret.
    #[serde(default)]
    pub secrets: Vec<SecretString>,
    /// How far a signed timestamp may be from now, in seconds.
    #[serde(default = "default_tolerance")]
    pub tolerance_secs: i64,
    /// Where the event id is (default per scheme).
    #[serde(default)]
    pub event_id: Option<String>,
    /// Where the event type is (default per scheme).
    #[serde(default)]
    pub event_type: Option<String>,
    /// Optional business key, e.g. `"refund:{/data/object/id}"`.
    #[serde(default)]
    pub business_key: Option<String>,
    /// The workflow target to forward to (a `[[targets]]` name).
    pub target: String,
    /// Path appended to the target's base URL.
    #[serde(default)]
    pub path: String,
    /// What an in-flight duplicate gets.
    #[serde(default)]
    pub in_flight: InFlightPolicy,
    /// What a conflicting body gets.
    #[serde(default)]
    pub on_conflict: ConflictPolicy,
    /// Largest body accepted, in bytes.
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// The generic HMAC scheme's header.
    #[serde(default)]
    pub hmac: Option<HmacHeader>,
    /// How long a body is remembered: the same body under another event id
    /// inside this many seconds is a duplicate of the first (0: off).
    /// Default [`DEFAULT_BODY_WINDOW_SECS`] for the schemes whose signature
    /// covers only the body (GitHub, Shopify, generic HMAC), 0 otherwise.
    #[serde(default)]
    pub body_window_secs: Option<u64>,
}

/// The body window of the schemes that sign only the body: 7 days.
pub const DEFAULT_BODY_WINDOW_SECS: u64 = 7 * 24 * 3600;

fn default_tolerance() -> i64 {
    300
}
fn default_max_body() -> usize {
    1024 * 1024
}

impl SourceConfig {
    /// Whether the scheme's signature covers only the body: no timestamp
    /// and no event id is signed, so a captured delivery verifies again
    /// under any new (unsigned) delivery id.
    pub fn signs_body_only(&self) -> bool {
        use SchemeName::{Github, Hmac, Shopify};
        matches!(self.scheme, Github | Shopify | Hmac)
    }

    /// The body window in milliseconds, `None` when off.
    pub fn body_window_ms(&self) -> Option<i64> {
        let default = DEFAULT_BODY_WINDOW_SECS * u64::from(self.signs_body_only());
        let secs = self.body_window_secs.unwrap_or(default);
        (secs > 0).then(|| i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX))
    }

    /// The event id's location: configured, or the scheme's default.
    pub fn event_id_locator(&self) -> Option<String> {
        self.event_id.clone().or_else(|| {
            match self.scheme {
                SchemeName::Stripe => Some("/id"),
                SchemeName::Github => Some("header:X-GitHub-Delivery"),
                SchemeName::Shopify => Some("header:X-Shopify-Webhook-Id"),
                SchemeName::Slack => Some("/event_id"),
                SchemeName::StandardWebhooks => Some("header:webhook-id"),
                SchemeName::Hmac | SchemeName::None => None,
            }
            .map(str::to_owned)
        })
    }

    /// The event type's location: configured, or the scheme's default.
    pub fn event_type_locator(&self) -> Option<String> {
        self.event_type.clone().or_else(|| {
            match self.scheme {
                SchemeName::Stripe | SchemeName::StandardWebhooks => Some("/type"),
                SchemeName::Github => Some("header:X-GitHub-Event"),
                SchemeName::Shopify => Some("header:X-Shopify-Topic"),
                SchemeName::Slack => Some("/event/type"),
                SchemeName::Hmac | SchemeName::None => None,
            }
            .map(str::to_owned)
        })
    }

    /// The secrets with `env:NAME` entries resolved.
    ///
    /// # Errors
    /// The name of a variable that is not set.
    pub fn resolved_secrets(&self) -> Result<Vec<SecretString>, String> {
        self.secrets
            .iter()
            .map(|s| match s.expose_secret().strip_prefix("env:") {
                Some(var) => std::env::var(var)
                    .map(SecretString::from)
                    .map_err(|_| format!("environment variable {var} is not set")),
                None => Ok(s.clone()),
            })
            .collect()
    }

    /// Checks the fields that need no other section (the target it names
    /// is checked with the targets); `at` prefixes the field names.
    ///
    /// # Errors
    /// `(field, message)` for the first bad field.
    pub fn validate(&self, at: &str) -> Result<(), (String, String)> {
        let field = |f: &str| format!("{at}.{f}");
        if crate::ledger::Namespace::parse(self.name.clone()).is_err()
            || !self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            let message = "must be 1-64 letters, digits, '_' or '-'";
            return Err((field("name"), message.into()));
        }
        self.validate_secrets().map_err(|e| (field("secrets"), e))?;
        if self.scheme == SchemeName::Hmac && self.hmac.is_none() {
            let message = "scheme \"hmac\" needs [sources.hmac] with its header";
            return Err((field("hmac"), message.into()));
        }
        let Some(id) = self.event_id_locator() else {
            let message = "this scheme has no default: give \"/pointer\" or \"header:Name\"";
            return Err((field("event_id"), message.into()));
        };
        Locator::parse(&id).map_err(|e| (field("event_id"), e))?;
        if let Some(kind) = self.event_type_locator() {
            Locator::parse(&kind).map_err(|e| (field("event_type"), e))?;
        }
        if let Some(template) = &self.business_key {
            KeyTemplate::parse(template).map_err(|e| (field("business_key"), e))?;
        }
        if !(0..=86_400).contains(&self.tolerance_secs) {
            let message = "must be between 0 and 86400";
            return Err((field("tolerance_secs"), message.into()));
        }
        if self.max_body_bytes < 1024 {
            return Err((field("max_body_bytes"), "must be at least 1024".into()));
        }
        Ok(())
    }

    /// Scheme `none` takes no secret; every other scheme needs one, each
    /// readable (`env:NAME` set).
    fn validate_secrets(&self) -> Result<(), String> {
        match self.scheme {
            SchemeName::None if !self.secrets.is_empty() => {
                Err("scheme \"none\" verifies nothing; remove the secrets or pick a scheme".into())
            }
            SchemeName::None => Ok(()),
            _ if self.resolved_secrets()?.is_empty() => {
                Err("a signing scheme needs at least one secret".into())
            }
            _ => Ok(()),
        }
    }
}

/// A parsed business-key template: literal text and `{/pointer}` holes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate(Vec<Part>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Pointer(String),
}

impl KeyTemplate {
    /// Parses `"refund:{/data/object/id}"`.
    ///
    /// # Errors
    /// A message for an unclosed brace or a hole that is not a JSON pointer.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_owned()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| format!("{text:?} has an unclosed '{{'"))?;
            let pointer = &rest[open + 1..open + close];
            if !pointer.starts_with('/') {
                return Err(format!("{{{pointer}}} in {text:?} is not a JSON pointer"));
            }
            parts.push(Part::Pointer(pointer.to_owned()));
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        if !parts.iter().any(|p| matches!(p, Part::Pointer(_))) {
            return Err(format!(
                "{text:?} holds no {{/pointer}}: every event would share one key"
            ));
        }
        Ok(Self(parts))
    }

    /// Renders the key from a JSON body.
    ///
    /// # Errors
    /// The pointer that found nothing (or an object or array).
    pub fn render(&self, body: &serde_json::Value) -> Result<String, String> {
        let mut out = String::new();
        for part in &self.0 {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Pointer(pointer) => match body.pointer(pointer) {
                    Some(serde_json::Value::String(s)) => out.push_str(s),
                    Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
                        out.push_str(&v.to_string())
                    }
                    _ => return Err(format!("the body has no scalar at {pointer}")),
                },
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn locators_parse() {
        assert_eq!(
            Locator::parse("/id").unwrap(),
            Locator::Pointer("/id".into())
        );
        assert_eq!(
            Locator::parse("header:X-GitHub-Delivery").unwrap(),
            Locator::Header("x-github-delivery".into())
        );
        assert!(Locator::parse("id").is_err());
        assert!(Locator::parse("header:").is_err());
    }

    #[test]
    fn key_templates_render_body_fields() {
        let t = KeyTemplate::parse("refund:{/data/object/id}:v{/version}").unwrap();
        let body = json!({ "data": { "object": { "id": "ch_1" } }, "version": 2 });
        assert_eq!(t.render(&body).unwrap(), "refund:ch_1:v2");
        assert!(t
            .render(&json!({}))
            .unwrap_err()
            .contains("/data/object/id"));
        assert!(KeyTemplate::parse("fixed").is_err());
        assert!(KeyTemplate::parse("a:{/x").is_err());
        assert!(KeyTemplate::parse("a:{x}").is_err());
    }

    #[test]
    fn scheme_defaults_locate_id_and_type() {
        let source: SourceConfig = toml::from_str(
            "name = \"gh\"\nscheme = \"github\"\nsecrets = [\"s\"]\ntarget = \"n8n\"\n",
        )
        .unwrap();
        assert_eq!(
            source.event_id_locator().as_deref(),
            Some("header:X-GitHub-Delivery")
        );
        assert_eq!(
            source.event_type_locator().as_deref(),
            Some("header:X-GitHub-Event")
        );
        assert!(
            !format!("{source:?}").contains("\"s\""),
            "secrets stay hidden"
        );
    }
}
