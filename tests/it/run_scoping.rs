//! Issue 25, through the real server: a workflow token reaches only the
//! runs it claimed (M9: n8n execution ids are sequential, so another
//! workflow's token could fail its runs or cancel its effects by guessing),
//! and a control character in a path id is bad input, never a database
//! error (L8: PostgreSQL cannot store a NUL in text).

use oncegate::tokens::Scope;
use serde_json::json;

use crate::deadletters::{claim_commit, dlq_config};
use crate::harness::{on_both_backends, token, Backend, TestApp};
use crate::target::MockTarget;

on_both_backends!(
    another_workflow_token_cannot_fail_or_cancel_a_run_it_did_not_claim,
    a_control_character_in_a_path_id_is_a_400,
);

async fn another_workflow_token_cannot_fail_or_cancel_a_run_it_did_not_claim(backend: Backend) {
    let mock = MockTarget::start().await;
    let (intruder, entry) = token("other-workflow", &[Scope::Workflow]);
    let base = mock.base_url();
    let app = TestApp::spawn_with(backend, move |c| {
        dlq_config(base)(c);
        c.tokens.push(entry);
    })
    .await;
    let (status, _) = app
        .claim(
            json!({ "namespace": "crm", "key": "p1", "payload": {}, "execution_ref": "exec-41" }),
        )
        .await;
    assert_eq!(status, 200);
    let fail =
        json!({ "execution_ref": "exec-41", "retryable": false, "error": { "message": "boom" } });

    let (status, body) = app
        .post("/v1/runs/fail-by-execution", Some(&intruder), &fail)
        .await;
    assert_eq!(status, 404, "another token's run is not found: {body}");
    assert_eq!(
        app.get_run("crm", "p1").await.1["state"],
        "processing",
        "nothing moved"
    );
    let (status, body) = app
        .post("/v1/runs/fail-by-execution", Some(&app.workflow), &fail)
        .await;
    assert_eq!(status, 200, "the claimer still reports its own: {body}");

    claim_commit(&app, "c1", "/send").await;
    let id = app
        .db
        .text("SELECT id FROM effects WHERE run_key = 'c1'")
        .await;
    let cancel = format!("/v1/effects/{id}/cancel");
    let (status, body) = app.post(&cancel, Some(&intruder), &json!({})).await;
    assert_eq!(status, 404, "another token's effect is not found: {body}");
    assert_eq!(
        app.db
            .text("SELECT state FROM effects WHERE run_key = 'c1'")
            .await,
        "pending"
    );
    let (status, body) = app.post(&cancel, Some(&app.workflow), &json!({})).await;
    assert_eq!(status, 200, "the claimer cancels its own: {body}");
    app.stop().await;
}

async fn a_control_character_in_a_path_id_is_a_400(backend: Backend) {
    let mock = MockTarget::start().await;
    let app = TestApp::spawn_with(backend, dlq_config(mock.base_url())).await;
    for (method, path, token) in [
        ("GET", "/v1/dead-letters/a%00b", &app.operator),
        ("POST", "/v1/dead-letters/a%00b/resolve", &app.operator),
        ("POST", "/v1/dead-letters/a%00b/replay", &app.operator),
        ("POST", "/v1/dead-letters/a%00b/assign", &app.operator),
        ("GET", "/v1/replay-jobs/a%00b", &app.operator),
        ("POST", "/v1/effects/a%00b/cancel", &app.workflow),
        ("POST", "/v1/effects/a%01b/cancel", &app.workflow),
    ] {
        let url = format!("{}{path}", app.base);
        let req = match method {
            "GET" => app.client.get(&url),
            _ => app.client.post(&url).json(&json!({})),
        };
        let answer = req.bearer_auth(token).send().await.unwrap();
        let status = answer.status().as_u16();
        let body: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(status, 400, "{method} {path}: {body}");
        assert!(
            body["detail"]
                .as_str()
                .is_some_and(|d| d.contains("control characters")),
            "{method} {path}: {body}"
        );
    }
    app.stop().await;
}
