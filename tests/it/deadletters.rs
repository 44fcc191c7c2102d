//! Dead letters on both backends: every cause leaves a record with its
//! evidence; resolve, replay (same key, once at the target), replacement
//! (new key, linked both ways), the gate, fail-by-execution, and the
//! re-run protocol at the API.

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
    let resp = app
        .client
        .get(format!("{}{path}", app.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
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
    resolve_ends_the_run_failed_terminal,
    replay_resends_once_under_the_same_key,
    gated_replay_needs_a_new_approval,
    replacement_takes_a_new_key_linked_both_ways,
    list_filters_and_pages,
    rerun_protocol_at_the_api,
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
    let app = app_for(backend, &mock).await;
    for (key, path, state) in [
        ("perm", "/bad", "dead_lettered"),
        ("busy", "/busy", "dead_lettered"),
        ("lost", "/lost", "dead_lettered"),
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
    app.stop().await;
}

async fn deliver(app: &TestApp, body: &Value) -> (u16, Value) {
    let resp = app
        .client
        .post(format!("{}/hooks/shop", app.base))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
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

async fn resolve_ends_the_run_failed_terminal(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/bad", Behaviour::no_commit(400));
    let app = app_for(backend, &mock).await;
    claim_commit(&app, "r1", "/bad").await;
    dispatch_until(&app, "r1", "dead_lettered").await;
    let id = dead_letter_of(&app, "crm", "r1").await["dead_letter"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/dead-letters/{id}/resolve");
    let (status, bad) = app
        .post(
            &path,
            Some(&app.operator),
            &json!({ "resolution": "reject", "note": "" }),
        )
        .await;
    assert_eq!((status, bad["field"].as_str()), (400, Some("note")));
    assert_eq!(
        app.post(
            &path,
            Some(&app.operator),
            &json!({ "resolution": "ignore", "note": "x" })
        )
        .await
        .0,
        400
    );
    assert_eq!(
        app.post(
            &path,
            Some(&app.workflow),
            &json!({ "resolution": "reject", "note": "x" })
        )
        .await
        .0,
        403
    );
    let (status, done) = app
        .post(
            &path,
            Some(&app.operator),
            &json!({ "resolution": "compensated", "note": "refunded by hand, ticket 42" }),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["run"]["state"], "failed_terminal");
    assert_eq!(done["dead_letter"]["resolution"], "compensated");
    assert_eq!(done["dead_letter"]["resolved_by"], "ops");
    assert!(done["dead_letter"]["retention_deadline"].is_string());
    let (status, again) = app
        .post(
            &path,
            Some(&app.operator),
            &json!({ "resolution": "reject", "note": "x" }),
        )
        .await;
    assert_eq!(
        (status, again["type"].as_str()),
        (409, Some("urn:oncegate:problem:already-resolved"))
    );
    let (status, _) = app
        .post(
            &format!("/v1/dead-letters/{id}/replay"),
            Some(&app.operator),
            &json!({ "reason": "x" }),
        )
        .await;
    assert_eq!(status, 409);
    let (_, claim) = app
        .claim(json!({ "namespace": "crm", "key": "r1", "payload": { "k": "r1" } }))
        .await;
    assert_eq!(
        (claim["claimed"].as_bool(), claim["state"].as_str()),
        (Some(false), Some("failed_terminal"))
    );
    let (_, detail) = get(&app, &format!("/v1/dead-letters/{id}"), &app.operator).await;
    let last = detail["timeline"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (last["kind"].as_str(), last["actor"].as_str()),
        (Some("resolve"), Some("ops"))
    );
    assert_eq!(last["detail"]["note"], "refunded by hand, ticket 42");
    app.stop().await;
}

async fn replay_resends_once_under_the_same_key(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path_seq(
        "/flaky",
        vec![Behaviour::no_commit(422), Behaviour::status(200)],
    );
    let app = app_for(backend, &mock).await;
    claim_commit(&app, "p1", "/flaky").await;
    dispatch_until(&app, "p1", "dead_lettered").await;
    let id = dead_letter_of(&app, "crm", "p1").await["dead_letter"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, replayed) = app
        .post(
            &format!("/v1/dead-letters/{id}/replay"),
            Some(&app.operator),
            &json!({ "reason": "address fixed upstream" }),
        )
        .await;
    assert_eq!(status, 200, "{replayed}");
    assert_eq!(
        (
            replayed["run"]["state"].as_str(),
            replayed["effects"].as_u64()
        ),
        (Some("approved"), Some(1))
    );
    assert_eq!(replayed["dead_letter"]["resolution"], "replayed");
    let (_, in_flight) = app
        .claim(json!({ "namespace": "crm", "key": "p1", "payload": { "k": "p1" } }))
        .await;
    assert_eq!(
        (in_flight["claimed"].as_bool(), in_flight["state"].as_str()),
        (Some(false), Some("approved"))
    );
    dispatch_until(&app, "p1", "completed").await;
    let sent: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.path == "/flaky")
        .collect();
    assert_eq!(sent.len(), 2, "the failed attempt and the replay");
    assert!(
        sent.iter()
            .all(|r| r.idempotency_key.as_deref() == Some("crm:p1:send_email")),
        "the same key"
    );
    assert_eq!(mock.effect_count_for_key("crm:p1:send_email"), 1);
    let (_, detail) = get(&app, &format!("/v1/dead-letters/{id}"), &app.operator).await;
    let replay = detail["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["kind"] == "replay")
        .unwrap()
        .clone();
    assert_eq!(
        (
            replay["actor"].as_str(),
            replay["detail"]["reason"].as_str()
        ),
        (Some("ops"), Some("address fixed upstream"))
    );
    assert_eq!(detail["dead_letter"]["replay_count"], 1);

    // A completed key is never replayed, even through a record left open.
    let (status, _) = app
        .post(
            &format!("/v1/dead-letters/{id}/replay"),
            Some(&app.operator),
            &json!({ "reason": "again" }),
        )
        .await;
    assert_eq!(status, 409);
    app.db
        .exec(&format!(
            "UPDATE dead_letters SET resolved_at = NULL, resolution = NULL WHERE id = '{id}'"
        ))
        .await;
    let (status, refused) = app
        .post(
            &format!("/v1/dead-letters/{id}/replay"),
            Some(&app.operator),
            &json!({ "reason": "again" }),
        )
        .await;
    assert_eq!(
        (status, refused["state"].as_str()),
        (409, Some("completed")),
        "{refused}"
    );
    assert_eq!(
        refused["type"],
        "urn:oncegate:problem:run-not-dead-lettered"
    );
    assert_eq!(
        app.dispatcher().dispatch_once().await.unwrap().leased,
        0,
        "nothing re-queued"
    );
    assert_eq!(mock.requests().len(), 2);
    app.stop().await;
}

async fn gated_replay_needs_a_new_approval(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/refund", Behaviour::no_commit(400));
    let app = app_for(backend, &mock).await;
    // A gated effect enters the outbox only through a gate: put one there
    // directly, as an approval would.
    crate::harness::queue_effect(&app.store, "g1", "mock", mock.url("/refund")).await;
    app.db
        .exec("UPDATE effects SET operation = 'refund' WHERE run_key = 'g1'")
        .await;
    dispatch_until(&app, "g1", "dead_lettered").await;
    let id = dead_letter_of(&app, "crm", "g1").await["dead_letter"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, refused) = app
        .post(
            &format!("/v1/dead-letters/{id}/replay"),
            Some(&app.operator),
            &json!({ "reason": "try again" }),
        )
        .await;
    assert_eq!(
        (status, refused["type"].as_str()),
        (409, Some("urn:oncegate:problem:replay-requires-approval")),
        "{refused}"
    );
    assert!(refused["detail"].as_str().unwrap().contains("refund"));
    let detail = dead_letter_of(&app, "crm", "g1").await;
    assert_eq!(
        (
            detail["dead_letter"]["state"].as_str(),
            detail["dead_letter"]["resolved"].as_bool()
        ),
        (Some("dead_lettered"), Some(false))
    );
    assert_eq!(detail["effects"][0]["state"], "failed", "nothing re-queued");
    app.stop().await;
}

async fn replacement_takes_a_new_key_linked_both_ways(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/send", Behaviour::no_commit(422));
    let app = app_for(backend, &mock).await;
    claim_commit(&app, "order:1:v1", "/send").await;
    claim_commit(&app, "order:2:v1", "/send").await;
    dispatch_until(&app, "order:1:v1", "dead_lettered").await;
    let id = dead_letter_of(&app, "crm", "order:1:v1").await["dead_letter"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/dead-letters/{id}/replace");
    let (status, taken) = app
        .post(
            &path,
            Some(&app.operator),
            &json!({ "key": "order:2:v1", "reason": "x" }),
        )
        .await;
    assert_eq!(
        (status, taken["type"].as_str()),
        (409, Some("urn:oncegate:problem:key-taken"))
    );
    assert_eq!(
        app.post(
            &path,
            Some(&app.operator),
            &json!({ "key": "bad key", "reason": "x" })
        )
        .await
        .0,
        400
    );
    mock.on_path("/send", Behaviour::status(200));
    let (status, done) = app
        .post(
            &path,
            Some(&app.operator),
            &json!({ "key": "order:1:v2", "reason": "customer changed the address" }),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        (done["run"]["key"].as_str(), done["run"]["state"].as_str()),
        (Some("order:1:v2"), Some("approved"))
    );
    assert_eq!(
        done["dead_letter"]["replaced_by"],
        json!({ "namespace": "crm", "key": "order:1:v2" })
    );
    assert_eq!(
        app.get_run("crm", "order:1:v1").await.1["state"],
        "failed_terminal"
    );
    for key in ["order:1:v1", "order:1:v2"] {
        let (_, links) = get(
            &app,
            &format!("/v1/runs/links?namespace=crm&key={key}"),
            &app.operator,
        )
        .await;
        assert_eq!(links[0]["replaced_by_key"], "order:1:v2", "{key}: {links}");
        assert_eq!(links[0]["key"], "order:1:v1");
    }
    dispatch_until(&app, "order:1:v2", "completed").await;
    assert_eq!(
        mock.effect_count_for_key("crm:order:1:v2:send_email"),
        1,
        "the new key's own effect"
    );
    assert_eq!(mock.effect_count_for_key("crm:order:1:v1:send_email"), 0);
    assert_eq!(
        app.post(
            &path,
            Some(&app.operator),
            &json!({ "key": "order:1:v3", "reason": "x" })
        )
        .await
        .0,
        409
    );
    app.stop().await;
}

async fn list_filters_and_pages(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/bad", Behaviour::no_commit(400));
    let app = app_for(backend, &mock).await;
    for i in 0..3 {
        claim_commit(&app, &format!("l{i}"), "/bad").await;
    }
    dispatch_until(&app, "l2", "dead_lettered").await;
    for i in 0..2 {
        app.claim(json!({ "namespace": "other", "key": format!("w{i}"), "payload": {}, "execution_ref": format!("x{i}") })).await;
        let fail = json!({ "execution_ref": format!("x{i}"), "retryable": false, "error": { "message": "boom" } });
        assert_eq!(
            app.post("/v1/runs/fail-by-execution", Some(&app.workflow), &fail)
                .await
                .0,
            200
        );
    }
    let count = |q: &'static str| {
        let app = &app;
        async move {
            let (status, page) = get(app, &format!("/v1/dead-letters{q}"), &app.operator).await;
            assert_eq!(status, 200, "{q}: {page}");
            page["items"].as_array().unwrap().len()
        }
    };
    assert_eq!(count("").await, 5);
    assert_eq!(count("?class=permanent").await, 3);
    assert_eq!(count("?class=workflow_error&namespace=other").await, 2);
    assert_eq!(count("?state=dead_lettered").await, 5);
    assert_eq!(count("?resolved=true").await, 0);
    assert_eq!(count("?older_than=1h").await, 0);
    assert_eq!(count("?newer_than=1h").await, 5);
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let q = cursor
            .as_ref()
            .map_or("?limit=2".into(), |c| format!("?limit=2&cursor={c}"));
        let (_, page) = get(&app, &format!("/v1/dead-letters{q}"), &app.operator).await;
        seen.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["id"].as_str().unwrap().to_owned()),
        );
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let unique: std::collections::HashSet<_> = seen.iter().collect();
    assert_eq!((seen.len(), unique.len()), (5, 5), "every record once");
    for bad in [
        "?class=nope",
        "?limit=0",
        "?cursor=zz",
        "?older_than=soon",
        "?state=done",
    ] {
        assert_eq!(
            get(&app, &format!("/v1/dead-letters{bad}"), &app.operator)
                .await
                .0,
            400,
            "{bad}"
        );
    }
    assert_eq!(get(&app, "/v1/dead-letters", &app.workflow).await.0, 403);
    let (status, assigned) = app
        .post(
            &format!("/v1/dead-letters/{}/assign", seen[0]),
            Some(&app.operator),
            &json!({ "owner": "alice" }),
        )
        .await;
    assert_eq!((status, assigned["owner"].as_str()), (200, Some("alice")));
    app.stop().await;
}

/// DESIGN.md §2 and the re-run protocol: only failed_retryable or an
/// expired lease is reclaimed; every other state answers and never starts
/// again; a dead letter moves only by an operator's command.
async fn rerun_protocol_at_the_api(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/bad", Behaviour::no_commit(400));
    let app = app_for(backend, &mock).await;
    let claim = |key: &str| json!({ "namespace": "crm", "key": key, "payload": { "k": key } });
    // completed
    let (_, c) = app.claim(claim("done")).await;
    app.post(
        "/v1/runs/complete",
        Some(&app.workflow),
        &json!({ "namespace": "crm", "key": "done", "lease": c["lease"], "result": { "id": 1 } }),
    )
    .await;
    // failed_terminal
    let (_, c) = app.claim(claim("final")).await;
    app.post("/v1/runs/fail", Some(&app.workflow), &json!({ "namespace": "crm", "key": "final", "lease": c["lease"], "retryable": false, "error": "bad input" })).await;
    // awaiting_human: no API moves a run there on this branch yet.
    app.claim(claim("waiting")).await;
    app.db.exec("UPDATE runs SET state = 'awaiting_human', lease_owner = NULL, lease_expires_at = NULL WHERE run_key = 'waiting'").await;
    // dead_lettered
    claim_commit(&app, "dead", "/bad").await;
    dispatch_until(&app, "dead", "dead_lettered").await;
    // approved (its effect waits: no dispatcher runs from here on)
    claim_commit(&app, "approved", "/never-sent").await;
    for (key, state, duplicate) in [
        ("done", "completed", true),
        ("final", "failed_terminal", false),
        ("approved", "approved", false),
        ("waiting", "awaiting_human", false),
        ("dead", "dead_lettered", false),
    ] {
        let before = app.get_run("crm", key).await.1;
        let (status, answer) = app.claim(claim(key)).await;
        assert_eq!(status, 200);
        assert_eq!(
            (answer["claimed"].as_bool(), answer["state"].as_str()),
            (Some(false), Some(state)),
            "{key}: {answer}"
        );
        assert_eq!(answer["duplicate"].as_bool(), Some(duplicate), "{key}");
        let after = app.get_run("crm", key).await.1;
        assert_eq!(
            before["version"], after["version"],
            "{key} never starts again"
        );
    }
    // failed_retryable and an expired lease are reclaimed, same key.
    let (_, c) = app.claim(claim("retry")).await;
    app.post("/v1/runs/fail", Some(&app.workflow), &json!({ "namespace": "crm", "key": "retry", "lease": c["lease"], "retryable": true, "error": "timeout" })).await;
    assert_eq!(app.claim(claim("retry")).await.1["claimed"], true);
    app.claim(json!({ "namespace": "crm", "key": "expiring", "payload": { "k": "expiring" }, "lease_ms": 100 })).await;
    eventually(
        "the lease to expire and be reclaimed",
        Duration::from_secs(10),
        || async { (app.claim(claim("expiring")).await.1["claimed"] == true).then_some(()) },
    )
    .await;
    // A replayed workflow error goes back to the workflow's re-run.
    app.claim(json!({ "namespace": "crm", "key": "wf", "payload": { "k": "wf" }, "execution_ref": "e-wf" })).await;
    app.post("/v1/runs/fail-by-execution", Some(&app.workflow), &json!({ "execution_ref": "e-wf", "retryable": false, "error": { "message": "node crashed" } })).await;
    assert_eq!(
        app.claim(claim("wf")).await.1["claimed"],
        false,
        "dead letters move only by an operator"
    );
    let id = dead_letter_of(&app, "crm", "wf").await["dead_letter"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, replayed) = app
        .post(
            &format!("/v1/dead-letters/{id}/replay"),
            Some(&app.operator),
            &json!({ "reason": "workflow fixed" }),
        )
        .await;
    assert_eq!(
        (status, replayed["run"]["state"].as_str()),
        (200, Some("failed_retryable")),
        "{replayed}"
    );
    let (_, rerun) = app.claim(claim("wf")).await;
    assert_eq!(
        (rerun["claimed"].as_bool(), rerun["reclaimed"].as_bool()),
        (Some(true), Some(true))
    );
    app.stop().await;
}
