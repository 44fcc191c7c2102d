//! Four eyes for replays, on both backends against the real server: an
//! operation in `dead_letters.four_eyes` refuses a direct replay (plain or
//! corrected), its replay job is created stopped, its creator cannot start
//! it, and another operator's start sends the effect exactly once. A job
//! carries a fix (a declared transform) to the second operator's start,
//! which sends the corrected body; its creator is refused (403) whatever
//! the job's state, and a second starter of a started job conflicts (409).

use std::sync::Arc;
use std::time::Duration;

use oncegate::config::{Config, Scope};
use oncegate::deadletter::runner::ReplayRunner;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::deadletter_fix::{correction_entry, fix_config};
use crate::deadletters::{claim_commit, dead_letter_of, dispatch_until, dlq_config, get};
use crate::harness::{eventually, on_both_backends, token, Backend, TestApp};
use crate::target::{Behaviour, MockTarget};

on_both_backends!(
    a_four_eyes_replay_needs_a_second_operator,
    a_four_eyes_job_carries_its_fix_to_the_second_start,
    the_creator_is_refused_and_a_late_starter_conflicts,
);

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
    let created = create_waiting(&app, &create).await;
    let job = created["id"].as_str().unwrap().to_owned();
    let resume = format!("/v1/replay-jobs/{job}/resume");

    let shutdown = CancellationToken::new();
    let replayer = tokio::spawn(runner(&app).run(shutdown.clone()));
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

/// A four-eyes app (with the `fix-to@2` transform and two more operators,
/// `ops-2` and `ops-3`) whose target refused `crm/f1` and `crm/f2` with a
/// 422: both dead-lettered; the operators' tokens and the ids.
async fn two_refused(backend: Backend) -> (MockTarget, TestApp, [String; 2], Vec<String>) {
    let mock = MockTarget::start().await;
    mock.on_path_seq(
        "/mail",
        vec![
            Behaviour::no_commit(422),
            Behaviour::no_commit(422),
            Behaviour::status(200),
        ],
    );
    let (second, entry) = token("ops-2", &[Scope::Operator]);
    let (third, entry3) = token("ops-3", &[Scope::Operator]);
    let base = mock.base_url();
    let app = TestApp::spawn_with(backend, move |c: &mut Config| {
        fix_config(base)(c);
        c.dead_letters.four_eyes = vec!["send_email".into()];
        c.tokens.extend([entry, entry3]);
    })
    .await;
    let mut ids = Vec::new();
    for key in ["f1", "f2"] {
        claim_commit(&app, key, "/mail").await;
        dispatch_until(&app, key, "dead_lettered").await;
        let dl = dead_letter_of(&app, "crm", key).await;
        ids.push(dl["dead_letter"]["id"].as_str().unwrap().to_owned());
    }
    (mock, app, [second, third], ids)
}

/// Creates a four-eyes job as the first operator: it waits, stopped.
async fn create_waiting(app: &TestApp, create: &Value) -> Value {
    let (status, created) = app
        .post("/v1/replay-jobs", Some(&app.operator), create)
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        (created["state"].as_str(), created["four_eyes"].as_bool()),
        (Some("stopped"), Some(true))
    );
    created
}

/// A replay runner polling every 50 ms.
fn runner(app: &TestApp) -> Arc<ReplayRunner> {
    Arc::new(ReplayRunner::new(
        app.state.replay.clone(),
        &oncegate::deadletter::DeadLetterConfig {
            job_poll_ms: 50,
            ..Default::default()
        },
    ))
}

async fn a_four_eyes_job_carries_its_fix_to_the_second_start(backend: Backend) {
    let (mock, app, [second, _], ids) = two_refused(backend).await;
    let jobs = || async { get(&app, "/v1/replay-jobs", &app.operator).await.1 };
    let transform = json!({ "name": "fix-to", "version": 2 });
    // Bad fixes: refused, and no job is created.
    for (fix, status, field) in [
        (
            json!({ "body": { "to": "c@example.com" } }),
            400,
            "fix.body",
        ),
        (
            json!({ "transform": { "name": "nope", "version": 1 } }),
            422,
            "transform",
        ),
        (json!({}), 400, "fix"),
    ] {
        let create = json!({ "selection": { "ids": ids }, "reason": "fixed", "rate_per_sec": 10,
            "fix": fix });
        let (got, problem) = app
            .post("/v1/replay-jobs", Some(&app.operator), &create)
            .await;
        assert_eq!(
            (got, problem["field"].as_str()),
            (status, Some(field)),
            "{problem}"
        );
        assert_eq!(jobs().await, json!([]), "{problem}");
    }

    let create = json!({ "selection": { "ids": ids }, "reason": "address fixed by fix-to",
        "rate_per_sec": 10, "fix": { "transform": transform } });
    let created = create_waiting(&app, &create).await;
    assert_eq!(
        created["fix"],
        json!({ "transform": "fix-to@2", "body_hash": null, "effect_id": null })
    );
    assert_eq!(created["selection"], json!({ "ids": 2 }));
    let job = created["id"].as_str().unwrap().to_owned();
    let (_, page) = get(&app, &format!("/v1/replay-jobs/{job}"), &app.operator).await;
    assert_eq!(
        page["job"]["fix"], created["fix"],
        "the fix is stored with the job"
    );
    assert_eq!(mock.requests().len(), 2, "creating a job sends nothing");

    let shutdown = CancellationToken::new();
    let replayer = tokio::spawn(runner(&app).run(shutdown.clone()));
    let (status, started) = app
        .post(
            &format!("/v1/replay-jobs/{job}/resume"),
            Some(&second),
            &json!({}),
        )
        .await;
    assert_eq!(status, 200, "{started}");
    eventually("the job to complete", Duration::from_secs(20), || async {
        let (_, d) = get(&app, &format!("/v1/replay-jobs/{job}"), &app.operator).await;
        (d["job"]["state"] == "completed").then_some(d)
    })
    .await;
    for (key, id) in ["f1", "f2"].iter().zip(&ids) {
        dispatch_until(&app, key, "completed").await;
        let sent: Vec<Value> = mock
            .effects()
            .iter()
            .filter(|e| e.idempotency_key.as_deref() == Some(&format!("crm:{key}:send_email")))
            .map(|e| serde_json::from_slice(&e.body).unwrap())
            .collect();
        assert_eq!(
            sent,
            [json!({ "to": "b@example.com" })],
            "{key}: the fixed body, once"
        );
        let entry = correction_entry(&app, id).await;
        let detail = &entry["detail"];
        assert_eq!(
            (
                entry["actor"].as_str(),
                detail["started_by"].as_str(),
                detail["job_id"].as_str()
            ),
            (Some("ops"), Some("ops-2"), Some(job.as_str()))
        );
        assert_eq!(detail["correction"]["transform"], "fix-to@2");
        assert_ne!(
            detail["correction"]["hash_before"],
            detail["correction"]["hash_after"]
        );
    }
    shutdown.cancel();
    replayer.await.unwrap();
    app.stop().await;
}

async fn start_as(app: &TestApp, resume: &str, who: &str) -> (u16, Value) {
    app.post(resume, Some(who), &json!({})).await
}

async fn the_creator_is_refused_and_a_late_starter_conflicts(backend: Backend) {
    let (_mock, app, [second, third], ids) = two_refused(backend).await;
    let create = json!({ "selection": { "ids": ids }, "reason": "retry", "rate_per_sec": 1 });
    let created = create_waiting(&app, &create).await;
    let resume = format!("/v1/replay-jobs/{}/resume", created["id"].as_str().unwrap());
    // Three starts at once: the creator's is refused whatever the race
    // does, one other operator wins, the other is told it lost.
    let ((mine, p0), (a, pa), (b, pb)) = tokio::join!(
        start_as(&app, &resume, &app.operator),
        start_as(&app, &resume, &second),
        start_as(&app, &resume, &third)
    );
    assert_eq!(mine, 403, "{p0}");
    assert_eq!(p0["type"], "urn:oncegate:problem:four-eyes");
    let mut others = [(a, pa), (b, pb)];
    others.sort_by_key(|(s, _)| *s);
    let [(won, job), (lost, problem)] = others;
    assert_eq!((won, lost), (200, 409), "{job} {problem}");
    assert_eq!(problem["type"], "urn:oncegate:problem:job-already-started");
    assert_eq!(problem["state"], "running");
    let winner = job["started_by"].as_str().unwrap().to_owned();
    assert!(winner == "ops-2" || winner == "ops-3", "{job}");

    // Once running, the creator still gets 403 and any other start 409.
    let (status, problem) = start_as(&app, &resume, &app.operator).await;
    assert_eq!(status, 403, "{problem}");
    let (status, problem) = start_as(&app, &resume, &third).await;
    assert_eq!(status, 409, "{problem}");
    // Stopped again, it is resumed by another operator, never its creator.
    let stop = resume.replace("/resume", "/stop");
    assert_eq!(
        app.post(&stop, Some(&app.operator), &json!({})).await.0,
        200
    );
    assert_eq!(start_as(&app, &resume, &app.operator).await.0, 403);
    let (status, job) = start_as(&app, &resume, &third).await;
    assert_eq!(
        (status, job["state"].as_str()),
        (200, Some("running")),
        "{job}"
    );
    assert_eq!(
        job["started_by"],
        winner.as_str(),
        "the first starter stays recorded"
    );
    app.stop().await;
}
