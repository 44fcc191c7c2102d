//! What leaves the process, on both backends (issue 25): every URL is
//! checked against its target's allow-list at send time, a key cannot move
//! a probe to another host, an effect row edited in the database is
//! refused at send, and a target that reflects
//! request headers never gets its secret into the evidence.
//!
//! The other host is `127.0.0.17` on the target's port: any address of
//! 127.0.0.0/8 is loopback, so nothing leaves the machine.

use std::time::Duration;

use oncegate::config::Config;
use oncegate::outbox::{EffectRole, EffectSpec, NewEffect};
use serde_json::{json, Value};

use crate::harness::{on_both_backends, queue_new_effect, Backend, TestApp};
use crate::target::{Behaviour, MockTarget};

/// The secret header value the target holds.
const SECRET: &str = "sk_test_0123456789abcdef";

on_both_backends!(
    a_key_cannot_move_a_probe_to_another_host,
    encoded_dot_segments_cannot_leave_the_path_prefix,
    an_edited_effect_url_is_refused_at_send,
    secret_headers_never_come_back_through_evidence,
);

/// Target `t` at `<mock>/v1` with a secret `x-api-key`, and an operation
/// whose downstream key is the run's key alone.
async fn app_for(backend: Backend, mock: &MockTarget) -> TestApp {
    let base = mock.url("/v1");
    TestApp::spawn_with(backend, move |config: &mut Config| {
        let parsed: Config = toml::from_str(&format!(
            "[[targets]]\nname = \"t\"\nbase_url = \"{base}\"\ntimeout_ms = 1000\n\
             connect_timeout_ms = 500\n\
             retry = {{ max_attempts = 4, base_ms = 1, cap_ms = 2, max_elapsed_ms = 60000 }}\n\
             [targets.secret_headers]\nx-api-key = \"{SECRET}\"\n\
             [[operations]]\nname = \"send\"\ngate = \"none\"\nidempotency_key = \"{{key}}\"\n"
        ))
        .unwrap();
        config.targets = parsed.targets;
        config.operations = parsed.operations;
        config.dispatcher.lease_ms = 10_000;
    })
    .await
}

async fn claim_commit(app: &TestApp, key: &str, effect: Value) -> (u16, Value) {
    let (_, claim) = app
        .claim(json!({ "namespace": "crm", "key": key, "payload": { "k": key } }))
        .await;
    let lease = claim["lease"].as_str().expect("claimed").to_owned();
    let body = json!({ "namespace": "crm", "key": key, "lease": lease, "effects": [effect] });
    app.post("/v1/runs/commit", Some(&app.workflow), &body)
        .await
}

fn effect(path: &str) -> Value {
    json!({ "operation": "send", "effect_type": "send", "target": "t", "path": path,
            "body": { "to": "a@example.com" } })
}

async fn one_text(app: &TestApp, sql: &str) -> String {
    app.db.text(sql).await
}

/// H1: the probe template `http://127.0.0.0{idempotency_key}1:PORT/…`
/// passed as the sample `127.0.0.0x1` (127.0.0.1); key `2` made it
/// 127.0.0.021, that is 127.0.0.17, which got the secret header and
/// completed the effect with its 200.
async fn a_key_cannot_move_a_probe_to_another_host(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/v1/send", Behaviour::status(500));
    let other = MockTarget::start_on(&format!("127.0.0.17:{}", mock.port())).await;
    let app = app_for(backend, &mock).await;
    let template = format!(
        "http://127.0.0.0{{idempotency_key}}1:{}/v1/probe",
        mock.port()
    );

    let mut asked = effect("/send");
    asked["probe_url"] = json!(template);
    let (status, body) = claim_commit(&app, "2", asked).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("probe_url"), "{body}");

    // The same template stored past the commit's check (an edited row):
    // the URL built at probe time is checked, and refused.
    let new = NewEffect {
        operation: "send".into(),
        effect_type: "send".into(),
        target: "t".into(),
        method: "POST".into(),
        url: mock.url("/v1/send"),
        headers: Default::default(),
        body: Some(b"{}".to_vec()),
        idempotency_key: "2".into(),
        spec: EffectSpec {
            probe_url: Some(template),
            ..EffectSpec::default()
        },
        not_before: None,
        role: EffectRole::Act,
        schema_version: None,
    };
    queue_new_effect(&app.store, "p2", new).await;
    let dispatcher = app.dispatcher();
    dispatcher.dispatch_once().await.unwrap();
    assert_eq!(
        one_text(&app, "SELECT state FROM effects WHERE run_key = 'p2'").await,
        "unknown"
    );
    crate::harness::eventually("the probe is refused", Duration::from_secs(10), || async {
        dispatcher.dispatch_once().await.unwrap();
        (app.get_run("crm", "p2").await.1["state"] == "dead_lettered").then_some(())
    })
    .await;
    assert!(other.requests().is_empty(), "the probe left the allow-list");
    assert_eq!(mock.requests().len(), 1, "one send, no probe");
    assert_eq!(
        one_text(&app, "SELECT state FROM effects WHERE run_key = 'p2'").await,
        "unknown",
        "a refused probe decides nothing"
    );
    let detail = one_text(
        &app,
        "SELECT detail FROM dead_letters WHERE run_key = 'p2' AND class = 'unknown_outcome'",
    )
    .await;
    assert!(detail.contains("egress refused"), "{detail}");
    app.stop().await;
}

/// L6: `..%2f` passed the path-prefix check of a target with a path.
async fn encoded_dot_segments_cannot_leave_the_path_prefix(backend: Backend) {
    let mock = MockTarget::start().await;
    let app = app_for(backend, &mock).await;
    for (i, path) in ["/..%2fadmin", "/%2e%2e/admin", "/x/..%2F..%2Fadmin"]
        .into_iter()
        .enumerate()
    {
        let (status, body) = claim_commit(&app, &format!("l{i}"), effect(path)).await;
        assert_eq!(status, 400, "{path}: {body}");
    }
    let (status, body) = claim_commit(&app, "ok", effect("/a%2Fb")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(app.db.count("SELECT COUNT(*) FROM effects").await, 1);
    app.stop().await;
}

/// L7: a stored URL edited in the database was trusted at send time.
async fn an_edited_effect_url_is_refused_at_send(backend: Backend) {
    let mock = MockTarget::start().await;
    let other = MockTarget::start_on(&format!("127.0.0.17:{}", mock.port())).await;
    let app = app_for(backend, &mock).await;
    let (status, body) = claim_commit(&app, "e1", effect("/send")).await;
    assert_eq!(status, 200, "{body}");

    let stolen = format!("http://127.0.0.17:{}/v1/send", mock.port());
    app.db
        .exec(&format!("UPDATE effects SET url = '{stolen}'"))
        .await;
    app.dispatcher().dispatch_once().await.unwrap();
    assert!(other.requests().is_empty(), "the edited URL was sent to");
    assert!(mock.requests().is_empty());
    assert_eq!(
        one_text(&app, "SELECT state FROM effects WHERE run_key = 'e1'").await,
        "failed"
    );
    let detail = one_text(
        &app,
        "SELECT detail FROM dead_letters WHERE run_key = 'e1' AND class = 'permanent'",
    )
    .await;
    assert!(detail.contains("egress refused"), "{detail}");
    app.stop().await;
}

/// M1: a path under the target that reflects request headers handed the
/// target's `x-api-key` to every workflow token, the attempts table and
/// the dead letter.
async fn secret_headers_never_come_back_through_evidence(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/v1/echo", Behaviour::EchoHeaders { status: 400 });
    let app = app_for(backend, &mock).await;
    let (status, body) = claim_commit(&app, "m1", effect("/echo")).await;
    assert_eq!(status, 200, "{body}");
    app.dispatcher().dispatch_once().await.unwrap();
    let sent = mock.requests();
    assert_eq!(
        sent[0].header("x-api-key"),
        Some(SECRET),
        "the secret is sent"
    );

    let shown = app
        .client
        .get(format!("{}/v1/runs/effects", app.base))
        .query(&[("namespace", "crm"), ("key", "m1")])
        .bearer_auth(&app.workflow)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!shown.contains(SECRET), "{shown}");
    assert!(shown.contains("[redacted]"), "{shown}");
    let stored = [
        one_text(&app, "SELECT evidence FROM effect_attempts").await,
        one_text(
            &app,
            "SELECT last_evidence FROM dead_letters WHERE run_key = 'm1'",
        )
        .await,
    ];
    for evidence in stored {
        assert!(!evidence.contains(SECRET), "{evidence}");
        assert!(evidence.contains("[redacted]"), "{evidence}");
    }
    app.stop().await;
}
