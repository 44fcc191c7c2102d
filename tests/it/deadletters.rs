//! Dead letters on both backends: every cause leaves a record with its
//! evidence (permanent refusal, spent retry budget, unknown outcome,
//! payload conflict, workflow error by execution ref). The shared helpers
//! of the dead-letter tests live here too.

use std::time::Duration;

use oncegate::config::Config;
use serde_json::{json, Value};

use crate::harness::{eventually, on_both_backends, Backend, TestApp};
use crate::target::{Behaviour, MockTarget};

/// Targets `mock` (ignores keys), operations `send_email` (no gate) and
/// `refund` (gated), and an unsigned source `shop` forwarding to `mock`.
pub fn dlq_config(base: String) -> impl FnOnce(&mut Config) {
    move |config: &mut Config| {
        let text = format!(
            "[[targets]]\nname = \"mock\"\nbase_url = \"{base}\"\ntimeout_ms = 1000\nconnect_timeout_ms = 500\n\
             retry = {{ max_attempts = 3, base_ms = 1, cap_ms = 2, max_elapsed_ms = 60000 }}\n\
             [[operations]]\nname = \"send_email\"\ngate = \"none\"\n\
             [[operations]]\nname = \"refund\"\nirreversible = true\n\
             [[sources]]\nname = \"shop\"\nscheme = \"none\"\ntarget = \"mock\"\npath = \"/hook\"\nevent_id = \"/id\"\n"
        );
        let parsed: Config = toml::from_str(&text).unwrap();
        config.targets = parsed.targets;
        config.operations = parsed.operations;
        config.sources = parsed.sources;
        config.dispatcher.lease_ms = 10_000;
        config.dead_letters.default_owner = Some("on-call".into());
    }
}

pub async fn app_for(backend: Backend, mock: &MockTarget) -> TestApp {
    TestApp::spawn_with(backend, dlq_config(mock.base_url())).await
}

/// Claims `crm/key` (with an execution ref) and commits one email to `path`.
pub async fn claim_commit(app: &TestApp, key: &str, path: &str) -> Value {
    let (_, claim) = app
        .claim(json!({ "namespace": "crm", "key": key, "payload": { "k": key }, "execution_ref": format!("exec-{key}") }))
        .await;
    let lease = claim["lease"].as_str().expect("claimed").to_owned();
    let effects = json!([{ "operation": "send_email", "effect_type": "send_email", "target": "mock",
        "path": path, "body": { "to": "a@example.com" } }]);
    let body = json!({ "namespace": "crm", "key": key, "lease": lease, "effects": effects });
    let (status, answer) = app
        .post("/v1/runs/commit", Some(&app.workflow), &body)
        .await;
    assert_eq!(status, 200, "{answer}");
    claim
}

/// Steps the dispatcher until `crm/key` is in `state`.
pub async fn dispatch_until(app: &TestApp, key: &str, state: &str) {
    let dispatcher = app.dispatcher();
    eventually(
        &format!("{key} to be {state}"),
        Duration::from_secs(20),
        || async {
            dispatcher.dispatch_once().await.unwrap();
            (app.get_run("crm", key).await.1["state"] == state).then_some(())
        },
    )
    .await;
}

pub async fn get(app: &TestApp, path: &str, token: &str) -> (u16, Value) {
    let req = app.client.get(format!("{}{path}", app.base));
    crate::harness::answer(req.bearer_auth(token)).await
}

/// The only open dead letter of `namespace/key`.
pub async fn dead_letter_of(app: &TestApp, namespace: &str, key: &str) -> Value {
    let (status, page) = get(
        app,
        &format!("/v1/dead-letters?namespace={namespace}&limit=500"),
        &app.operator,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let mine: Vec<Value> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["key"] == key)
        .cloned()
        .collect();
    assert_eq!(mine.len(), 1, "{page}");
    let id = mine[0]["id"].as_str().unwrap();
    let (status, detail) = get(app, &format!("/v1/dead-letters/{id}"), &app.operator).await;
    assert_eq!(status, 200, "{detail}");
    detail
}

on_both_backends!(
    dispatcher_causes_leave_records_with_evidence,
    quarantined_delivery_is_recorded_and_replaced_under_a_new_key,
    workflow_error_by_execution_ref,
);

async fn dispatcher_causes_leave_records_with_evidence(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path(
        "/bad",
        Behaviour::RespondNoCommit {
            status: 422,
            headers: vec![("x-request-id".into(), "req-7".into())],
            body: "{\"error\":\"invalid address\"}".into(),
        },
    );
    mock.on_path("/busy", Behaviour::no_commit(429));
    mock.on_path("/lost", Behaviour::CommitThenClose);
    mock.on_path("/failing", Behaviour::status(500));
    let app = app_for(backend, &mock).await;
    for (key, path, state) in [
        ("perm", "/bad", "dead_lettered"),
        ("busy", "/busy", "dead_lettered"),
        ("lost", "/lost", "dead_lettered"),
        ("failing", "/failing", "dead_lettered"),
    ] {
        claim_commit(&app, key, path).await;
        dispatch_until(&app, key, state).await;
    }
    let perm = dead_letter_of(&app, "crm", "perm").await;
    let d = &perm["dead_letter"];
    let run = &perm["run"];
    assert_eq!(d["class"], "permanent");
    assert_eq!(d["component"], "dispatcher");
    assert_eq!(d["event_id"], "perm");
    assert_eq!(d["correlation_id"], run["correlation_id"]);
    assert_eq!(d["payload_hash"], run["payload_hash"]);
    assert_eq!(d["run_state_at_record"], "dead_lettered");
    assert_eq!(d["state"], "dead_lettered");
    assert_eq!(d["owner"], "on-call", "routed by the config");
    assert!(d["next_action"].as_str().unwrap().contains("replay"));
    assert_eq!(
        d["retention_deadline"],
        Value::Null,
        "open records are kept"
    );
    let evidence = &d["last_evidence"]["evidence"];
    assert_eq!(evidence["status"], 422);
    assert_eq!(evidence["headers"]["x-request-id"], "req-7");
    assert!(evidence["body"]
        .as_str()
        .unwrap()
        .contains("invalid address"));
    let history = &d["attempts"][0];
    assert_eq!(history["idempotency_key"], "crm:perm:send_email");
    assert_eq!(history["attempts"][0]["status"], 422);
    let kinds: Vec<&str> = perm["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["claim", "approve", "effects_failed"]);

    let busy = dead_letter_of(&app, "crm", "busy").await;
    assert_eq!(busy["dead_letter"]["class"], "retry_exhausted");
    assert_eq!(
        busy["dead_letter"]["attempts"][0]["attempts"]
            .as_array()
            .unwrap()
            .len(),
        3,
        "the whole budget"
    );
    assert_eq!(
        busy["dead_letter"]["last_evidence"]["evidence"]["status"],
        429
    );

    let lost = dead_letter_of(&app, "crm", "lost").await;
    assert_eq!(lost["dead_letter"]["class"], "unknown_outcome");
    assert!(lost["dead_letter"]["last_evidence"]["evidence"]["lost_after_send"].is_string());
    assert!(lost["dead_letter"]["next_action"]
        .as_str()
        .unwrap()
        .contains("compensated"));

    // A 500 from a target that ignores keys is unknown too, but it was
    // answered: the record says so and names the two ways out.
    let failing = dead_letter_of(&app, "crm", "failing").await;
    let d = &failing["dead_letter"];
    assert_eq!(d["class"], "unknown_outcome");
    assert_eq!(d["last_evidence"]["evidence"]["status"], 500);
    let error = d["error"].as_str().unwrap();
    assert!(error.contains("answered 500"), "{error}");
    assert!(!error.contains("lost"), "{error}");
    let next = d["next_action"].as_str().unwrap();
    for hint in [
        "probe_url",
        "status_classes",
        "\"500\" = \"transient\"",
        "compensated",
    ] {
        assert!(next.contains(hint), "{hint} in {next}");
    }
    app.stop().await;
}

async fn deliver(app: &TestApp, body: &Value) -> (u16, Value) {
    let req = app.client.post(format!("{}/hooks/shop", app.base));
    crate::harness::answer(req.json(body)).await
}

async fn quarantined_delivery_is_recorded_and_replaced_under_a_new_key(backend: Backend) {
    let mock = MockTarget::start().await;
    let app = app_for(backend, &mock).await;
    assert_eq!(
        deliver(&app, &json!({ "id": "evt_1", "amount": 10 }))
            .await
            .0,
        200
    );
    let (status, answer) = deliver(&app, &json!({ "id": "evt_1", "amount": 99 })).await;
    assert_eq!(
        (status, &answer),
        (200, &json!({ "received": true, "quarantined": true }))
    );
    let detail = dead_letter_of(&app, "shop", "evt_1").await;
    let d = &detail["dead_letter"];
    assert_eq!(
        (d["class"].as_str(), d["component"].as_str()),
        (Some("payload_conflict"), Some("ingress"))
    );
    assert_eq!(detail["raw_event"]["status"], "quarantined");
    assert_eq!(
        d["payload_ref"],
        format!("raw_event:{}", detail["raw_event"]["id"].as_str().unwrap())
    );
    assert_eq!(
        d["payload_hash"], detail["raw_event"]["payload_hash"],
        "the quarantined body's hash"
    );
    assert_ne!(d["payload_hash"], detail["run"]["payload_hash"]);
    assert_ne!(
        d["last_evidence"]["offered_payload_hash"],
        d["last_evidence"]["stored_payload_hash"]
    );
    assert_eq!(d["state"], "approved", "the accepted event goes on");
    let id = d["id"].as_str().unwrap().to_owned();

    let (status, refused) = app
        .post(
            &format!("/v1/dead-letters/{id}/replay"),
            Some(&app.operator),
            &json!({ "reason": "retry" }),
        )
        .await;
    assert_eq!(
        (status, refused["type"].as_str()),
        (409, Some("urn:oncegate:problem:nothing-to-replay")),
        "{refused}"
    );

    let (status, replaced) = app
        .post(
            &format!("/v1/dead-letters/{id}/replace"),
            Some(&app.operator),
            &json!({ "key": "evt_1_correction", "reason": "provider corrected the amount" }),
        )
        .await;
    assert_eq!(status, 200, "{replaced}");
    assert_eq!(replaced["run"]["key"], "evt_1_correction");
    assert_eq!(replaced["run"]["state"], "approved");
    assert_eq!(replaced["dead_letter"]["resolution"], "replaced");
    let dispatcher = app.dispatcher();
    eventually("both forwards", Duration::from_secs(10), || async {
        dispatcher.dispatch_once().await.unwrap();
        (mock.effects().len() == 2).then_some(())
    })
    .await;
    let forwarded = mock
        .effects()
        .into_iter()
        .find(|r| r.idempotency_key.as_deref() == Some("shop:evt_1_correction:forward"))
        .expect("the replacement forward");
    assert_eq!(
        serde_json::from_slice::<Value>(&forwarded.body).unwrap()["amount"],
        99,
        "the quarantined body"
    );
    assert_eq!(
        forwarded.header("x-oncegate-event-id"),
        Some("evt_1_correction")
    );
    assert_eq!(mock.effect_count_for_key("shop:evt_1:forward"), 1);
    app.stop().await;
}

async fn workflow_error_by_execution_ref(backend: Backend) {
    let mock = MockTarget::start().await;
    let app = app_for(backend, &mock).await;
    let fail = |r: &str, retryable: bool| {
        json!({ "execution_ref": r, "retryable": retryable,
        "error": { "message": "Send Email failed: quota exceeded", "node": "Send Email", "class": "NodeApiError" } })
    };
    let (_, claim) = app.claim(json!({ "namespace": "crm", "key": "wf1", "payload": { "a": 1 }, "execution_ref": "exec-77" })).await;
    let (status, body) = app
        .post(
            "/v1/runs/fail-by-execution",
            Some(&app.workflow),
            &fail("exec-77", false),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["runs"][0]["state"], "dead_lettered");
    let detail = dead_letter_of(&app, "crm", "wf1").await;
    let d = &detail["dead_letter"];
    assert_eq!(
        (d["class"].as_str(), d["component"].as_str()),
        (Some("workflow_error"), Some("workflow"))
    );
    assert_eq!(d["last_evidence"]["node"], "Send Email");
    assert_eq!(d["last_evidence"]["class"], "NodeApiError");
    assert_eq!(d["error"], "Send Email failed: quota exceeded");
    // The owner's lease lost the run: it must not act.
    let complete = json!({ "namespace": "crm", "key": "wf1", "lease": claim["lease"] });
    assert_eq!(
        app.post("/v1/runs/complete", Some(&app.workflow), &complete)
            .await
            .0,
        409
    );
    let (status, again) = app
        .post(
            "/v1/runs/fail-by-execution",
            Some(&app.workflow),
            &fail("exec-77", false),
        )
        .await;
    assert_eq!(
        (status, again["state"].as_str()),
        (409, Some("dead_lettered")),
        "{again}"
    );
    assert_eq!(
        app.post(
            "/v1/runs/fail-by-execution",
            Some(&app.workflow),
            &fail("exec-none", true)
        )
        .await
        .0,
        404
    );
    assert_eq!(
        app.post(
            "/v1/runs/fail-by-execution",
            Some(&app.operator),
            &fail("exec-77", true)
        )
        .await
        .0,
        403
    );
    let (status, _) = app
        .post(
            "/v1/runs/fail-by-execution",
            Some(&app.workflow),
            &json!({ "execution_ref": "exec-77", "retryable": true, "error": { "message": " " } }),
        )
        .await;
    assert_eq!(status, 400);

    app.claim(json!({ "namespace": "crm", "key": "wf2", "payload": { "a": 2 }, "execution_ref": "exec-78" })).await;
    let (status, body) = app
        .post(
            "/v1/runs/fail-by-execution",
            Some(&app.workflow),
            &fail("exec-78", true),
        )
        .await;
    assert_eq!(
        (status, body["runs"][0]["state"].as_str()),
        (200, Some("failed_retryable"))
    );
    let (_, reclaim) = app
        .claim(json!({ "namespace": "crm", "key": "wf2", "payload": { "a": 2 } }))
        .await;
    assert_eq!(
        reclaim["claimed"], true,
        "a retryable failure is reclaimed by the re-run"
    );
    app.stop().await;
}
