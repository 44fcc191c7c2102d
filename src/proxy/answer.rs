//! An upstream answer as the proxy keeps it: status, the allow-listed
//! headers and the body, read within the proxy's bound, with the target's
//! secrets scrubbed out, so the first caller and every replay get the same
//! bytes and no secret is ever stored or replayed.

use axum::http::{HeaderMap, StatusCode};
use serde_json::{json, Value};

use super::config::is_hop_by_hop;
use super::ProxyConfig;
use crate::outbox::classify::Attempted;
use crate::outbox::scrub;
use crate::outbox::TargetConfig;

/// An answer to give (and, when its status is stored, to replay).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The upstream's status.
    pub status: u16,
    /// The allow-listed headers, names in lower case, in the upstream's order.
    pub headers: Vec<(String, String)>,
    /// The body, byte for byte.
    pub body: Vec<u8>,
}

impl Answer {
    /// What the run's result records about it (the bytes live in the
    /// answer's own row): status, size and digest.
    pub fn summary(&self) -> Value {
        json!({
            "status": self.status,
            "body_bytes": self.body.len(),
            "body_sha256": crate::ledger::PayloadHash::of_bytes(&self.body).as_str(),
        })
    }

    /// The headers as stored (a JSON array of `[name, value]`).
    pub fn headers_json(&self) -> String {
        serde_json::to_string(&self.headers).unwrap_or_else(|_| "[]".into())
    }

    /// Reads stored headers back.
    pub fn parse_headers(json: &str) -> Vec<(String, String)> {
        serde_json::from_str(json).unwrap_or_default()
    }
}

/// What came back from upstream.
#[derive(Debug)]
pub enum Upstream {
    /// A whole answer within the bound.
    Whole(Answer),
    /// A status came, but its body was longer than the bound, endless, or
    /// cut off: it cannot be kept or passed on whole.
    Partial {
        /// The status.
        status: u16,
        /// Why the body is not whole.
        why: String,
    },
    /// The request never left (connect refused, DNS, connect timeout).
    NotSent(String),
    /// The request was sent and no answer came (timeout, reset).
    LostAfterSend(String),
}

impl Upstream {
    /// The form the outbox's classifier reads (the status alone decides).
    pub fn attempted(&self) -> Attempted {
        let answered = |status: u16| Attempted::Answered {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
            headers: HeaderMap::new(),
            body: Vec::new(),
        };
        match self {
            Self::Whole(answer) => answered(answer.status),
            Self::Partial { status, .. } => answered(*status),
            Self::NotSent(e) => Attempted::NotSent(e.clone()),
            Self::LostAfterSend(e) => Attempted::LostAfterSend(e.clone()),
        }
    }

    /// The evidence kept with an unknown outcome's dead letter.
    pub fn evidence(&self) -> Value {
        match self {
            Self::Whole(a) => json!({ "answered": a.status, "answer": a.summary() }),
            Self::Partial { status, why } => json!({ "answered": status, "why": why }),
            Self::NotSent(e) => json!({ "not_sent": e }),
            Self::LostAfterSend(e) => json!({ "lost_after_send": e }),
        }
    }
}

/// Reads `response` within the proxy's bound, keeps its allow-listed
/// headers, and scrubs the target's secrets out of both.
pub async fn read(
    mut response: reqwest::Response,
    proxy: &ProxyConfig,
    target: &TargetConfig,
) -> Upstream {
    let status = response.status().as_u16();
    let headers = allowed_headers(response.headers(), proxy);
    let limit = proxy.max_response_bytes;
    if response.content_length().is_some_and(|n| n > limit as u64) {
        let why = format!("the answer is longer than max_response_bytes ({limit})");
        return Upstream::Partial { status, why };
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) if body.len() + chunk.len() > limit => {
                let why = format!(
                    "the answer is longer than max_response_bytes ({limit}), or does not end"
                );
                return Upstream::Partial { status, why };
            }
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => break,
            Err(err) => {
                let why = format!("the answer's body was cut off: {}", err.without_url());
                return Upstream::Partial { status, why };
            }
        }
    }
    Upstream::Whole(scrubbed(
        Answer {
            status,
            headers,
            body,
        },
        target,
    ))
}

/// The headers of `upstream` the proxy allows, hop-by-hop ones never.
fn allowed_headers(upstream: &HeaderMap, proxy: &ProxyConfig) -> Vec<(String, String)> {
    upstream
        .iter()
        .filter(|(name, _)| {
            let n = name.as_str();
            !is_hop_by_hop(n)
                && proxy
                    .response_headers
                    .iter()
                    .any(|allowed| allowed.eq_ignore_ascii_case(n))
        })
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect()
}

/// `answer` with every secret value of the target replaced, as the
/// outbox's evidence is ([`scrub`]).
fn scrubbed(answer: Answer, target: &TargetConfig) -> Answer {
    let needles = scrub::needles(target.secret_headers.values());
    if needles.is_empty() {
        return answer;
    }
    let mut headers = HeaderMap::new();
    for (name, value) in &answer.headers {
        if let (Ok(n), Ok(v)) = (
            axum::http::HeaderName::from_bytes(name.as_bytes()),
            axum::http::HeaderValue::from_str(value),
        ) {
            headers.append(n, v);
        }
    }
    let cleaned = scrub::attempted(
        Attempted::Answered {
            status: StatusCode::OK,
            headers,
            body: answer.body,
        },
        &needles,
    );
    let Attempted::Answered { headers, body, .. } = cleaned else {
        unreachable!("scrubbing keeps an answer an answer")
    };
    let headers = headers
        .iter()
        .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    Answer {
        status: answer.status,
        headers,
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_scrubbed_and_headers_filtered() {
        let target: TargetConfig = toml::from_str(
            "name = \"t\"\nbase_url = \"http://127.0.0.1:9\"\n[secret_headers]\nX-Api-Key = \"s3cr3t\"\n",
        )
        .unwrap();
        let answer = Answer {
            status: 201,
            headers: vec![("x-request-id".into(), "echo s3cr3t".into())],
            body: b"{\"key\":\"s3cr3t\"}".to_vec(),
        };
        let clean = scrubbed(answer, &target);
        assert_eq!(clean.status, 201);
        assert!(!String::from_utf8_lossy(&clean.body).contains("s3cr3t"));
        assert_eq!(clean.headers[0].1, "echo [redacted]");

        let proxy: ProxyConfig = toml::from_str("name = \"p\"\ntarget = \"t\"").unwrap();
        let mut upstream = HeaderMap::new();
        for (n, v) in [
            ("content-type", "application/json"),
            ("set-cookie", "session=1"),
            ("connection", "close"),
            ("location", "/leads/7"),
        ] {
            upstream.append(
                axum::http::HeaderName::from_static(n),
                axum::http::HeaderValue::from_static(v),
            );
        }
        let kept: Vec<String> = allowed_headers(&upstream, &proxy)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(kept, ["content-type", "location"]);
    }

    #[test]
    fn stored_headers_round_trip() {
        let a = Answer {
            status: 200,
            headers: vec![("etag".into(), "\"v1\"".into())],
            body: vec![],
        };
        assert_eq!(Answer::parse_headers(&a.headers_json()), a.headers);
        assert_eq!(a.summary()["body_bytes"], 0);
    }
}
