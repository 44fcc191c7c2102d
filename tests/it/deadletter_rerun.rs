//! The re-run protocol (seeds/000, "Forced re-runs without breaking
//! idempotency") at the API, on both backends.

use std::time::Duration;

use serde_json::json;

use crate::deadletters::{app_for, claim_commit, dead_letter_of, dispatch_until};
use crate::harness::{eventually, on_both_backends, Backend};
use crate::target::{Behaviour, MockTarget};

on_both_backends!(rerun_protocol_at_the_api);

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
    // awaiting_human: set directly, the test only needs a run in that state.
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
