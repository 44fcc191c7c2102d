//! A target's configured secrets scrubbed out of what it answers, before
//! anything reads the answer: a target that reflects request headers (an
//! echo endpoint, a debug page, an error that quotes the request) would
//! otherwise hand its own `x-api-key` back into the evidence, the effect's
//! external id, the attempts table, dead letters and `GET /v1/runs/effects`.

use axum::http::{HeaderMap, HeaderValue};
use secrecy::{ExposeSecret, SecretString};

use super::classify::Attempted;

/// What stands where a secret was.
pub const REDACTED: &str = "[redacted]";

/// The byte strings to remove for a set of secret values: each value as
/// sent, and its JSON-escaped spelling when that differs (a target that
/// echoes headers in a JSON body escapes `"`, `\` and control characters).
pub fn needles<'a>(secrets: impl IntoIterator<Item = &'a SecretString>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for secret in secrets {
        let raw = secret.expose_secret();
        if raw.is_empty() {
            continue;
        }
        let json = serde_json::to_string(raw).unwrap_or_default();
        // Exactly the one quote on each side: a value ending in an
        // escaped quote keeps it.
        let escaped = json
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .unwrap_or(raw);
        if escaped != raw {
            out.push(escaped.as_bytes().to_vec());
        }
        out.push(raw.as_bytes().to_vec());
    }
    // Longest first, so a secret that contains another is removed whole.
    out.sort_by_key(|n| std::cmp::Reverse(n.len()));
    out
}

/// `attempted` with every needle replaced by [`REDACTED`] in its headers,
/// its body and its error text.
pub fn attempted(attempted: Attempted, needles: &[Vec<u8>]) -> Attempted {
    if needles.is_empty() {
        return attempted;
    }
    match attempted {
        Attempted::Answered {
            status,
            headers,
            body,
        } => Attempted::Answered {
            status,
            headers: header_map(headers, needles),
            body: bytes(body, needles),
        },
        Attempted::NotSent(e) => Attempted::NotSent(text(&e, needles)),
        Attempted::LostAfterSend(e) => Attempted::LostAfterSend(text(&e, needles)),
    }
}

fn header_map(headers: HeaderMap, needles: &[Vec<u8>]) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in &headers {
        let scrubbed = bytes(value.as_bytes().to_vec(), needles);
        let value = HeaderValue::from_bytes(&scrubbed)
            .unwrap_or_else(|_| HeaderValue::from_static(REDACTED));
        out.append(name.clone(), value);
    }
    out
}

fn text(s: &str, needles: &[Vec<u8>]) -> String {
    String::from_utf8_lossy(&bytes(s.as_bytes().to_vec(), needles)).into_owned()
}

/// `haystack` with every occurrence of every needle replaced.
pub fn bytes(haystack: Vec<u8>, needles: &[Vec<u8>]) -> Vec<u8> {
    let mut current = haystack;
    for needle in needles {
        if current.len() < needle.len() {
            continue;
        }
        let mut out = Vec::with_capacity(current.len());
        let mut i = 0;
        while i < current.len() {
            if current[i..].starts_with(needle) {
                out.extend_from_slice(REDACTED.as_bytes());
                i += needle.len();
            } else {
                out.push(current[i]);
                i += 1;
            }
        }
        current = out;
    }
    current
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    #[test]
    fn secrets_leave_headers_body_and_errors() {
        let secrets = [
            SecretString::from("sk_live_1"),
            SecretString::from("Bearer \"q\""),
        ];
        let needles = needles(&secrets);
        let mut headers = HeaderMap::new();
        headers.insert("x-request-id", HeaderValue::from_static("echo sk_live_1"));
        let body = br#"{"x-api-key":"sk_live_1","authorization":"Bearer \"q\""}"#.to_vec();
        let Attempted::Answered { headers, body, .. } = attempted(
            Attempted::Answered {
                status: StatusCode::OK,
                headers,
                body,
            },
            &needles,
        ) else {
            panic!("still answered");
        };
        assert_eq!(headers["x-request-id"], "echo [redacted]");
        assert_eq!(
            String::from_utf8(body).unwrap(),
            r#"{"x-api-key":"[redacted]","authorization":"[redacted]"}"#
        );
        let Attempted::NotSent(e) = attempted(Attempted::NotSent("sk_live_1!".into()), &needles)
        else {
            panic!("still not sent");
        };
        assert_eq!(e, "[redacted]!");
    }
}
