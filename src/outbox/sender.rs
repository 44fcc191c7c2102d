//! One HTTP attempt to a target: a client that never follows redirects,
//! the effect's idempotency key and the run's fencing version on every
//! request, credentials added only here.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use secrecy::ExposeSecret;
use serde_json::{json, Value};
use tokio::sync::{Mutex, Semaphore};
use tokio::time::Instant;

use super::classify::Attempted;
use super::egress::EgressUrl;
use super::scrub;
use super::signing;
use super::{Leased, TargetConfig};

/// Largest response body read for classification.
const MAX_RESPONSE: usize = 64 * 1024;
/// Response headers kept as evidence.
const EVIDENCE_HEADERS: &[&str] = &[
    "content-type",
    "retry-after",
    "location",
    "x-request-id",
    "idempotent-replayed",
];

/// A target ready to send to.
#[derive(Debug)]
pub struct TargetRuntime {
    /// Its configuration.
    pub config: TargetConfig,
    client: reqwest::Client,
    /// Sends in flight at most (`concurrency`).
    pub slots: Semaphore,
    next_slot: Mutex<Instant>,
}

impl TargetRuntime {
    /// Builds the target's HTTP client.
    ///
    /// # Errors
    /// The client cannot be built (TLS backend failure).
    pub fn new(config: TargetConfig) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_millis(config.connect_timeout_ms))
            .timeout(Duration::from_millis(config.timeout_ms))
            .user_agent(concat!("oncegate/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let slots = Semaphore::new(config.concurrency as usize);
        Ok(Self {
            config,
            client,
            slots,
            next_slot: Mutex::new(Instant::now()),
        })
    }

    /// The target's HTTP client (no redirects, the target's timeouts), for
    /// the Idempotency-Key proxy's forwards.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Waits for the target's rate limit.
    pub async fn pace(&self) {
        if self.config.rate_per_second == 0 {
            return;
        }
        let interval = Duration::from_secs(1) / self.config.rate_per_second;
        let at = {
            let mut next = self.next_slot.lock().await;
            let at = (*next).max(Instant::now());
            *next = at + interval;
            at
        };
        tokio::time::sleep_until(at).await;
    }

    /// Sends the effect once, to `url` (its URL, checked at send time).
    pub async fn send(&self, leased: &Leased, url: &EgressUrl) -> Attempted {
        let effect = &leased.effect.new;
        let method = Method::from_bytes(effect.method.as_bytes()).unwrap_or(Method::POST);
        let mut headers = HeaderMap::new();
        for (name, value) in &effect.headers {
            insert(&mut headers, name, value);
        }
        insert(
            &mut headers,
            &self.config.idempotency_header,
            &effect.idempotency_key,
        );
        insert(
            &mut headers,
            "x-oncegate-namespace",
            &leased.effect.namespace,
        );
        insert(&mut headers, "x-oncegate-key", &leased.effect.key);
        insert(
            &mut headers,
            "x-oncegate-version",
            &leased.run_version.to_string(),
        );
        insert(&mut headers, "x-correlation-id", &leased.correlation_id);
        for (name, value) in &self.config.secret_headers {
            insert(&mut headers, name, value.expose_secret());
        }
        let body = effect.body.as_deref().unwrap_or_default();
        if let Err(why) = self.sign(&mut headers, &effect.idempotency_key, body) {
            return Attempted::NotSent(why);
        }
        let mut request = self
            .client
            .request(method, url.url().clone())
            .headers(headers);
        if let Some(body) = &effect.body {
            request = request.body(body.clone());
        }
        self.finish(request.send().await).await
    }

    /// Adds the Standard Webhooks headers when the target has signing
    /// secrets; they replace any the effect carried, so a workflow cannot
    /// forge them.
    ///
    /// # Errors
    /// A signing secret is not a key (only a target built without
    /// configuration loading can have one).
    pub fn sign(&self, headers: &mut HeaderMap, id: &str, body: &[u8]) -> Result<(), String> {
        if self.config.signing_secrets.is_empty() {
            return Ok(());
        }
        let now = signing::wall_clock_seconds();
        let signed =
            signing::headers(&self.config.signing_secrets, id, now, body).map_err(|(i, why)| {
                format!("signing_secrets[{i}] of target {}: {why}", self.config.name)
            })?;
        for (name, value) in signed {
            insert(headers, name, &value);
        }
        Ok(())
    }

    /// Reads an unknown effect back through its probe URL.
    pub async fn probe(&self, url: &EgressUrl) -> Attempted {
        let mut headers = HeaderMap::new();
        for (name, value) in &self.config.secret_headers {
            insert(&mut headers, name, value.expose_secret());
        }
        self.finish(
            self.client
                .get(url.url().clone())
                .headers(headers)
                .send()
                .await,
        )
        .await
    }

    /// The answer, with the target's secret values scrubbed out before
    /// anything classifies or stores it.
    async fn finish(&self, sent: Result<reqwest::Response, reqwest::Error>) -> Attempted {
        let attempted = match sent {
            Ok(response) => read_answer(response).await,
            Err(err) if err.is_connect() || err.is_builder() => Attempted::NotSent(describe(err)),
            Err(err) => Attempted::LostAfterSend(describe(err)),
        };
        let needles = scrub::needles(self.config.secret_headers.values());
        scrub::attempted(attempted, &needles)
    }
}

fn insert(headers: &mut HeaderMap, name: &str, value: &str) {
    if let (Ok(name), Ok(value)) = (
        HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_str(value),
    ) {
        headers.insert(name, value);
    }
}

async fn read_answer(mut response: reqwest::Response) -> Attempted {
    let status =
        StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let headers = response.headers().clone();
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                body.extend_from_slice(&chunk);
                if body.len() >= MAX_RESPONSE {
                    body.truncate(MAX_RESPONSE);
                    break;
                }
            }
            Ok(None) => break,
            // The status arrived; a body cut short still tells the outcome.
            Err(_) => break,
        }
    }
    Attempted::Answered {
        status,
        headers,
        body,
    }
}

/// A transport error in words, with its source chain (no URL, so no
/// credentials in it).
pub fn describe(err: reqwest::Error) -> String {
    let err = err.without_url();
    let mut text = err.to_string();
    let mut cause = std::error::Error::source(&err);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The evidence kept for one attempt.
pub fn evidence(attempted: &Attempted) -> Value {
    match attempted {
        Attempted::Answered {
            status,
            headers,
            body,
        } => {
            let kept: serde_json::Map<String, Value> = EVIDENCE_HEADERS
                .iter()
                .filter_map(|name| {
                    let value = headers.get(*name)?.to_str().ok()?;
                    Some(((*name).to_owned(), Value::String(value.to_owned())))
                })
                .collect();
            let shown = &body[..body.len().min(2_048)];
            json!({
                "status": status.as_u16(),
                "headers": kept,
                "body": String::from_utf8_lossy(shown),
                "body_truncated": body.len() > shown.len(),
            })
        }
        Attempted::NotSent(error) => json!({ "not_sent": error }),
        Attempted::LostAfterSend(error) => json!({ "lost_after_send": error }),
    }
}
