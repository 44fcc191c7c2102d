//! The HTTP API against a real app on 127.0.0.1:0, on both backends.

use std::collections::HashMap;

use futures_util::future::join_all;
use serde_json::{json, Value};

use crate::harness::{on_both_backends, Backend, TestApp};

on_both_backends!(
    hundred_concurrent_claims_of_one_key_have_one_winner,
    hundred_keys_sharing_a_business_key_have_one_winner,
    claim_complete_duplicate_round_trip,
    keys_with_url_characters_round_trip,
    stale_lease_gets_409_with_current_state,
    payload_conflict_is_422_problem_and_changes_nothing,
    bad_input_is_refused_and_writes_nothing,
);

fn claim_body(key: &str) -> Value {
    json!({ "namespace": "stripe", "key": key, "payload": { "id": key, "amount": 100 } })
}

async fn hundred_concurrent_claims_of_one_key_have_one_winner(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let answers = join_all((0..100).map(|_| app.claim(claim_body("evt_race")))).await;
    let mut winners = 0;
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body}");
        if body["claimed"] == json!(true) {
            winners += 1;
            assert!(body["lease"].as_str().unwrap().starts_with("l1_"));
        } else {
            assert_eq!(
                body["claimed"],
                json!(false),
                "claimed is always explicit: {body}"
            );
            assert_eq!(body["state"], "processing");
            assert!(body["retry_after"].as_i64().unwrap() > 0);
        }
    }
    assert_eq!(winners, 1);
    assert_eq!(app.db.count("SELECT COUNT(*) FROM audit_events").await, 1);
    app.stop().await;
}

async fn hundred_keys_sharing_a_business_key_have_one_winner(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let answers = join_all((0..100).map(|i| {
        app.claim(json!({
            "namespace": "stripe",
            "key": format!("evt_{i}"),
            "payload": { "i": i },
            "business_key": "refund:order-42:v1",
        }))
    }))
    .await;
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    let mut holder = None;
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body}");
        if body["claimed"] == json!(true) {
            holder = Some(body["key"].as_str().unwrap().to_owned());
            *outcomes.entry("claimed".into()).or_default() += 1;
        } else {
            assert!(body["duplicate_of"].is_object(), "{body}");
            *outcomes.entry("duplicate_of".into()).or_default() += 1;
        }
    }
    assert_eq!(outcomes.get("claimed"), Some(&1));
    assert_eq!(outcomes.get("duplicate_of"), Some(&99));
    let holder = holder.unwrap();
    for (_, body) in answers.iter().filter(|(_, b)| b["claimed"] == json!(false)) {
        assert_eq!(body["duplicate_of"]["key"], json!(holder));
    }
    assert_eq!(app.db.count("SELECT COUNT(*) FROM runs").await, 1);
    app.stop().await;
}

async fn claim_complete_duplicate_round_trip(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (status, claim) = app.claim(claim_body("evt_1")).await;
    assert_eq!(status, 200);
    assert_eq!(claim["claimed"], true);
    assert_eq!(claim["version"], 1);
    let lease = claim["lease"].as_str().unwrap();

    let (status, renewed) = app
        .post(
            "/v1/runs/renew",
            Some(&app.workflow),
            &json!({ "namespace": "stripe", "key": "evt_1", "lease": lease, "lease_ms": 60_000 }),
        )
        .await;
    assert_eq!(status, 200, "{renewed}");
    assert_eq!(renewed["version"], 2);
    let lease = renewed["lease"].as_str().unwrap();

    let body = json!({ "namespace": "stripe", "key": "evt_1", "lease": lease, "result": { "email_id": "m-1" } });
    let (status, done) = app
        .post("/v1/runs/complete", Some(&app.workflow), &body)
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["state"], "completed");
    assert_eq!(done["lease"], Value::Null);

    let (status, dup) = app.claim(claim_body("evt_1")).await;
    assert_eq!(status, 200);
    assert_eq!(dup["claimed"], false);
    assert_eq!(dup["duplicate"], true);
    assert_eq!(dup["result"], json!({ "email_id": "m-1" }));

    let (status, run) = app.get_run("stripe", "evt_1").await;
    assert_eq!(status, 200);
    assert_eq!(run["state"], "completed");
    assert_eq!(run["claimed_by"], "n8n");
    assert!(run.get("lease").is_none(), "the lease is never shown");

    let text = app.scrape().await;
    assert!(
        text.contains(r#"oncegate_claims_total{namespace="stripe",outcome="duplicate"} 1"#),
        "{text}"
    );
    app.stop().await;
}

async fn keys_with_url_characters_round_trip(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for key in [
        "a/b/c",
        "q?x=1&y=2",
        "frag#ment",
        "100%25off",
        "k".repeat(255).as_str(),
    ] {
        let (status, body) = app.claim(claim_body(key)).await;
        assert_eq!(status, 200, "{key}: {body}");
        assert_eq!(body["key"], json!(key));
        let (status, run) = app.get_run("stripe", key).await;
        assert_eq!(status, 200, "{key}: {run}");
        assert_eq!(run["key"], json!(key));
    }
    let (status, _) = app.get_run("stripe", "missing").await;
    assert_eq!(status, 404);
    app.stop().await;
}

async fn stale_lease_gets_409_with_current_state(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (_, claim) = app.claim(claim_body("evt_1")).await;
    let lease = claim["lease"].as_str().unwrap().to_owned();
    let body = json!({ "namespace": "stripe", "key": "evt_1", "lease": lease, "retryable": true, "error": "smtp timeout" });
    let (status, failed) = app.post("/v1/runs/fail", Some(&app.workflow), &body).await;
    assert_eq!(status, 200, "{failed}");
    assert_eq!(failed["state"], "failed_retryable");

    let body = json!({ "namespace": "stripe", "key": "evt_1", "lease": lease });
    let (status, problem) = app
        .post("/v1/runs/complete", Some(&app.workflow), &body)
        .await;
    assert_eq!(status, 409, "{problem}");
    assert_eq!(problem["type"], "urn:oncegate:problem:lease-lost");
    assert_eq!(problem["state"], "failed_retryable");
    assert_eq!(problem["version"], 2);
    app.stop().await;
}

async fn payload_conflict_is_422_problem_and_changes_nothing(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.claim(claim_body("evt_1")).await;
    let (_, before) = app.get_run("stripe", "evt_1").await;
    let resp = app
        .client
        .post(format!("{}/v1/claims", app.base))
        .bearer_auth(&app.workflow)
        .json(&json!({ "namespace": "stripe", "key": "evt_1", "payload": { "amount": 999 } }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 422);
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    let problem: Value = resp.json().await.unwrap();
    assert_eq!(problem["type"], "urn:oncegate:problem:payload-conflict");
    let (_, after) = app.get_run("stripe", "evt_1").await;
    assert_eq!(before, after);
    app.stop().await;
}

/// One bad request: what is sent, and the status and field expected.
struct Bad {
    what: &'static str,
    token: Option<&'static str>,
    body: Value,
    status: u16,
    field: Option<&'static str>,
}

async fn bad_input_is_refused_and_writes_nothing(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| c.server.max_body_bytes = 4096).await;
    let key = |k: Value| json!({ "namespace": "stripe", "key": k, "payload": {} });
    let forged = "l1_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let cases = vec![
        Bad {
            what: "empty key",
            token: Some("wf"),
            body: key(json!("")),
            status: 400,
            field: Some("key"),
        },
        Bad {
            what: "256-byte key",
            token: Some("wf"),
            body: key(json!("k".repeat(256))),
            status: 400,
            field: Some("key"),
        },
        Bad {
            what: "non-ASCII key",
            token: Some("wf"),
            body: key(json!("café")),
            status: 400,
            field: Some("key"),
        },
        Bad {
            what: "key with space",
            token: Some("wf"),
            body: key(json!("a b")),
            status: 400,
            field: Some("key"),
        },
        Bad {
            what: "numeric key",
            token: Some("wf"),
            body: key(json!(42)),
            status: 400,
            field: None,
        },
        Bad {
            what: "missing key",
            token: Some("wf"),
            body: json!({ "namespace": "stripe", "payload": {} }),
            status: 400,
            field: None,
        },
        Bad {
            what: "an integer beyond 2^53 in the payload",
            token: Some("wf"),
            body: json!({ "namespace": "stripe", "key": "k", "payload": { "id": 9_007_199_254_740_993_u64 } }),
            status: 400,
            field: Some("payload"),
        },
        Bad {
            what: "missing payload",
            token: Some("wf"),
            body: json!({ "namespace": "stripe", "key": "k" }),
            status: 400,
            field: Some("payload"),
        },
        Bad {
            what: "bad hash",
            token: Some("wf"),
            body: json!({ "namespace": "stripe", "key": "k", "payload_hash": "md5:abc" }),
            status: 400,
            field: Some("payload_hash"),
        },
        Bad {
            what: "unknown field",
            token: Some("wf"),
            body: json!({ "namespace": "stripe", "key": "k", "payload": {}, "paylod": 1 }),
            status: 400,
            field: None,
        },
        Bad {
            what: "lease too long",
            token: Some("wf"),
            body: json!({ "namespace": "stripe", "key": "k", "payload": {}, "lease_ms": 999_999_999 }),
            status: 400,
            field: Some("lease_ms"),
        },
        Bad {
            what: "oversized body",
            token: Some("wf"),
            body: json!({ "namespace": "stripe", "key": "k", "payload": { "blob": "x".repeat(8192) } }),
            status: 413,
            field: None,
        },
        Bad {
            what: "no token",
            token: None,
            body: key(json!("k")),
            status: 401,
            field: None,
        },
        Bad {
            what: "unknown token",
            token: Some("og_nope"),
            body: key(json!("k")),
            status: 401,
            field: None,
        },
        Bad {
            what: "operator scope",
            token: Some("op"),
            body: key(json!("k")),
            status: 403,
            field: None,
        },
        Bad {
            what: "approver scope",
            token: Some("ap"),
            body: key(json!("k")),
            status: 403,
            field: None,
        },
    ];
    for case in cases {
        let token = match case.token {
            Some("wf") => Some(app.workflow.as_str()),
            Some("op") => Some(app.operator.as_str()),
            Some("ap") => Some(app.approver.as_str()),
            other => other,
        };
        let (status, problem) = app.post("/v1/claims", token, &case.body).await;
        assert_eq!(status, case.status, "{}: {problem}", case.what);
        assert_eq!(
            problem["status"], case.status,
            "{}: problem+json body",
            case.what
        );
        assert!(
            problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{}",
            case.what
        );
        if let Some(field) = case.field {
            assert_eq!(problem["field"], field, "{}: {problem}", case.what);
        }
    }
    assert_eq!(
        app.db.count("SELECT COUNT(*) FROM runs").await,
        0,
        "no bad claim wrote a row"
    );

    let (_, claim) = app.claim(claim_body("evt_ok")).await;
    let lease = claim["lease"].as_str().unwrap();
    let truncated = &lease[..lease.len() - 2];
    let owner_cases = [
        (
            "truncated lease",
            json!({ "namespace": "stripe", "key": "evt_ok", "lease": truncated }),
            400,
        ),
        (
            "forged lease",
            json!({ "namespace": "stripe", "key": "evt_ok", "lease": forged }),
            400,
        ),
        (
            "lease of a number",
            json!({ "namespace": "stripe", "key": "evt_ok", "lease": 7 }),
            400,
        ),
        (
            "missing lease",
            json!({ "namespace": "stripe", "key": "evt_ok" }),
            400,
        ),
    ];
    for (what, body, status) in owner_cases {
        let (got, problem) = app
            .post("/v1/runs/complete", Some(&app.workflow), &body)
            .await;
        assert_eq!(got, status, "{what}: {problem}");
    }
    let bad_fail = json!({ "namespace": "stripe", "key": "evt_ok", "lease": lease, "retryable": "yes", "error": "x" });
    let (got, _) = app
        .post("/v1/runs/fail", Some(&app.workflow), &bad_fail)
        .await;
    assert_eq!(got, 400, "wrong type");
    let (got, _) = app
        .post("/v1/runs/complete", Some(&app.operator), &json!({}))
        .await;
    assert_eq!(got, 403, "operators may not move runs");
    let (_, run) = app.get_run("stripe", "evt_ok").await;
    assert_eq!(run["state"], "processing");
    assert_eq!(run["version"], 1, "no refused call moved the run");

    let resp = app
        .client
        .post(format!("{}/v1/claims", app.base))
        .bearer_auth(&app.workflow)
        .body("{not json")
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    app.stop().await;
}

/// What a generated client relies on: every `in: path` parameter is in its
/// path's template, operation ids are unique, an optional field of a
/// request is not required, and every problem answer is problem+json. The
/// full validation (openapi-spec-validator) and the fuzzer run in
/// `scripts/check-api`.
#[test]
fn the_openapi_document_places_parameters_and_required_fields_right() {
    use utoipa::OpenApi;
    let doc = serde_json::to_value(oncegate::api::openapi::ApiDoc::openapi()).unwrap();
    let mut ids = std::collections::HashSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap();
            assert!(ids.insert(id.to_owned()), "operationId {id} twice");
            for p in op["parameters"].as_array().into_iter().flatten() {
                let name = p["name"].as_str().unwrap();
                if p["in"] == "path" {
                    assert!(
                        path.contains(&format!("{{{name}}}")),
                        "{method} {path}: {name} is in: path but not in the template"
                    );
                }
            }
            for (status, answer) in op["responses"].as_object().unwrap() {
                let json = &answer["content"]["application/json"]["schema"]["$ref"];
                assert!(
                    !json.as_str().is_some_and(|r| r.ends_with("/Problem")),
                    "{method} {path} {status}: a problem is application/problem+json"
                );
            }
        }
    }
    for (path, params) in [
        ("/v1/runs", ["namespace", "key"].as_slice()),
        ("/v1/runs/timeline", &["namespace", "key"]),
        ("/v1/dead-letters", &["class", "namespace", "limit"]),
    ] {
        let listed = doc["paths"][path]["get"]["parameters"].as_array().unwrap();
        for name in params {
            let p = listed.iter().find(|p| p["name"] == *name).unwrap();
            assert_eq!(p["in"], "query", "{path} {name}");
        }
    }
    let effect = &doc["components"]["schemas"]["EffectRequest"];
    let required: Vec<&str> = effect["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(required, ["operation", "effect_type", "target"], "{effect}");
    let token = &doc["components"]["schemas"]["CreateTokenBody"]["required"];
    assert_eq!(token, &serde_json::json!(["subject", "scopes"]), "{token}");
}

#[tokio::test]
async fn openapi_health_and_readiness_are_served() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let doc: Value = app
        .client
        .get(format!("{}/openapi.json", app.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for path in [
        "/v1/claims",
        "/v1/runs/renew",
        "/v1/runs/complete",
        "/v1/runs/fail",
        "/v1/runs",
        "/v1/runs/output",
        "/v1/runs/gate",
        "/v1/approvals",
        "/readyz",
        "/proxy/{name}/{path}",
        "/v1/proxy/resolve",
        "/v1/deliveries",
        "/v1/deliveries/refused",
        "/v1/deliveries/{id}",
        "/v1/deliveries/{id}/forward",
        "/v1/deliveries/{id}/redeliver",
        "/v1/admin/tokens",
        "/v1/admin/tokens/{id}/revoke",
    ] {
        assert!(
            doc["paths"][path].is_object(),
            "{path} missing from the OpenAPI document"
        );
    }
    let ready = app
        .client
        .get(format!("{}/readyz", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status().as_u16(), 200);
    let health = app
        .client
        .get(format!("{}/healthz", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
    app.stop().await;
}

#[tokio::test]
async fn operator_may_read_runs_but_not_claim() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    app.claim(claim_body("evt_1")).await;
    let resp = app
        .client
        .get(format!("{}/v1/runs", app.base))
        .query(&[("namespace", "stripe"), ("key", "evt_1")])
        .bearer_auth(&app.operator)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let resp = app
        .client
        .get(format!("{}/v1/runs", app.base))
        .query(&[("namespace", "stripe"), ("key", "evt_1")])
        .bearer_auth(&app.approver)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    app.stop().await;
}
