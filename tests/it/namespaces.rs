//! Issue 25 M2, through the real server on both backends: a workflow
//! token cannot suppress real webhooks. A source's namespace belongs to
//! ingress, business keys are scoped per namespace, the default
//! downstream key is unambiguous, and a token's namespace allow-list
//! bounds every run operation and read.

use oncegate::tokens::{NamespacePattern, Scope};
use serde_json::{json, Value};

use crate::deadletters::{dlq_config, get};
use crate::harness::{on_both_backends, token, Backend, TestApp};
use crate::ingress::{deliver, stripe_event, stripe_signature, with_sources, SECRET};
use crate::target::MockTarget;

on_both_backends!(
    a_source_namespace_refuses_every_token_operation,
    a_business_key_in_one_namespace_never_blocks_another,
    default_downstream_keys_of_different_runs_differ,
    a_token_reaches_only_the_namespaces_it_lists,
);

async fn deliver_signed(app: &TestApp, source: &str, body: &[u8]) -> (u16, Value) {
    let sig = stripe_signature(SECRET, chrono::Utc::now().timestamp(), body);
    deliver(app, source, body, &[("stripe-signature", sig)]).await
}

async fn a_source_namespace_refuses_every_token_operation(backend: Backend) {
    let app = TestApp::spawn_with(backend, with_sources).await;
    let squat = json!({ "namespace": "stripe", "key": "evt_1", "payload": {} });
    let (status, body) = app.claim(squat).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["type"], "urn:oncegate:problem:namespace-reserved");
    assert_eq!(app.db.count("SELECT COUNT(*) FROM runs").await, 0);
    let moves = json!({ "namespace": "stripe", "key": "evt_1", "lease": "x.1", "result": {} });
    let (status, body) = app
        .post("/v1/runs/complete", Some(&app.workflow), &moves)
        .await;
    assert_eq!(
        status, 403,
        "an owner move is refused before its lease: {body}"
    );

    // The real delivery under that event id is accepted, not quarantined.
    let (status, answer) = deliver_signed(&app, "stripe", &stripe_event("evt_1", "x", "ch")).await;
    assert_eq!((status, answer), (200, json!({ "received": true })));
    assert_eq!(
        app.db
            .count("SELECT COUNT(*) FROM effects WHERE namespace = 'stripe'")
            .await,
        1,
        "its forward is queued"
    );
    let (status, run) = app.get_run("stripe", "evt_1").await;
    assert_eq!(
        (status, &run["state"]),
        (200, &json!("approved")),
        "reads stay open"
    );
    app.stop().await;
}

async fn a_business_key_in_one_namespace_never_blocks_another(backend: Backend) {
    let app = TestApp::spawn_with(backend, with_sources).await;
    let squat = json!({ "namespace": "crm", "key": "k1", "payload": {},
        "business_key": "order:o-1" });
    let (status, body) = app.claim(squat).await;
    assert_eq!((status, &body["claimed"]), (200, &json!(true)), "{body}");

    // The "orders" source keys its runs by `order:{/data/object/id}`.
    let (status, answer) = deliver_signed(&app, "orders", &stripe_event("evt_a", "x", "o-1")).await;
    assert_eq!((status, answer), (200, json!({ "received": true })));
    // Inside one namespace the business key still joins events.
    let (status, answer) = deliver_signed(&app, "orders", &stripe_event("evt_b", "y", "o-1")).await;
    assert_eq!(status, 200);
    assert_eq!(
        answer["duplicate_of"],
        json!({ "namespace": "orders", "key": "evt_a" })
    );
    let again = json!({ "namespace": "crm", "key": "k2", "payload": {},
        "business_key": "order:o-1" });
    let (_, body) = app.claim(again).await;
    assert_eq!(
        body["duplicate_of"],
        json!({ "namespace": "crm", "key": "k1" }),
        "{body}"
    );
    app.stop().await;
}

async fn default_downstream_keys_of_different_runs_differ(backend: Backend) {
    let mock = MockTarget::start().await;
    let app = TestApp::spawn_with(backend, dlq_config(mock.base_url())).await;
    for (namespace, key) in [("crm:x", "y"), ("crm", "x:y")] {
        let (_, claim) = app
            .claim(json!({ "namespace": namespace, "key": key, "payload": {} }))
            .await;
        let effects = json!([{ "operation": "send_email", "effect_type": "send", "target": "mock",
            "path": "/send", "body": {} }]);
        let commit = json!({ "namespace": namespace, "key": key, "lease": claim["lease"],
            "effects": effects });
        let (status, body) = app
            .post("/v1/runs/commit", Some(&app.workflow), &commit)
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let keys = app
        .db
        .texts("SELECT idempotency_key FROM effects ORDER BY idempotency_key")
        .await;
    assert_eq!(keys, ["crm%3Ax:y:send", "crm:x:y:send"]);
    app.stop().await;
}

async fn a_token_reaches_only_the_namespaces_it_lists(backend: Backend) {
    let mock = MockTarget::start().await;
    let (scoped, mut entry) = token("crm-flow", &[Scope::Workflow]);
    entry.namespaces = Some(
        ["crm", "billing:*"]
            .iter()
            .map(|p| NamespacePattern::parse(p).unwrap())
            .collect(),
    );
    let (ops, mut ops_entry) = token("crm-ops", &[Scope::Operator]);
    ops_entry.namespaces = Some(vec![NamespacePattern::parse("crm").unwrap()]);
    let base = mock.base_url();
    let app = TestApp::spawn_with(backend, move |c| {
        dlq_config(base)(c);
        c.tokens.extend([entry, ops_entry]);
    })
    .await;
    let claim = |ns: &str, key: &str| json!({ "namespace": ns, "key": key, "payload": {} });
    for ns in ["crm", "billing:eu"] {
        let (status, body) = app.post("/v1/claims", Some(&scoped), &claim(ns, "a")).await;
        assert_eq!(
            (status, &body["claimed"]),
            (200, &json!(true)),
            "{ns}: {body}"
        );
    }
    let (status, body) = app
        .post("/v1/claims", Some(&scoped), &claim("hr", "a"))
        .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["type"], "urn:oncegate:problem:namespace-not-allowed");

    // Another workflow's run in "hr": no move, no read, no cancel.
    let (_, other) = app.claim(claim("hr", "b")).await;
    let lease = other["lease"].clone();
    let complete = json!({ "namespace": "hr", "key": "b", "lease": lease, "result": {} });
    let (status, _) = app
        .post("/v1/runs/complete", Some(&scoped), &complete)
        .await;
    assert_eq!(status, 403);
    let reads = [
        ("/v1/runs", &scoped),
        ("/v1/runs/effects", &scoped),
        ("/v1/runs/timeline", &scoped),
        ("/v1/runs/links", &ops),
    ];
    for (path, who) in reads {
        let (status, body) = get(&app, &format!("{path}?namespace=hr&key=b"), who).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert_eq!(body["type"], "urn:oncegate:problem:namespace-not-allowed");
        let (status, body) = get(&app, &format!("{path}?namespace=crm&key=a"), who).await;
        assert_eq!(status, 200, "{path} inside its namespaces: {body}");
    }
    let effects = json!([{ "operation": "send_email", "effect_type": "send", "target": "mock",
        "path": "/send", "body": {} }]);
    let commit = json!({ "namespace": "hr", "key": "b", "lease": lease, "effects": effects });
    let (status, body) = app
        .post("/v1/runs/commit", Some(&app.workflow), &commit)
        .await;
    assert_eq!(status, 200, "{body}");
    let id = app
        .db
        .text("SELECT id FROM effects WHERE run_key = 'b'")
        .await;
    let cancel = format!("/v1/effects/{id}/cancel");
    let (status, _) = app.post(&cancel, Some(&ops), &json!({})).await;
    assert_eq!(
        status, 404,
        "an operator limited to crm does not see hr's effect"
    );
    assert_eq!(
        app.db
            .text("SELECT state FROM effects WHERE run_key = 'b'")
            .await,
        "pending"
    );
    let (status, _) = app.post(&cancel, Some(&app.operator), &json!({})).await;
    assert_eq!(status, 200, "an operator without a list cancels it");
    app.stop().await;
}
