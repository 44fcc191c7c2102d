//! Parsed identifiers of a run: namespace, key, business key, payload hash.
//!
//! Each is a newtype with a private field and a fallible constructor, so a
//! value that reaches the store is already known to be well formed.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Why an identifier was refused; the message names the rule it broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {problem}")]
pub struct InvalidId {
    /// The field that was refused, as the API names it.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

impl InvalidId {
    fn new(field: &'static str, problem: impl Into<String>) -> Self {
        Self {
            field,
            problem: problem.into(),
        }
    }
}

/// Checks the shared rule of keys: `min..=max` bytes of visible ASCII.
fn check_visible_ascii(field: &'static str, value: &str, max: usize) -> Result<(), InvalidId> {
    if value.is_empty() {
        return Err(InvalidId::new(field, "must not be empty"));
    }
    if value.len() > max {
        return Err(InvalidId::new(
            field,
            format!("is {} bytes long; the limit is {max}", value.len()),
        ));
    }
    if let Some((at, c)) = value.char_indices().find(|(_, c)| !c.is_ascii_graphic()) {
        return Err(InvalidId::new(
            field,
            format!("holds {c:?} at byte {at}; only visible ASCII (0x21-0x7E) is allowed"),
        ));
    }
    Ok(())
}

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident, $field:literal, $max:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The longest accepted value, in bytes.
            pub const MAX_LEN: usize = $max;

            /// Parses a value.
            ///
            /// # Errors
            /// [`InvalidId`] when it is empty, too long, or not visible ASCII.
            pub fn parse(value: impl Into<String>) -> Result<Self, InvalidId> {
                let value = value.into();
                check_visible_ascii($field, &value, $max)?;
                Ok(Self(value))
            }

            /// The value as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = String::deserialize(d)?;
                Self::parse(raw).map_err(serde::de::Error::custom)
            }
        }
    };
}

string_id!(
    /// A provider or tenant (`stripe`, `github`, `crm`): 1–64 bytes of visible ASCII.
    Namespace,
    "namespace",
    64
);
string_id!(
    /// A run's stable business identity inside its namespace: 1–255 bytes of visible ASCII.
    IdempotencyKey,
    "key",
    255
);
string_id!(
    /// An optional identity of the business object a run acts on; at most
    /// one run of a namespace holds it (other namespaces may hold it too).
    BusinessKey,
    "business_key",
    255
);

/// SHA-256 of a payload, written `sha256:<64 lowercase hex digits>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct PayloadHash(String);

impl PayloadHash {
    const PREFIX: &'static str = "sha256:";

    /// Parses a hash in its stored form.
    ///
    /// # Errors
    /// [`InvalidId`] unless the value is `sha256:` followed by 64 lowercase hex digits.
    pub fn parse(value: impl Into<String>) -> Result<Self, InvalidId> {
        let value = value.into();
        let hex = value
            .strip_prefix(Self::PREFIX)
            .ok_or_else(|| InvalidId::new("payload_hash", "must start with \"sha256:\""))?;
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(InvalidId::new(
                "payload_hash",
                "must be \"sha256:\" followed by 64 lowercase hex digits",
            ));
        }
        Ok(Self(value))
    }

    /// The hash of raw bytes.
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Self(format!(
            "{}{}",
            Self::PREFIX,
            hex::encode(Sha256::digest(bytes))
        ))
    }

    /// The hash of a JSON value in RFC 8785 canonical form, so that key order
    /// and insignificant white space do not change it.
    ///
    /// # Errors
    /// [`InvalidId`] when the value cannot be canonicalised: a number
    /// outside the range RFC 8785 allows, or an integer beyond ±2^53, which
    /// RFC 8785's IEEE 754 doubles cannot tell from its neighbours (two
    /// payloads differing only in it would hash the same).
    pub fn of_json(value: &serde_json::Value) -> Result<Self, InvalidId> {
        if let Some(path) = inexact_integer(value, &mut String::new()) {
            return Err(InvalidId::new(
                "payload",
                format!(
                    "the integer at {path} is beyond 2^53 and cannot be hashed exactly \
                     (RFC 8785 numbers are IEEE 754 doubles); send it as a string"
                ),
            ));
        }
        let canonical = crate::canonical::to_vec(value)
            .map_err(|e| InvalidId::new("payload", e.to_string()))?;
        Ok(Self::of_bytes(&canonical))
    }

    /// The value as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The JSON Pointer of the first integer in `value` that an IEEE 754 double
/// cannot hold exactly (beyond ±2^53), if any.
fn inexact_integer(value: &serde_json::Value, path: &mut String) -> Option<String> {
    use serde_json::Value;
    const EXACT: u64 = 1 << 53;
    match value {
        Value::Number(n) => {
            let beyond = match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => u > EXACT,
                (None, Some(i)) => i.unsigned_abs() > EXACT,
                (None, None) => false,
            };
            beyond.then(|| {
                if path.is_empty() {
                    "/".into()
                } else {
                    path.clone()
                }
            })
        }
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            let len = path.len();
            path.push_str(&format!("/{i}"));
            let found = inexact_integer(item, path);
            path.truncate(len);
            found
        }),
        Value::Object(fields) => fields.iter().find_map(|(k, item)| {
            let len = path.len();
            path.push('/');
            path.push_str(&k.replace('~', "~0").replace('/', "~1"));
            let found = inexact_integer(item, path);
            path.truncate(len);
            found
        }),
        _ => None,
    }
}

impl fmt::Display for PayloadHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for PayloadHash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::parse(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_beyond_two_to_the_53_are_refused_not_hashed_alike() {
        let exact = serde_json::json!({ "amount": 9_007_199_254_740_992_u64, "n": -9_007_199_254_740_992_i64 });
        assert!(PayloadHash::of_json(&exact).is_ok(), "2^53 itself is exact");
        let a = serde_json::json!({ "order": { "ids": [1, 9_007_199_254_740_993_u64] } });
        let err = PayloadHash::of_json(&a).unwrap_err();
        assert!(err.problem.contains("/order/ids/1"), "{}", err.problem);
        assert!(err.problem.contains("as a string"), "{}", err.problem);
        let negative = serde_json::json!({ "a/b": -9_007_199_254_740_993_i64 });
        let err = PayloadHash::of_json(&negative).unwrap_err();
        assert!(err.problem.contains("/a~1b"), "{}", err.problem);
        assert!(PayloadHash::of_json(&serde_json::json!(1.5e300)).is_ok());
    }

    #[test]
    fn keys_accept_url_special_characters() {
        for raw in ["a/b", "a?b=c", "frag#1", "100%", "evt_1:2:3"] {
            assert_eq!(IdempotencyKey::parse(raw).unwrap().as_str(), raw);
        }
    }

    #[test]
    fn keys_refuse_empty_long_and_non_ascii() {
        assert_eq!(
            IdempotencyKey::parse("").unwrap_err().to_string(),
            "key must not be empty"
        );
        assert!(IdempotencyKey::parse("k".repeat(255)).is_ok());
        assert!(IdempotencyKey::parse("k".repeat(256))
            .unwrap_err()
            .problem
            .contains("256 bytes"));
        assert!(IdempotencyKey::parse("café").is_err());
        assert!(IdempotencyKey::parse("a b").is_err());
        assert!(IdempotencyKey::parse("tab\there").is_err());
        assert!(Namespace::parse("n".repeat(65)).is_err());
    }

    #[test]
    fn payload_hash_format_is_strict() {
        let good = format!("sha256:{}", "a".repeat(64));
        assert!(PayloadHash::parse(good).is_ok());
        assert!(PayloadHash::parse("a".repeat(64)).is_err());
        assert!(PayloadHash::parse(format!("sha256:{}", "A".repeat(64))).is_err());
        assert!(PayloadHash::parse(format!("sha256:{}", "a".repeat(63))).is_err());
        assert!(PayloadHash::parse(format!("md5:{}", "a".repeat(64))).is_err());
    }

    #[test]
    fn json_hash_ignores_key_order_and_spacing() {
        let a: serde_json::Value = serde_json::from_str(r#"{"b":1,"a":[true,null]}"#).unwrap();
        let b: serde_json::Value =
            serde_json::from_str("{ \"a\" : [ true , null ] , \"b\" : 1.0 }").unwrap();
        assert_eq!(
            PayloadHash::of_json(&a).unwrap(),
            PayloadHash::of_json(&b).unwrap()
        );
        let c: serde_json::Value = serde_json::from_str(r#"{"a":[true,null],"b":2}"#).unwrap();
        assert_ne!(
            PayloadHash::of_json(&a).unwrap(),
            PayloadHash::of_json(&c).unwrap()
        );
    }

    #[test]
    fn bytes_hash_matches_known_vector() {
        assert_eq!(
            PayloadHash::of_bytes(b"abc").as_str(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
