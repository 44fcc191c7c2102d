//! Webhook ingress against a real server, on both backends: the test
//! matrix of the webhook-gate article ("Test the gate before production").

use futures_util::future::join_all;
use hmac::{Hmac, Mac};
use oncegate::config::Config;
use serde_json::{json, Value};
use sha2::Sha256;

use crate::harness::{on_both_backends, Backend, TestApp};

pub const SECRET: &str = "whsec_current_secret";
const NEXT_SECRET: &str = "whsec_next_secret";
const RETIRED_SECRET: &str = "whsec_retired_secret";

/// Adds a workflow target and signed sources (Stripe, Slack, one that
/// rejects conflicts and asks for retries) to a test config.
pub fn with_sources(config: &mut Config) {
    config.targets = vec![toml::from_str(
        "name = \"n8n\"\nbase_url = \"http://127.0.0.1:9/webhook\"\nkind = \"workflow\"\n",
    )
    .unwrap()];
    let stripe = format!(
        "name = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"{SECRET}\", \"{NEXT_SECRET}\"]\n\
         target = \"n8n\"\npath = \"/stripe-events\"\nmax_body_bytes = 4096\n"
    );
    let strict = format!(
        "name = \"strict\"\nscheme = \"stripe\"\nsecrets = [\"{SECRET}\"]\ntarget = \"n8n\"\n\
         in_flight = \"retry\"\non_conflict = \"reject\"\n"
    );
    let by_object = format!(
        "name = \"orders\"\nscheme = \"stripe\"\nsecrets = [\"{SECRET}\"]\ntarget = \"n8n\"\n\
         business_key = \"order:{{/data/object/id}}\"\n"
    );
    let slack = format!(
        "name = \"slack\"\nscheme = \"slack\"\nsecrets = [\"{SECRET}\"]\ntarget = \"n8n\"\n"
    );
    config.sources = [stripe, strict, by_object, slack]
        .iter()
        .map(|text| toml::from_str(text).unwrap())
        .collect();
}

fn hmac_hex(secret: &str, message: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(message);
    hex::encode(mac.finalize().into_bytes())
}

/// A `Stripe-Signature` header for `body` at time `t`.
pub fn stripe_signature(secret: &str, t: i64, body: &[u8]) -> String {
    let mut signed = format!("{t}.").into_bytes();
    signed.extend_from_slice(body);
    format!("t={t},v1={}", hmac_hex(secret, &signed))
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

pub fn stripe_event(id: &str, kind: &str, object: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "id": id,
        "type": kind,
        "data": { "object": { "id": object, "amount": 4200 } },
    }))
    .unwrap()
}

/// Posts a raw delivery with extra headers.
pub async fn deliver(
    app: &TestApp,
    source: &str,
    body: &[u8],
    headers: &[(&str, String)],
) -> (u16, Value) {
    let mut req = app
        .client
        .post(format!("{}/hooks/{source}", app.base))
        .header("content-type", "application/json")
        .body(body.to_vec());
    for (name, value) in headers {
        req = req.header(*name, value);
    }
    crate::harness::answer(req).await
}

async fn deliver_stripe(app: &TestApp, source: &str, body: &[u8]) -> (u16, Value) {
    let sig = stripe_signature(SECRET, now(), body);
    deliver(app, source, body, &[("stripe-signature", sig)]).await
}

/// Rows in every table a delivery could write.
async fn rows(app: &TestApp) -> [i64; 5] {
    let mut out = [0; 5];
    for (i, table) in [
        "runs",
        "raw_events",
        "effects",
        "dead_letters",
        "audit_events",
    ]
    .iter()
    .enumerate()
    {
        out[i] = app.db.count(&format!("SELECT COUNT(*) FROM {table}")).await;
    }
    out
}

on_both_backends!(
    hundred_concurrent_deliveries_make_one_run_event_and_forward,
    bad_signatures_store_nothing,
    forward_keeps_one_idempotency_key_across_redeliveries,
    event_types_are_separate_runs_unless_a_business_key_joins_them,
    conflicting_body_is_quarantined_and_never_forwarded,
    strict_source_rejects_conflicts_and_asks_for_retries,
    refused_bodies_store_nothing,
);

async fn hundred_concurrent_deliveries_make_one_run_event_and_forward(backend: Backend) {
    let app = TestApp::spawn_with(backend, with_sources).await;
    let body = stripe_event("evt_1", "charge.succeeded", "ch_1");
    let answers = join_all((0..100).map(|_| deliver_stripe(&app, "stripe", &body))).await;
    let mut fresh = 0;
    for (status, answer) in &answers {
        assert_eq!(*status, 200, "{answer}");
        assert_eq!(answer["received"], true);
        if answer.get("duplicate").is_none() {
            fresh += 1;
        }
    }
    assert_eq!(fresh, 1, "one delivery is the original");
    assert_eq!(rows(&app).await[..4], [1, 1, 1, 0]);
    let effects = app
        .store
        .effects_of(&ns("stripe"), &key("evt_1"))
        .await
        .unwrap();
    let forward = &effects[0];
    assert_eq!(forward.state.as_str(), "pending");
    assert_eq!(forward.new.url, "http://127.0.0.1:9/webhook/stripe-events");
    assert_eq!(
        forward.new.body.as_deref(),
        Some(body.as_slice()),
        "the body is forwarded byte for byte"
    );
    assert_eq!(
        forward.new.headers["x-oncegate-event-type"],
        "charge.succeeded"
    );
    let (_, run) = app.get_run("stripe", "evt_1").await;
    assert_eq!(
        run["state"], "approved",
        "accepted events wait in the outbox"
    );
    app.stop().await;
}

fn ns(s: &str) -> oncegate::ledger::Namespace {
    oncegate::ledger::Namespace::parse(s).unwrap()
}

fn key(s: &str) -> oncegate::ledger::IdempotencyKey {
    oncegate::ledger::IdempotencyKey::parse(s).unwrap()
}

async fn bad_signatures_store_nothing(backend: Backend) {
    let app = TestApp::spawn_with(backend, with_sources).await;
    let body = stripe_event("evt_1", "charge.succeeded", "ch_1");
    let t = now();
    let good = stripe_signature(SECRET, t, &body);
    let mut changed = body.clone();
    changed[10] ^= 1;
    let cases: Vec<(&str, Vec<u8>, Option<String>)> = vec![
        ("no signature", body.clone(), None),
        (
            "wrong secret",
            body.clone(),
            Some(stripe_signature("whsec_wrong", t, &body)),
        ),
        (
            "retired secret",
            body.clone(),
            Some(stripe_signature(RETIRED_SECRET, t, &body)),
        ),
        (
            "too old",
            body.clone(),
            Some(stripe_signature(SECRET, t - 301, &body)),
        ),
        (
            "too far ahead",
            body.clone(),
            Some(stripe_signature(SECRET, t + 301, &body)),
        ),
        (
            "truncated header",
            body.clone(),
            Some(good[..good.len() - 6].to_owned()),
        ),
        (
            "garbled header",
            body.clone(),
            Some(format!("{good},{good}").replace("v1=", "v1==")),
        ),
        (
            "header without timestamp",
            body.clone(),
            Some(good.split(',').nth(1).unwrap().to_owned()),
        ),
        ("body changed by one byte", changed, Some(good.clone())),
    ];
    for (what, body, sig) in cases {
        let headers: Vec<(&str, String)> =
            sig.into_iter().map(|s| ("stripe-signature", s)).collect();
        let (status, problem) = deliver(&app, "stripe", &body, &headers).await;
        assert_eq!(status, 401, "{what}: {problem}");
        assert_eq!(
            problem["type"], "urn:oncegate:problem:signature-refused",
            "{what}"
        );
    }
    assert_eq!(
        rows(&app).await,
        [0; 5],
        "a refused signature writes nothing anywhere"
    );
    let metrics = app.scrape().await;
    assert!(
        metrics.contains(r#"oncegate_signature_failures_total{source="stripe"} 9"#),
        "{metrics}"
    );

    // The rotated-in secret is accepted.
    let sig = stripe_signature(NEXT_SECRET, t, &body);
    let (status, _) = deliver(&app, "stripe", &body, &[("stripe-signature", sig)]).await;
    assert_eq!(status, 200);
    app.stop().await;
}

async fn forward_keeps_one_idempotency_key_across_redeliveries(backend: Backend) {
    let app = TestApp::spawn_with(backend, with_sources).await;
    let body = stripe_event("evt_1", "charge.succeeded", "ch_1");
    deliver_stripe(&app, "stripe", &body).await;
    let first = app
        .store
        .effects_of(&ns("stripe"), &key("evt_1"))
        .await
        .unwrap();
    assert_eq!(first[0].new.idempotency_key, "stripe:evt_1:forward");

    // The workflow acknowledged; the provider redelivers anyway.
    app.db
        .exec("UPDATE runs SET state = 'completed' WHERE run_key = 'evt_1'")
        .await;
    let (status, answer) = deliver_stripe(&app, "stripe", &body).await;
    assert_eq!(status, 200);
    assert_eq!(answer, json!({ "received": true, "duplicate": true }));
    let after = app
        .store
        .effects_of(&ns("stripe"), &key("evt_1"))
        .await
        .unwrap();
    assert_eq!(after.len(), 1, "no second forward");
    assert_eq!(after[0].id, first[0].id);
    assert_eq!(after[0].new.idempotency_key, first[0].new.idempotency_key);
    app.stop().await;
}

async fn event_types_are_separate_runs_unless_a_business_key_joins_them(backend: Backend) {
    let app = TestApp::spawn_with(backend, with_sources).await;
    let created = stripe_event("evt_a", "charge.created", "ch_1");
    let captured = stripe_event("evt_b", "charge.captured", "ch_1");
    for body in [&created, &captured] {
        let (status, answer) = deliver_stripe(&app, "stripe", body).await;
        assert_eq!((status, answer), (200, json!({ "received": true })));
    }
    assert_eq!(app.db.count("SELECT COUNT(*) FROM runs").await, 2);

    let (_, first) = deliver_stripe(&app, "orders", &created).await;
    assert_eq!(first, json!({ "received": true }));
    let (status, second) = deliver_stripe(&app, "orders", &captured).await;
    assert_eq!(status, 200);
    assert_eq!(
        second["duplicate_of"],
        json!({ "namespace": "orders", "key": "evt_a" })
    );
    assert_eq!(
        app.db
            .count("SELECT COUNT(*) FROM effects WHERE namespace = 'orders'")
            .await,
        1
    );
    app.stop().await;
}

async fn conflicting_body_is_quarantined_and_never_forwarded(backend: Backend) {
    let app = TestApp::spawn_with(backend, with_sources).await;
    deliver_stripe(
        &app,
        "stripe",
        &stripe_event("evt_1", "charge.succeeded", "ch_1"),
    )
    .await;
    let forged = stripe_event("evt_1", "charge.succeeded", "ch_999");
    let (status, answer) = deliver_stripe(&app, "stripe", &forged).await;
    assert_eq!(status, 200);
    assert_eq!(answer, json!({ "received": true, "quarantined": true }));
    assert_eq!(
        app.db
            .count("SELECT COUNT(*) FROM raw_events WHERE status = 'quarantined'")
            .await,
        1
    );
    assert_eq!(
        app.db.count("SELECT COUNT(*) FROM effects").await,
        1,
        "never forwarded"
    );
    assert_eq!(
        app.db.count("SELECT COUNT(*) FROM dead_letters WHERE class = 'payload_conflict' AND run_key = 'evt_1'").await,
        1
    );
    let effects = app
        .store
        .effects_of(&ns("stripe"), &key("evt_1"))
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(effects[0].new.body.as_deref().unwrap()).contains("ch_1\""));
    app.stop().await;
}

async fn strict_source_rejects_conflicts_and_asks_for_retries(backend: Backend) {
    let app = TestApp::spawn_with(backend, with_sources).await;
    let body = stripe_event("evt_1", "charge.succeeded", "ch_1");
    deliver_stripe(&app, "strict", &body).await;
    let before = rows(&app).await;
    let sig = stripe_signature(SECRET, now(), &body);
    let resp = app
        .client
        .post(format!("{}/hooks/strict", app.base))
        .header("stripe-signature", sig)
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        409,
        "in flight, and the source asks for a retry"
    );
    assert!(resp.headers().get("retry-after").is_some());
    let (status, problem) =
        deliver_stripe(&app, "strict", &stripe_event("evt_1", "x", "ch_2")).await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(rows(&app).await, before, "neither wrote anything");
    app.stop().await;
}

async fn refused_bodies_store_nothing(backend: Backend) {
    let app = TestApp::spawn_with(backend, with_sources).await;
    let big = serde_json::to_vec(&json!({ "id": "evt_big", "type": "x", "pad": "x".repeat(5000) }))
        .unwrap();
    let (status, _) = deliver_stripe(&app, "stripe", &big).await;
    assert_eq!(status, 413);
    let (status, problem) = deliver_stripe(&app, "stripe", b"id=evt_1&type=form").await;
    assert_eq!(status, 400, "{problem}");
    assert_eq!(problem["field"], "body");
    let (status, problem) = deliver_stripe(&app, "stripe", br#"{"type":"no.id"}"#).await;
    assert_eq!(status, 400);
    assert_eq!(problem["field"], "event_id");
    let (status, _) = deliver_stripe(&app, "nowhere", b"{}").await;
    assert_eq!(status, 404);
    assert_eq!(rows(&app).await, [0; 5]);
    app.stop().await;
}

#[tokio::test]
async fn slack_url_verification_is_answered_after_the_signature_check() {
    let app = TestApp::spawn_with(Backend::Sqlite, with_sources).await;
    let body = br#"{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let ts = now().to_string();
    let mut signed = format!("v0:{ts}:").into_bytes();
    signed.extend_from_slice(body);
    let sig = format!("v0={}", hmac_hex(SECRET, &signed));
    let headers = [
        ("x-slack-request-timestamp", ts.clone()),
        ("x-slack-signature", sig),
    ];
    let (status, answer) = deliver(&app, "slack", body, &headers).await;
    assert_eq!(status, 200);
    assert_eq!(
        answer,
        json!({ "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" })
    );
    let bad = [
        ("x-slack-request-timestamp", ts),
        ("x-slack-signature", "v0=00".to_owned()),
    ];
    let (status, _) = deliver(&app, "slack", body, &bad).await;
    assert_eq!(
        status, 401,
        "the handshake is not answered without a valid signature"
    );
    assert_eq!(rows(&app).await, [0; 5]);
    app.stop().await;
}
