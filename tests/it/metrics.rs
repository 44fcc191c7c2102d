//! `GET /metrics` after real traffic, on both backends: what is counted,
//! the gauges read at scrape time, and that no key, token or payload value
//! ever becomes a label.

use std::time::Duration;

use oncegate::config::Config;
use serde_json::{json, Value};

use crate::harness::{eventually, on_both_backends, Backend, TestApp};
use crate::ingress::{stripe_signature, with_sources, SECRET};
use crate::target::{Behaviour, MockTarget};

/// The value of the first sample whose line starts with `series`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A target `mock` on the mock server, operation `send_email`, bounds of 3.
fn config_for(base: String) -> impl FnOnce(&mut Config) {
    move |config: &mut Config| {
        with_sources(config);
        let extra: Config = toml::from_str(&format!(
            "[[targets]]\nname = \"mock\"\nbase_url = \"{base}\"\ntimeout_ms = 1000\n\
             retry = {{ max_attempts = 2, base_ms = 1, cap_ms = 2, max_elapsed_ms = 60000 }}\n\
             [[operations]]\nname = \"send_email\"\ngate = \"none\"\n"
        ))
        .unwrap();
        config.targets.extend(extra.targets);
        config.operations = extra.operations;
        config.metrics.max_label_values = 3;
    }
}

async fn claim(app: &TestApp, namespace: &str, key: &str, payload: Value) -> Value {
    let (status, body) = app
        .claim(json!({ "namespace": namespace, "key": key, "payload": payload, "lease_ms": 60000 }))
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn labels_never_hold_keys_tokens_or_payload_values(backend: Backend) {
    let target = MockTarget::start().await;
    let app = TestApp::spawn_with(backend, config_for(target.base_url())).await;
    let key = "KEY-9f1c/with?query#frag";
    let payload_value = "PAYLOAD-VALUE-77d2";
    let correlation = "CORR-ID-5e0b";
    let first = app
        .client
        .post(format!("{}/v1/claims", app.base))
        .bearer_auth(&app.workflow)
        .header("x-correlation-id", correlation)
        .json(
            &json!({ "namespace": "crm", "key": key, "payload": { "secret_note": payload_value },
                       "business_key": "BUSINESS-KEY-31aa" }),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(first.headers()["x-correlation-id"], correlation);
    let first: Value = first.json().await.unwrap();
    let lease = first["lease"].as_str().unwrap().to_owned();
    // A duplicate with another payload (a conflict), a read by key, a
    // complete, a 404 path, an unknown source and a refused token.
    let (status, _) = app
        .claim(json!({ "namespace": "crm", "key": key, "payload": { "other": payload_value } }))
        .await;
    assert_eq!(status, 422);
    assert_eq!(app.get_run("crm", key).await.0, 200);
    let done =
        json!({ "namespace": "crm", "key": key, "lease": lease, "result": { "r": payload_value } });
    assert_eq!(
        app.post("/v1/runs/complete", Some(&app.workflow), &done)
            .await
            .0,
        200
    );
    let lost = app
        .client
        .get(format!("{}/no/PATH-SEGMENT-4c4c", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(lost.status().as_u16(), 404);
    let (status, _) = app.post("/hooks/SOURCE-NAME-8a8a", None, &json!({})).await;
    assert_eq!(status, 404);
    let (status, _) = app
        .post("/v1/claims", Some("og_NOT-A-TOKEN-6b6b"), &json!({}))
        .await;
    assert_eq!(status, 401);
    // A signed delivery, and one with a bad signature.
    let body = serde_json::to_vec(
        &json!({ "id": "evt_EVENT-ID-2d2d", "type": "charge.succeeded",
        "data": { "object": { "id": "OBJECT-ID-1f1f", "card": payload_value } } }),
    )
    .unwrap();
    let t = chrono::Utc::now().timestamp();
    let signature = stripe_signature(SECRET, t, &body);
    for sig in [signature.clone(), format!("t={t},v1={}", "0".repeat(64))] {
        app.client
            .post(format!("{}/hooks/stripe", app.base))
            .header("stripe-signature", sig)
            .body(body.clone())
            .send()
            .await
            .unwrap();
    }

    let text = app.scrape().await;
    for secret in [
        key,
        "KEY-9f1c",
        payload_value,
        correlation,
        "BUSINESS-KEY-31aa",
        "PATH-SEGMENT-4c4c",
        "SOURCE-NAME-8a8a",
        "NOT-A-TOKEN-6b6b",
        "EVENT-ID-2d2d",
        "OBJECT-ID-1f1f",
        app.workflow.as_str(),
        lease.as_str(),
        SECRET,
        signature.as_str(),
    ] {
        assert!(!text.contains(secret), "/metrics shows {secret:?}:\n{text}");
    }
    for series in [
        "oncegate_claims_total{namespace=\"crm\",outcome=\"claimed\"} 1",
        "oncegate_claims_total{namespace=\"crm\",outcome=\"conflict\"} 1",
        "oncegate_payload_conflicts_total{namespace=\"crm\"} 1",
        "oncegate_signature_failures_total{source=\"stripe\"} 1",
        "oncegate_ingress_events_total{event_type=\"charge.succeeded\",outcome=\"claimed\",source=\"stripe\"} 1",
        "oncegate_run_processing_seconds_count{namespace=\"crm\",to=\"completed\"} 1",
        "oncegate_run_completion_seconds_count{namespace=\"crm\",state=\"completed\"} 1",
        "oncegate_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/claims\",status=\"2xx\"} 1",
        "oncegate_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/claims\",status=\"4xx\"} 2",
        "oncegate_http_request_duration_seconds_count{method=\"GET\",route=\"/v1/runs\",status=\"2xx\"} 1",
        "oncegate_http_request_duration_seconds_count{method=\"GET\",route=\"unmatched\",status=\"4xx\"} 1",
        "oncegate_http_request_duration_seconds_count{method=\"POST\",route=\"/hooks/{source}\",status=\"4xx\"} 2",
        "oncegate_actions_enabled{scope=\"*\"} 1",
    ] {
        assert!(text.contains(series), "missing {series}\n{text}");
    }
    app.stop().await;
}

async fn namespaces_past_the_bound_share_other(backend: Backend) {
    let target = MockTarget::start().await;
    let app = TestApp::spawn_with(backend, config_for(target.base_url())).await;
    // Sources are configured namespaces; three more are learned, then `other`.
    for ns in ["t1", "t2", "t3", "t4", "t5"] {
        claim(&app, ns, "k", json!({})).await;
    }
    // A source's namespace is claimed by its deliveries only.
    let body = crate::ingress::stripe_event("evt_m", "charge.succeeded", "ch_m");
    let sig = crate::ingress::stripe_signature(
        crate::ingress::SECRET,
        chrono::Utc::now().timestamp(),
        &body,
    );
    let (status, _) =
        crate::ingress::deliver(&app, "stripe", &body, &[("stripe-signature", sig)]).await;
    assert_eq!(status, 200);
    let text = app.scrape().await;
    for ns in ["t1", "t2", "t3", "stripe"] {
        let series = format!("oncegate_claims_total{{namespace=\"{ns}\",outcome=\"claimed\"}} 1");
        assert!(text.contains(&series), "missing {series}\n{text}");
    }
    assert!(text.contains("oncegate_claims_total{namespace=\"other\",outcome=\"claimed\"} 2"));
    assert!(!text.contains("namespace=\"t4\""), "{text}");
    app.stop().await;
}

async fn gauges_read_stale_leases_dead_letters_and_the_switch(backend: Backend) {
    let target = MockTarget::start().await;
    target.on_path("/refuse", Behaviour::status(400));
    let app = TestApp::spawn_with(backend, config_for(target.base_url())).await;
    // A run whose owner vanished: its lease expires and nobody reclaims it.
    let (status, _) = app
        .claim(json!({ "namespace": "crm", "key": "stale", "payload": {}, "lease_ms": 100 }))
        .await;
    assert_eq!(status, 200);
    claim(&app, "crm", "alive", json!({})).await;
    eventually(
        "the stale lease is counted",
        Duration::from_secs(10),
        || async {
            let text = app.scrape().await;
            (sample(&text, "oncegate_stale_processing_runs{namespace=\"crm\"}") == Some(1.0))
                .then_some(())
        },
    )
    .await;

    // A permanent refusal dead-letters its run; an older one waits too.
    let refused = claim(&app, "crm", "refused", json!({})).await;
    let commit = json!({ "namespace": "crm", "key": "refused", "lease": refused["lease"],
        "effects": [{ "operation": "send_email", "effect_type": "send_email", "target": "mock",
                      "path": "/refuse", "body": {} }] });
    assert_eq!(
        app.post("/v1/runs/commit", Some(&app.workflow), &commit)
            .await
            .0,
        200
    );
    app.dispatcher().dispatch_once().await.unwrap();
    let old = chrono::Utc::now().timestamp_millis() - 7_200_000;
    app.db
        .exec(&format!(
            "INSERT INTO dead_letters (id, namespace, run_key, class, component, detail, created_at) \
             VALUES ('dl-old', 'crm', 'old', 'permanent', 'dispatcher', '{{}}', {old})"
        ))
        .await;
    app.store.set_actions("mock", false, "test").await.unwrap();

    let text = app.scrape().await;
    assert_eq!(
        sample(&text, "oncegate_dead_letters_open{namespace=\"crm\"}"),
        Some(2.0),
        "{text}"
    );
    let age = sample(
        &text,
        "oncegate_dead_letter_oldest_age_seconds{namespace=\"crm\"}",
    )
    .unwrap();
    assert!((7_200.0..7_300.0).contains(&age), "{age}");
    assert_eq!(
        sample(&text, "oncegate_actions_enabled{scope=\"mock\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "oncegate_actions_enabled{scope=\"*\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "oncegate_effect_attempts_total{class=\"permanent\",target=\"mock\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "oncegate_run_completion_seconds_count{namespace=\"crm\",state=\"dead_lettered\"}"
        ),
        Some(1.0),
        "the dispatcher observes the runs it ends"
    );
    assert_eq!(
        sample(
            &text,
            "oncegate_run_processing_seconds_count{namespace=\"crm\",to=\"approved\"}"
        ),
        Some(1.0)
    );
    app.stop().await;
}

on_both_backends!(
    labels_never_hold_keys_tokens_or_payload_values,
    namespaces_past_the_bound_share_other,
    gauges_read_stale_leases_dead_letters_and_the_switch,
);
