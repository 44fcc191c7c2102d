//! The soak's callers, through nginx: what they send and what they were
//! told, tallied for the verdict. Every call reports "no answer" as status
//! 0 instead of failing: an instance may have been killed under it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

use crate::workloads::stripe_signature;

/// What the callers did and were told.
#[derive(Default)]
pub struct Tally {
    /// HTTP requests sent.
    pub requests: AtomicU64,
    /// Answers that made a caller try again (no answer, 409 in flight,
    /// 502–504 while an instance was down).
    pub retried: AtomicU64,
    /// Webhook deliveries (each event 2–3 times).
    pub deliveries: AtomicU64,
    /// Event ids oncegate acknowledged with a 2xx at least once.
    pub accepted: Mutex<HashSet<String>>,
    /// Workflow runs oncegate acknowledged (commit, complete or gate
    /// answered, or found already past it): `namespace|key`.
    pub runs: Mutex<Vec<String>>,
    /// Effects queued to the rate-limited target.
    pub bulk_effects: AtomicU64,
    /// Approvals answered 200.
    pub approvals: AtomicU64,
    /// Broken expectations seen by a caller.
    pub violations: Mutex<Vec<String>>,
}

impl Tally {
    /// Notes a broken expectation.
    pub fn violation(&self, what: String) {
        eprintln!("  soak: VIOLATION {what}");
        self.violations.lock().unwrap().push(what);
    }

    /// Counts one more of `counter`.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether an answer means "try again" (the instance died, or the event
/// is still in flight).
pub fn retryable(status: u16) -> bool {
    matches!(status, 0 | 409 | 429 | 500 | 502 | 503 | 504)
}

/// A small seeded generator (splitmix64): runs are reproducible.
pub struct Rng(u64);

impl Rng {
    /// Seeded.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The workflow's and the approver's access, through nginx.
pub struct Api {
    client: reqwest::Client,
    base: String,
    workflow: String,
    approver: String,
    cookie: Mutex<String>,
}

impl Api {
    /// Callers of `base` with the two tokens.
    pub fn new(base: String, workflow: &str, approver: &str) -> Self {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("a client");
        Self {
            client,
            base,
            workflow: workflow.to_owned(),
            approver: approver.to_owned(),
            cookie: Mutex::default(),
        }
    }

    async fn send(&self, tally: &Tally, req: reqwest::RequestBuilder) -> (u16, Value) {
        Tally::bump(&tally.requests);
        match req.send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let text = resp.text().await.unwrap_or_default();
                (status, serde_json::from_str(&text).unwrap_or(Value::Null))
            }
            Err(_) => (0, Value::Null),
        }
    }

    /// POSTs JSON to the API as the workflow.
    pub async fn post(&self, tally: &Tally, path: &str, body: &Value) -> (u16, Value) {
        let req = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.workflow)
            .json(body);
        self.send(tally, req).await
    }

    /// Delivers a Stripe event, signed now.
    pub async fn hook(&self, tally: &Tally, body: &str) -> (u16, Value) {
        let req = self
            .client
            .post(format!("{}/hooks/stripe", self.base))
            .header("stripe-signature", stripe_signature(body))
            .header("content-type", "application/json")
            .body(body.to_owned());
        self.send(tally, req).await
    }

    /// The pending approvals, as the approver sees them.
    pub async fn pending(&self, tally: &Tally) -> (u16, Value) {
        let req = self
            .client
            .get(format!(
                "{}/v1/approvals?state=pending&limit=200",
                self.base
            ))
            .bearer_auth(&self.approver);
        self.send(tally, req).await
    }

    /// Opens the approver's session (stored in the database, so it
    /// outlives any instance); false if no instance answered.
    pub async fn login(&self, tally: &Tally) -> bool {
        Tally::bump(&tally.requests);
        let sent = self
            .client
            .post(format!("{}/login", self.base))
            .form(&[("token", self.approver.as_str()), ("next", "/approvals")])
            .send()
            .await;
        let Ok(resp) = sent else { return false };
        let Some(set) = resp.headers().get("set-cookie") else {
            return false;
        };
        let cookie = set.to_str().unwrap_or("").split(';').next().unwrap_or("");
        *self.cookie.lock().unwrap() = cookie.to_owned();
        resp.status().as_u16() == 303
    }

    /// Approves challenge `id` from the session; the status (0: no answer).
    pub async fn approve(&self, tally: &Tally, id: &str) -> u16 {
        let cookie = self.cookie.lock().unwrap().clone();
        let Some(secret) =
            oncegate::approval::Secret::parse(cookie.trim_start_matches("og_session="))
        else {
            return 0;
        };
        let csrf = secret.csrf(id);
        let form = [
            ("decision", "approve"),
            ("csrf", csrf.as_str()),
            ("reason", "soak"),
        ];
        let req = self
            .client
            .post(format!("{}/approvals/{id}", self.base))
            .header("cookie", cookie)
            .header("accept", "application/json")
            .form(&form);
        self.send(tally, req).await.0
    }
}
