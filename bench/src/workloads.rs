//! The requests the suite sends: the no-op floor, claims with new keys,
//! duplicate claims, and signed Stripe-style webhook deliveries.

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::Full;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::Request;
use sha2::Sha256;

use crate::load::Workload;
use crate::server::{STRIPE_SECRET, TOKEN};

/// A key that looks random (as provider event ids do), unique per
/// `(tag, conn, seq)`: splitmix64 is a bijection on `u64`.
pub fn key(tag: &str, conn: usize, seq: u64) -> String {
    let mut z = ((conn as u64) << 40 | seq).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    format!("{tag}_{:016x}", z ^ (z >> 31))
}

/// The claim body for `key` (the no-op route gets the same bytes).
pub fn claim_body(key: &str) -> String {
    format!(
        "{{\"namespace\":\"bench\",\"key\":\"{key}\",\"payload\":{{\"type\":\"charge.succeeded\",\
         \"id\":\"{key}\",\"amount\":4200,\"currency\":\"eur\"}},\"lease_ms\":900000}}"
    )
}

fn api_request(path: &str, body: String) -> Request<Full<Bytes>> {
    Request::post(path)
        .header(HOST, "127.0.0.1")
        .header(AUTHORIZATION, bearer())
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("a valid request")
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

fn contains(body: &[u8], needle: &str) -> bool {
    body.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// `POST /v1/noop` with a claim's body: the floor.
pub struct Noop;

impl Workload for Noop {
    fn request(&self, conn: usize, seq: u64) -> Request<Full<Bytes>> {
        api_request("/v1/noop", claim_body(&key("noop", conn, seq)))
    }

    fn check(&self, status: u16, body: &[u8]) -> bool {
        status == 200 && contains(body, "\"ok\":true")
    }
}

/// `POST /v1/claims`, a new key every time: every answer must be `claimed`.
pub struct NewClaims {
    /// Makes this phase's keys distinct from every other phase's.
    pub tag: String,
}

impl Workload for NewClaims {
    fn request(&self, conn: usize, seq: u64) -> Request<Full<Bytes>> {
        api_request("/v1/claims", claim_body(&key(&self.tag, conn, seq)))
    }

    fn check(&self, status: u16, body: &[u8]) -> bool {
        status == 200 && contains(body, "\"claimed\":true")
    }
}

/// `POST /v1/claims` again for keys a [`NewClaims`] phase claimed (same
/// payload, lease still live): every answer must be `claimed: false`.
pub struct DupClaims {
    /// The tag of the phase whose keys are repeated.
    pub tag: String,
    /// How many keys each of its connections claimed.
    pub sent: Vec<u64>,
}

impl Workload for DupClaims {
    fn request(&self, conn: usize, seq: u64) -> Request<Full<Bytes>> {
        let owner = conn % self.sent.len();
        let n = self.sent[owner].max(1);
        api_request("/v1/claims", claim_body(&key(&self.tag, owner, seq % n)))
    }

    fn check(&self, status: u16, body: &[u8]) -> bool {
        status == 200 && contains(body, "\"claimed\":false")
    }
}

/// A Stripe event body for `id`.
pub fn stripe_event(id: &str) -> String {
    format!(
        "{{\"id\":\"{id}\",\"object\":\"event\",\"type\":\"charge.succeeded\",\"data\":{{\"object\":\
         {{\"id\":\"ch_{id}\",\"amount\":4200,\"currency\":\"eur\"}}}}}}"
    )
}

/// `POST /hooks/stripe` with a valid `Stripe-Signature` for `body`.
pub fn hook_request(body: String) -> Request<Full<Bytes>> {
    Request::post("/hooks/stripe")
        .header(HOST, "127.0.0.1")
        .header("stripe-signature", stripe_signature(&body))
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("a valid request")
}

/// A `Stripe-Signature` of `body`, signed now with the bench's secret.
pub fn stripe_signature(body: &str) -> String {
    let t = chrono::Utc::now().timestamp();
    let mut mac = Hmac::<Sha256>::new_from_slice(STRIPE_SECRET.as_bytes()).expect("any key");
    mac.update(format!("{t}.").as_bytes());
    mac.update(body.as_bytes());
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// Signed deliveries of new events: every answer must be a first receipt.
pub struct Hooks {
    /// Makes this phase's event ids distinct.
    pub tag: String,
}

impl Workload for Hooks {
    fn request(&self, conn: usize, seq: u64) -> Request<Full<Bytes>> {
        hook_request(stripe_event(&key(&self.tag, conn, seq)))
    }

    fn check(&self, status: u16, body: &[u8]) -> bool {
        status == 200 && contains(body, "\"received\":true") && !contains(body, "duplicate")
    }
}

/// Whether a claim answer is the winner's.
pub fn claimed(body: &[u8]) -> bool {
    contains(body, "\"claimed\":true")
}

/// Whether a webhook answer is the first receipt (not a duplicate).
pub fn first_receipt(body: &[u8]) -> bool {
    contains(body, "\"received\":true") && !contains(body, "duplicate")
}

/// The claim request for `key`.
pub fn claim_request(key: &str) -> Request<Full<Bytes>> {
    api_request("/v1/claims", claim_body(key))
}
