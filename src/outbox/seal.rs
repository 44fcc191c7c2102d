//! An effect's seal: digests of its immutable fields, chained into the
//! audit entry of the move that queued it (issue 25 L7).
//!
//! A stored effect row is trusted at send time for everything but its URL
//! (checked against the target's allow-list then). Someone who can edit
//! the database could still change a header, the body or the key of an
//! effect inside its target; the seal makes `oncegate audit verify` see
//! it. The move that queues effects (the owner's commit, an approval, an
//! intake, a replacement) records in its own audit entry, already hashed
//! into the run's chain, one seal per effect; no extra write is made.
//!
//! The body has a digest of its own because retention may legitimately
//! replace a finished effect's body by its redacted form (`redacted_at`
//! set); the other fields never change.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::NewEffect;

/// The digests of one effect's immutable fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seal {
    /// SHA-256 of target, effect type, method, URL, headers and key.
    pub fields: String,
    /// SHA-256 of the body (of nothing when it has none).
    pub body: String,
}

/// An effect's fields as the seal covers them.
#[derive(Debug, Clone, Copy)]
pub struct Sealed<'a> {
    /// The target.
    pub target: &'a str,
    /// The effect type.
    pub effect_type: &'a str,
    /// The method.
    pub method: &'a str,
    /// The URL as stored.
    pub url: &'a str,
    /// The non-secret headers.
    pub headers: &'a BTreeMap<String, String>,
    /// The body.
    pub body: Option<&'a [u8]>,
    /// The downstream idempotency key.
    pub idempotency_key: &'a str,
}

impl<'a> From<&'a NewEffect> for Sealed<'a> {
    fn from(e: &'a NewEffect) -> Self {
        Self {
            target: &e.target,
            effect_type: &e.effect_type,
            method: &e.method,
            url: &e.url,
            headers: &e.headers,
            body: e.body.as_deref(),
            idempotency_key: &e.idempotency_key,
        }
    }
}

impl Sealed<'_> {
    /// Where the seal is found in an audit entry's `seals`: one effect per
    /// run, type and target.
    pub fn slot(&self) -> String {
        format!("{}/{}", self.target, self.effect_type)
    }

    /// The seal.
    pub fn seal(&self) -> Seal {
        // Serialised as an array: a fixed order, and every field written
        // as a JSON string, so no field can run into the next.
        let fields = serde_json::json!([
            self.target,
            self.effect_type,
            self.method,
            self.url,
            self.headers,
            self.idempotency_key
        ]);
        Seal {
            fields: digest(fields.to_string().as_bytes()),
            body: digest(self.body.unwrap_or_default()),
        }
    }
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The `seals` member of the audit entry of a move queueing `effects`.
pub fn seals(effects: &[NewEffect]) -> Value {
    let mut map = Map::new();
    for effect in effects {
        let sealed = Sealed::from(effect);
        let seal = serde_json::to_value(sealed.seal()).unwrap_or(Value::Null);
        map.insert(sealed.slot(), seal);
    }
    Value::Object(map)
}

/// Adds `seals` for `effects` to an audit entry's detail object (nothing
/// when there are no effects).
pub fn add_seals(detail: &mut Value, effects: &[NewEffect]) {
    if let (Value::Object(map), false) = (detail, effects.is_empty()) {
        map.insert("seals".into(), seals(effects));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_changes_the_seal_and_the_body_has_its_own() {
        let headers = BTreeMap::from([("x-a".to_owned(), "1".to_owned())]);
        let base = Sealed {
            target: "crm",
            effect_type: "send",
            method: "POST",
            url: "https://crm.example/v1/send",
            headers: &headers,
            body: Some(b"{}"),
            idempotency_key: "crm:k:send",
        };
        let seal = base.seal();
        assert_eq!(base.slot(), "crm/send");
        let other_headers = BTreeMap::from([("x-a".to_owned(), "2".to_owned())]);
        for changed in [
            Sealed {
                method: "DELETE",
                ..base
            },
            Sealed {
                url: "https://crm.example/v1/other",
                ..base
            },
            Sealed {
                headers: &other_headers,
                ..base
            },
            Sealed {
                idempotency_key: "crm:k2:send",
                ..base
            },
            Sealed {
                target: "crm2",
                ..base
            },
        ] {
            assert_ne!(changed.seal().fields, seal.fields);
            assert_eq!(changed.seal().body, seal.body);
        }
        let body = Sealed {
            body: Some(b"{\"a\":1}"),
            ..base
        }
        .seal();
        assert_eq!(body.fields, seal.fields);
        assert_ne!(body.body, seal.body);
    }
}
