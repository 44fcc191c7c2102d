//! Four eyes for replays, on both backends against the real server: an
//! operation in `dead_letters.four_eyes` refuses a direct replay (plain or
//! corrected), its replay job is created stopped, its creator cannot start
//! it, and another operator's start sends the effect exactly once.

use std::sync::Arc;
use std::time::Duration;

use oncegate::config::{Config, Scope};
use oncegate::deadletter::runner::ReplayRunner;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::deadletters::{claim_commit, dead_letter_of, dispatch_until, dlq_config, get};
use crate::harness::{eventually, on_both_backends, token, Backend, TestApp};
use crate::target::{Behaviour, MockTarget};

on_both_backends!(a_four_eyes_replay_needs_a_second_operator);

async fn a_four_eyes_replay_needs_a_second_operator(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path_seq(
        "/mail",
        vec![Behaviour::no_commit(422), Behaviour::status(200)],
    );
    let (second, entry) = token("ops-2", &[Scope::Operator]);
    let base = mock.base_url();
    let app = TestApp::spawn_with(backend, move |c: &mut Config| {
        dlq_config(base)(c);
        c.dead_letters.four_eyes = vec!["send_email".into()];
        c.tokens.push(entry);
    })
    .await;
    claim_commit(&app, "f1", "/mail").await;
    dispatch_until(&app, "f1", "dead_lettered").await;
    let before = dead_letter_of(&app, "crm", "f1").await;
    let id = before["dead_letter"]["id"].as_str().unwrap().to_owned();
    let sent = mock.requests().len();

    for body in [
        json!({ "reason": "fixed" }),
        json!({ "reason": "fixed", "body": { "to": "b@example.com" } }),
    ] {
        let (status, problem) = app
            .post(
                &format!("/v1/dead-letters/{id}/replay"),
                Some(&app.operator),
                &body,
            )
            .await;
        assert_eq!(status, 403, "{problem}");
        assert_eq!(problem["type"], "urn:oncegate:problem:four-eyes");
        assert!(problem["detail"]
            .as_str()
            .unwrap()
            .contains("two operators"));
    }
    assert_eq!(
        dead_letter_of(&app, "crm", "f1").await["timeline"],
        before["timeline"]
    );
    assert_eq!(app.get_run("crm", "f1").await.1["state"], "dead_lettered");

    let (status, dry) = app
        .post(
            "/v1/replay-jobs/dry-run",
            Some(&app.operator),
            &json!({ "selection": { "ids": [id] } }),
        )
        .await;
    assert_eq!(status, 200, "{dry}");
    assert_eq!(dry["summary"]["four_eyes"], json!(["send_email"]));
    let create =
        json!({ "selection": { "ids": [id] }, "reason": "address fixed", "rate_per_sec": 10 });
    let (status, created) = app
        .post("/v1/replay-jobs", Some(&app.operator), &create)
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        (created["state"].as_str(), created["four_eyes"].as_bool()),
        (Some("stopped"), Some(true))
    );
    let job = created["id"].as_str().unwrap().to_owned();
    let resume = format!("/v1/replay-jobs/{job}/resume");

    let shutdown = CancellationToken::new();
    let runner = Arc::new(ReplayRunner::new(
        app.state.replay.clone(),
        &oncegate::deadletter::DeadLetterConfig {
            job_poll_ms: 50,
            ..Default::default()
        },
    ));
    let replayer = tokio::spawn(runner.run(shutdown.clone()));
    let (status, problem) = app.post(&resume, Some(&app.operator), &json!({})).await;
    assert_eq!(status, 403, "{problem}");
    assert_eq!(problem["type"], "urn:oncegate:problem:four-eyes");
    let (_, detail) = get(&app, &format!("/v1/replay-jobs/{job}"), &app.operator).await;
    assert_eq!(
        detail["job"]["state"], "stopped",
        "the creator's start changed nothing"
    );
    assert_eq!(detail["job"]["started_by"], serde_json::Value::Null);

    let (status, started) = app.post(&resume, Some(&second), &json!({})).await;
    assert_eq!(status, 200, "{started}");
    assert_eq!(
        (started["state"].as_str(), started["started_by"].as_str()),
        (Some("running"), Some("ops-2"))
    );
    eventually(
        "the job to replay its item",
        Duration::from_secs(20),
        || async {
            let (_, d) = get(&app, &format!("/v1/replay-jobs/{job}"), &app.operator).await;
            (d["job"]["progress"]["replayed"] == 1).then_some(())
        },
    )
    .await;
    dispatch_until(&app, "f1", "completed").await;
    assert_eq!(mock.requests().len(), sent + 1);
    assert_eq!(
        mock.effect_count_for_key("crm:f1:send_email"),
        1,
        "exactly once"
    );
    shutdown.cancel();
    replayer.await.unwrap();
    app.stop().await;
}
