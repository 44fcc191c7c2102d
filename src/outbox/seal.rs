//! An effect's immutable fields (method, URL, headers, body) sealed into
//! its run's audit chain when it is queued, in an `effect_queued` entry of
//! its own, so `oncegate audit verify` detects an effect row edited in the
//! database afterwards. Effects queued before sealing existed have no such
//! entry and are not compared; their chains verify as before.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The audit entry kind that seals a queued effect.
pub const EFFECT_QUEUED: &str = "effect_queued";

/// What the chain holds of one effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectSeal {
    /// HTTP method.
    pub method: String,
    /// The URL as stored.
    pub url: String,
    /// SHA-256 (hex) of the headers' canonical JSON (sorted by name).
    pub headers_sha256: String,
    /// SHA-256 (hex) of the body, or `none`.
    pub body_sha256: String,
}

impl EffectSeal {
    /// The seal of an effect's fields.
    pub fn of(
        method: &str,
        url: &str,
        headers: &BTreeMap<String, String>,
        body: Option<&[u8]>,
    ) -> Self {
        let headers = serde_json::to_string(headers).unwrap_or_default();
        Self {
            method: method.to_owned(),
            url: url.to_owned(),
            headers_sha256: hex::encode(Sha256::digest(headers.as_bytes())),
            body_sha256: body.map_or_else(|| "none".into(), |b| hex::encode(Sha256::digest(b))),
        }
    }

    /// The `effect_queued` entry's detail.
    pub fn detail(&self, effect_id: &str, effect_type: &str, target: &str) -> Value {
        json!({
            "effect_id": effect_id,
            "effect_type": effect_type,
            "target": target,
            "method": self.method,
            "url": self.url,
            "headers_sha256": self.headers_sha256,
            "body_sha256": self.body_sha256,
        })
    }

    /// The effect id and seal an `effect_queued` entry's detail holds.
    pub fn from_detail(detail: &Value) -> Option<(String, Self)> {
        let text = |f: &str| detail.get(f)?.as_str().map(str::to_owned);
        Some((
            text("effect_id")?,
            Self {
                method: text("method")?,
                url: text("url")?,
                headers_sha256: text("headers_sha256")?,
                body_sha256: text("body_sha256")?,
            },
        ))
    }

    /// The fields of `stored` that differ from this seal.
    pub fn differences(&self, stored: &Self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.method != stored.method {
            out.push("method");
        }
        if self.url != stored.url {
            out.push("url");
        }
        if self.headers_sha256 != stored.headers_sha256 {
            out.push("headers");
        }
        if self.body_sha256 != stored.body_sha256 {
            out.push("body");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_round_trips_and_names_what_changed() {
        let headers = BTreeMap::from([("x-a".to_owned(), "1".to_owned())]);
        let seal = EffectSeal::of("POST", "https://a.example/v1", &headers, Some(b"{}"));
        let (id, back) = EffectSeal::from_detail(&seal.detail("e1", "send", "t")).unwrap();
        assert_eq!((id.as_str(), &back), ("e1", &seal));
        let edited = EffectSeal::of("POST", "https://evil.example/v1", &headers, None);
        assert_eq!(seal.differences(&edited), ["url", "body"]);
    }
}
