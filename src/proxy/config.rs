//! `[[proxies]]`: one Idempotency-Key proxy in front of a configured
//! target, each field checked with its name in the message.

use serde::Deserialize;

use crate::ledger::Span;
use crate::outbox::TargetConfig;

/// Whether a request must carry an `Idempotency-Key`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyPolicy {
    /// A request without a key is refused (400) and nothing is sent.
    #[default]
    Required,
    /// A request without a key is forwarded as a plain proxy would,
    /// unprotected and unrecorded.
    Optional,
}

/// What a request finds while the first one with its key is in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InFlight {
    /// 409 at once, with `Retry-After` (the draft's answer).
    #[default]
    Conflict,
    /// Waits up to `wait_ms` for the first request's answer, then answers
    /// with it (or 409 when it did not come in time).
    Wait,
}

/// `[[proxies]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// The path segment (`/proxy/{name}/…`) and the ledger namespace's
    /// suffix (`proxy:{name}`).
    pub name: String,
    /// The `[[targets]]` entry requests go to: its base URL (the
    /// allow-list), secrets, timeouts, limits and kill switch apply.
    pub target: String,
    /// Whether the key is required.
    #[serde(default)]
    pub key: KeyPolicy,
    /// Which answers are stored and replayed: status classes (`"2xx"`) or
    /// single statuses (`"302"`). Every 2xx must be stored.
    #[serde(default = "default_store")]
    pub store: Vec<String>,
    /// Statuses never stored even when their class is.
    #[serde(default = "default_store_except")]
    pub store_except: Vec<u16>,
    /// Request headers that are part of the fingerprint besides method,
    /// path, query and body.
    #[serde(default)]
    pub fingerprint_headers: Vec<String>,
    /// Response headers kept with a stored answer and passed to callers
    /// (the first answer and every replay carry the same ones).
    #[serde(default = "default_response_headers")]
    pub response_headers: Vec<String>,
    /// What a request finds while its key is in flight.
    #[serde(default)]
    pub in_flight: InFlight,
    /// `wait` mode: the longest wait for the first request's answer, in
    /// milliseconds.
    #[serde(default = "default_wait_ms")]
    pub wait_ms: u64,
    /// Largest request body forwarded, in bytes (413 beyond).
    #[serde(default = "default_max_bytes")]
    pub max_request_bytes: usize,
    /// Largest answer body read and stored, in bytes (a longer or endless
    /// answer is a 502 and is not stored).
    #[serde(default = "default_max_bytes")]
    pub max_response_bytes: usize,
    /// How long a stored answer is replayed (the dedup window); after it
    /// the key answers 409 and is never forwarded again while its run is
    /// kept.
    #[serde(default = "default_retention")]
    pub retention: Span,
    /// Memory for the answers of keys this process completed lately, in
    /// bytes: a retry within minutes is replayed from it, without a
    /// database read ([`super::recent`]). 0 turns it off.
    #[serde(default = "default_replay_cache_bytes")]
    pub replay_cache_bytes: usize,
}

fn default_store() -> Vec<String> {
    vec!["2xx".into(), "4xx".into()]
}
fn default_store_except() -> Vec<u16> {
    vec![408, 409, 429]
}
fn default_response_headers() -> Vec<String> {
    [
        "content-type",
        "content-language",
        "content-location",
        "location",
        "etag",
        "last-modified",
        "cache-control",
        "expires",
        "link",
        "retry-after",
        "x-request-id",
    ]
    .map(String::from)
    .to_vec()
}
fn default_wait_ms() -> u64 {
    10_000
}
fn default_max_bytes() -> usize {
    1_048_576
}
fn default_replay_cache_bytes() -> usize {
    8 * 1_048_576
}
fn default_retention() -> Span {
    Span(86_400_000)
}

/// Headers that belong to one connection (RFC 9110 §7.6.1) and never pass
/// a proxy either way, with those `Connection` names.
pub const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
    "proxy-authenticate",
];

/// Whether `name` (lower case) is hop-by-hop: listed, or any `proxy-*`.
pub fn is_hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP.contains(&name) || name.starts_with("proxy-")
}

/// The longest proxy name: `proxy:` and the name fit a 64-byte namespace.
const MAX_NAME: usize = 58;

impl ProxyConfig {
    /// The ledger namespace of this proxy's keys.
    pub fn namespace(&self) -> String {
        format!("{}{}", super::NAMESPACE_PREFIX, self.name)
    }

    /// Whether an answer with `status` is stored and replayed.
    pub fn stores(&self, status: u16) -> bool {
        !self.store_except.contains(&status) && self.store.iter().any(|s| status_matches(s, status))
    }

    /// Checks the fields; `at` prefixes the field names in messages.
    ///
    /// # Errors
    /// `(field, message)` for the first bad field.
    pub fn validate(&self, at: &str) -> Result<(), (String, String)> {
        let field = |f: &str| format!("{at}.{f}");
        let name_ok = !self.name.is_empty()
            && self.name.len() <= MAX_NAME
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !name_ok {
            let message = format!("must be 1-{MAX_NAME} letters, digits, '_' or '-'");
            return Err((field("name"), message));
        }
        self.validate_statuses(at)?;
        for (list, names) in [
            ("fingerprint_headers", &self.fingerprint_headers),
            ("response_headers", &self.response_headers),
        ] {
            check_header_names(&field(list), names)?;
        }
        if self.wait_ms == 0 || self.wait_ms > 600_000 {
            return Err((field("wait_ms"), "must be 1-600000 milliseconds".into()));
        }
        if self.max_request_bytes == 0 || self.max_response_bytes == 0 {
            let f = if self.max_request_bytes == 0 {
                "max_request_bytes"
            } else {
                "max_response_bytes"
            };
            return Err((field(f), "must be at least 1".into()));
        }
        if self.retention.0 < 1_000 {
            return Err((field("retention"), "must be at least 1s".into()));
        }
        Ok(())
    }

    fn validate_statuses(&self, at: &str) -> Result<(), (String, String)> {
        for s in &self.store {
            let class = matches!(s.as_str(), "1xx" | "2xx" | "3xx" | "4xx" | "5xx");
            if !class && !matches!(s.parse::<u16>(), Ok(100..=599)) {
                let message = format!("{s:?} is neither a status class (\"2xx\") nor a status");
                return Err((format!("{at}.store"), message));
            }
        }
        if let Some(s) = self.store_except.iter().find(|s| !(100..=599).contains(*s)) {
            return Err((format!("{at}.store_except"), format!("{s} is not a status")));
        }
        if let Some(s) = (200..300).find(|s| !self.stores(*s)) {
            let message = format!(
                "must store every 2xx, but {s} is not: a success that is not stored would be \
                 sent upstream again by a retry"
            );
            return Err((format!("{at}.store"), message));
        }
        Ok(())
    }
}

/// What a forward must fit in: the ledger's longest lease and the
/// server's request timeout.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// `ledger.max_lease_ms`.
    pub max_lease_ms: i64,
    /// `server.request_timeout_ms`.
    pub request_timeout_ms: u64,
}

/// Each proxy's target exists, and a forward (the target's connect and
/// request timeouts, the wait for a send slot, room to record, and in
/// `wait` mode the wait for the first request) fits in a lease and in the
/// server's request timeout, so no request is cut off mid-forward.
///
/// # Errors
/// `(field, message)` for the first proxy that does not fit.
pub fn validate_relations(
    proxies: &[ProxyConfig],
    targets: &[TargetConfig],
    bounds: Bounds,
) -> Result<(), (String, String)> {
    for (i, proxy) in proxies.iter().enumerate() {
        let field = format!("proxies[{i}].target");
        let Some(target) = targets.iter().find(|t| t.name == proxy.target) else {
            return Err((
                field,
                format!("no [[targets]] entry is named {:?}", proxy.target),
            ));
        };
        let forward = target.connect_timeout_ms
            + target.timeout_ms
            + super::SLOT_WAIT_MS
            + super::RECORD_MARGIN_MS;
        if i64::try_from(forward).unwrap_or(i64::MAX) > bounds.max_lease_ms {
            let message = format!(
                "target {:?}'s timeouts with the proxy's margins ({forward} ms) exceed \
                 ledger.max_lease_ms",
                target.name
            );
            return Err((field, message));
        }
        let wait = match proxy.in_flight {
            InFlight::Wait => proxy.wait_ms,
            InFlight::Conflict => 0,
        };
        if forward + wait >= bounds.request_timeout_ms {
            let message = format!(
                "a forward to {:?} may take {} ms (its timeouts, the wait for a send slot and \
                 for the first request), not less than server.request_timeout_ms",
                target.name,
                forward + wait
            );
            return Err((field, message));
        }
    }
    Ok(())
}

/// Whether `rule` (`"2xx"` or `"404"`) covers `status`.
fn status_matches(rule: &str, status: u16) -> bool {
    match rule.strip_suffix("xx").and_then(|d| d.parse::<u16>().ok()) {
        Some(class) => status / 100 == class,
        None => rule.parse::<u16>() == Ok(status),
    }
}

/// Header names that may be configured: valid, and none of those a proxy
/// must handle itself (hop-by-hop, `Host`, `Content-Length`, the caller's
/// `Authorization` and `Idempotency-Key`).
fn check_header_names(field: &str, names: &[String]) -> Result<(), (String, String)> {
    for name in names {
        if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err((field.into(), format!("{name:?} is not a valid header name")));
        }
        let lower = name.to_ascii_lowercase();
        let own = ["host", "content-length", "authorization", "idempotency-key"];
        if is_hop_by_hop(&lower) || own.contains(&lower.as_str()) {
            let message = format!("{name:?} is handled by the proxy itself and cannot be listed");
            return Err((field.into(), message));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxy(extra: &str) -> ProxyConfig {
        toml::from_str(&format!("name = \"crm\"\ntarget = \"crm\"\n{extra}")).unwrap()
    }

    #[test]
    fn defaults_store_2xx_and_4xx_but_408_409_429() {
        let p = proxy("");
        assert!(p.validate("proxies[0]").is_ok());
        assert_eq!(p.namespace(), "proxy:crm");
        for (status, stored) in [
            (200, true),
            (201, true),
            (204, true),
            (302, false),
            (400, true),
            (404, true),
            (408, false),
            (409, false),
            (422, true),
            (429, false),
            (500, false),
            (503, false),
        ] {
            assert_eq!(p.stores(status), stored, "{status}");
        }
        assert_eq!(p.key, KeyPolicy::Required);
        assert_eq!(p.in_flight, InFlight::Conflict);
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases = [
            ("name = \"bad name\"\ntarget = \"t\"", "proxies[0].name"),
            ("store = [\"2xx\", \"6xx\"]", "proxies[0].store"),
            ("store = [\"4xx\"]", "proxies[0].store"),
            ("store_except = [201]", "proxies[0].store"),
            ("store_except = [700]", "proxies[0].store_except"),
            (
                "fingerprint_headers = [\"Connection\"]",
                "proxies[0].fingerprint_headers",
            ),
            (
                "response_headers = [\"Transfer-Encoding\"]",
                "proxies[0].response_headers",
            ),
            (
                "response_headers = [\"bad name\"]",
                "proxies[0].response_headers",
            ),
            ("wait_ms = 0", "proxies[0].wait_ms"),
            ("max_request_bytes = 0", "proxies[0].max_request_bytes"),
            ("max_response_bytes = 0", "proxies[0].max_response_bytes"),
            ("retention = \"0s\"", "proxies[0].retention"),
        ];
        for (extra, field) in cases {
            let p: ProxyConfig = if extra.starts_with("name") {
                toml::from_str(extra).unwrap()
            } else {
                proxy(extra)
            };
            let (got, message) = p.validate("proxies[0]").unwrap_err();
            assert_eq!(got, field, "{extra}: {message}");
        }
        let too_long = proxy("").name.repeat(20);
        let mut p = proxy("");
        p.name = too_long;
        assert_eq!(p.validate("proxies[0]").unwrap_err().0, "proxies[0].name");
    }

    #[test]
    fn single_statuses_and_hop_by_hop_names() {
        let p = proxy("store = [\"2xx\", \"302\"]\nstore_except = []");
        assert!(p.stores(302) && !p.stores(301) && !p.stores(404));
        assert!(is_hop_by_hop("proxy-authorization") && is_hop_by_hop("te"));
        assert!(!is_hop_by_hop("content-type"));
    }
}
