//! The `Idempotency-Key` header (draft-ietf-httpapi-idempotency-key-header:
//! an RFC 8941 Item whose value is a String) and the ledger key it becomes,
//! scoped by the caller's token subject.

use std::fmt;

use axum::http::HeaderMap;

use crate::ledger::IdempotencyKey;

/// The request header the proxy reads.
pub const HEADER: &str = "Idempotency-Key";

/// Why an `Idempotency-Key` header was refused: the message says what the
/// draft's syntax wants.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Idempotency-Key {0}")]
pub struct BadKey(pub String);

/// A key as the client sent it (the sf-string's content, unescaped).
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyKey(String);

impl fmt::Debug for ProxyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProxyKey({:?})", self.0)
    }
}

impl ProxyKey {
    /// The key from a request's headers: `None` without the header.
    ///
    /// # Errors
    /// [`BadKey`] when the header appears twice or its value is not an
    /// RFC 8941 String (`"…"`, printable ASCII, `\"` and `\\` escaped),
    /// carries parameters, or is empty.
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<Self>, BadKey> {
        let mut values = headers.get_all(HEADER).iter();
        let Some(value) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(BadKey(
                "must appear once (the draft allows one field)".into(),
            ));
        }
        let text = value
            .to_str()
            .map_err(|_| BadKey("must be printable ASCII".into()))?;
        parse_sf_string(text).map(|key| Some(Self(key)))
    }

    /// A key given as its content (an operator naming it, not a header).
    pub fn unquoted(content: &str) -> Self {
        Self(content.to_owned())
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The ledger key of this key for `subject`: the two percent-encoded
    /// where needed and joined by `:` (`n8n-prod:8e03978e-…`), so one
    /// caller's key never meets another's.
    ///
    /// # Errors
    /// [`BadKey`] when the result exceeds a ledger key's 255 bytes.
    pub fn scoped(&self, subject: &str) -> Result<IdempotencyKey, BadKey> {
        let scoped = format!("{}:{}", encode(subject, b"%:"), encode(&self.0, b"%"));
        let room = IdempotencyKey::MAX_LEN.saturating_sub(encode(subject, b"%:").len() + 1);
        if scoped.len() > IdempotencyKey::MAX_LEN {
            return Err(BadKey(format!(
                "is too long: with this caller's subject it may hold {room} bytes \
                 (spaces and % count three)"
            )));
        }
        IdempotencyKey::parse(scoped).map_err(|e| BadKey(e.problem))
    }
}

/// The content of an RFC 8941 §3.3.3 String given as a whole field value
/// (§4.2: leading and trailing spaces are discarded).
fn parse_sf_string(field: &str) -> Result<String, BadKey> {
    let quoted = "must be an RFC 8941 string in double quotes, e.g. Idempotency-Key: \"order-42\"";
    let text = field.trim_matches(' ');
    let mut chars = text.chars();
    if chars.next() != Some('"') {
        return Err(BadKey(quoted.into()));
    }
    let mut out = String::new();
    loop {
        match chars.next() {
            None => return Err(BadKey("has no closing double quote".into())),
            Some('\\') => match chars.next() {
                Some(c @ ('"' | '\\')) => out.push(c),
                _ => {
                    let message = "may escape only \\\" and \\\\ with a backslash";
                    return Err(BadKey(message.into()));
                }
            },
            Some('"') => break,
            Some(c) if (' '..='~').contains(&c) => out.push(c),
            Some(c) => {
                let message = format!("holds {c:?}: only printable ASCII is allowed");
                return Err(BadKey(message));
            }
        }
    }
    match chars.as_str() {
        "" => {}
        rest if rest.starts_with(';') => {
            let message = "carries parameters, which the draft does not define";
            return Err(BadKey(message.into()));
        }
        _ => return Err(BadKey("has text after its closing double quote".into())),
    }
    if out.is_empty() {
        return Err(BadKey("must not be empty".into()));
    }
    Ok(out)
}

/// `text` with every byte outside visible ASCII, and each of `also`,
/// written `%XX`.
fn encode(text: &str, also: &[u8]) -> String {
    crate::outbox::egress::percent_encode(text, |b| b.is_ascii_graphic() && !also.contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn key(value: &str) -> Result<Option<ProxyKey>, BadKey> {
        let mut headers = HeaderMap::new();
        headers.insert(HEADER, HeaderValue::from_str(value).unwrap());
        ProxyKey::from_headers(&headers)
    }

    #[test]
    fn strings_parse_with_their_escapes() {
        let k = key("\"8e03978e-40d5-43e8-bc93-6894a57f9324\"")
            .unwrap()
            .unwrap();
        assert_eq!(k.as_str(), "8e03978e-40d5-43e8-bc93-6894a57f9324");
        assert_eq!(key(" \"a b\" ").unwrap().unwrap().as_str(), "a b");
        assert_eq!(key(r#""q\"\\""#).unwrap().unwrap().as_str(), r#"q"\"#);
        assert!(ProxyKey::from_headers(&HeaderMap::new()).unwrap().is_none());
    }

    #[test]
    fn everything_else_is_refused_with_the_rule() {
        for (value, says) in [
            ("order-42", "double quotes"),
            ("\"open", "closing"),
            ("\"a\\b\"", "escape"),
            ("\"a\";p=1", "parameters"),
            ("\"a\" b", "after"),
            ("\"\"", "empty"),
            ("\"tab\there\"", "printable"),
        ] {
            let err = key(value).unwrap_err().to_string();
            assert!(err.contains(says), "{value}: {err}");
        }
        let mut twice = HeaderMap::new();
        twice.append(HEADER, HeaderValue::from_static("\"a\""));
        twice.append(HEADER, HeaderValue::from_static("\"b\""));
        assert!(ProxyKey::from_headers(&twice)
            .unwrap_err()
            .to_string()
            .contains("once"));
        let mut binary = HeaderMap::new();
        binary.insert(HEADER, HeaderValue::from_bytes(b"\"\xe9\"").unwrap());
        assert!(ProxyKey::from_headers(&binary).is_err());
    }

    #[test]
    fn scoped_keys_keep_callers_apart_and_stay_in_bounds() {
        let k = key("\"a b%:c\"").unwrap().unwrap();
        assert_eq!(k.scoped("n8n").unwrap().as_str(), "n8n:a%20b%25:c");
        assert_eq!(k.scoped("x:y").unwrap().as_str(), "x%3Ay:a%20b%25:c");
        assert_ne!(k.scoped("a").unwrap(), k.scoped("b").unwrap());
        let long = key(&format!("\"{}\"", "k".repeat(252))).unwrap().unwrap();
        assert!(long.scoped("n8n").unwrap_err().to_string().contains("251"));
        let fits = key(&format!("\"{}\"", "k".repeat(251))).unwrap().unwrap();
        assert_eq!(fits.scoped("n8n").unwrap().as_str().len(), 255);
    }
}
