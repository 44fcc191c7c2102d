//! Bulk replay on both backends: an explicit selection, a dry run that
//! sends nothing, a rate-limited job with stop and resume, and a job that
//! survives its runner's crash; the target sees each key exactly once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use oncegate::deadletter::runner::ReplayRunner;
use oncegate::deadletter::DeadLetterConfig;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::deadletters::{app_for, get};
use crate::harness::{eventually, on_both_backends, queue_effect, Backend, TestApp};
use crate::target::{Behaviour, MockTarget};

on_both_backends!(
    bulk_replay_dry_run_rate_stop_and_resume,
    a_crashed_runners_job_resumes_without_duplicates,
    bulk_needs_an_explicit_selection,
);

/// `n` runs `crm/b<i>` dead-lettered by a permanent refusal at `/bulk`.
async fn dead_letter_many(app: &TestApp, mock: &MockTarget, n: usize) {
    mock.on_path("/bulk", Behaviour::no_commit(400));
    for i in 0..n {
        queue_effect(&app.store, &format!("b{i}"), "mock", mock.url("/bulk")).await;
    }
    let dispatcher = app.dispatcher();
    eventually(
        "every run dead-lettered",
        Duration::from_secs(60),
        || async {
            dispatcher.dispatch_once().await.unwrap();
            let dead = app
                .db
                .count("SELECT COUNT(*) FROM runs WHERE state = 'dead_lettered'")
                .await;
            (dead == n as i64).then_some(())
        },
    )
    .await;
    mock.on_path("/bulk", Behaviour::status(200));
}

fn runner(app: &TestApp, lease_ms: i64) -> Arc<ReplayRunner> {
    let ctx = app.state.replay.clone();
    let config = DeadLetterConfig {
        job_lease_ms: lease_ms,
        job_poll_ms: 50,
        ..DeadLetterConfig::default()
    };
    Arc::new(ReplayRunner::new(ctx, &config))
}

async fn job(app: &TestApp, id: &str) -> Value {
    let (status, detail) = get(
        app,
        &format!("/v1/replay-jobs/{id}?items_limit=0"),
        &app.operator,
    )
    .await;
    assert_eq!(status, 200, "{detail}");
    detail["job"].clone()
}

fn sent_keys(mock: &MockTarget) -> usize {
    mock.effects().iter().filter(|r| r.path == "/bulk").count()
}

fn assert_each_key_once(mock: &MockTarget, n: usize) {
    for i in 0..n {
        assert_eq!(
            mock.effect_count_for_key(&format!("crm:b{i}:send_email")),
            1,
            "b{i}"
        );
    }
    assert_eq!(sent_keys(mock), n);
}

async fn bulk_replay_dry_run_rate_stop_and_resume(backend: Backend) {
    const N: usize = 200;
    let mock = MockTarget::start().await;
    let app = app_for(backend, &mock).await;
    dead_letter_many(&app, &mock, N).await;
    let requests_before = mock.requests().len();

    let (status, dry) = app
        .post(
            "/v1/replay-jobs/dry-run",
            Some(&app.operator),
            &json!({ "selection": { "filter": { "class": "permanent" } } }),
        )
        .await;
    assert_eq!(status, 200, "{dry}");
    let summary = &dry["summary"];
    assert_eq!(
        (summary["total"].as_u64(), summary["replayable"].as_u64()),
        (Some(N as u64), Some(N as u64))
    );
    assert_eq!(summary["targets"], json!({ "mock": N }));
    assert_eq!(dry["ids"].as_array().unwrap().len(), N);
    assert_eq!(
        mock.requests().len(),
        requests_before,
        "the dry run sends nothing"
    );
    assert_eq!(
        app.db
            .count("SELECT COUNT(*) FROM runs WHERE state = 'dead_lettered'")
            .await,
        N as i64,
        "and moves nothing"
    );
    assert_eq!(
        app.db.count("SELECT COUNT(*) FROM replay_jobs").await,
        0,
        "and stores nothing"
    );

    let shutdown = CancellationToken::new();
    let dispatcher = tokio::spawn(Arc::new(app.dispatcher()).run(shutdown.clone()));
    let replayer = tokio::spawn(runner(&app, 30_000).run(shutdown.clone()));
    let started = Instant::now();
    let body =
        json!({ "selection": { "ids": dry["ids"] }, "reason": "target fixed", "rate_per_sec": 50 });
    let (status, created) = app
        .post("/v1/replay-jobs", Some(&app.operator), &body)
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();

    eventually("about half replayed", Duration::from_secs(30), || async {
        (job(&app, &id).await["progress"]["replayed"]
            .as_u64()
            .unwrap()
            >= (N / 2) as u64)
            .then_some(())
    })
    .await;
    let (status, stopped) = app
        .post(
            &format!("/v1/replay-jobs/{id}/stop"),
            Some(&app.operator),
            &json!({}),
        )
        .await;
    assert_eq!(
        (status, stopped["state"].as_str()),
        (200, Some("stopped")),
        "{stopped}"
    );
    let done_at_stop = stopped["progress"]["replayed"].as_u64().unwrap() as usize;
    assert!(done_at_stop < N, "stopped before the end: {done_at_stop}");
    eventually(
        "the replayed half to be sent",
        Duration::from_secs(30),
        || async { (sent_keys(&mock) >= done_at_stop).then_some(()) },
    )
    .await;
    let still = job(&app, &id).await;
    assert_eq!(
        still["progress"]["replayed"].as_u64().unwrap() as usize,
        done_at_stop,
        "nothing ran after the stop"
    );
    assert_eq!(
        still["progress"]["pending"].as_u64().unwrap() as usize,
        N - done_at_stop
    );
    assert_eq!(
        app.db
            .count("SELECT COUNT(*) FROM runs WHERE state = 'dead_lettered'")
            .await as usize,
        N - done_at_stop
    );
    assert_eq!(sent_keys(&mock), done_at_stop);

    let (status, resumed) = app
        .post(
            &format!("/v1/replay-jobs/{id}/resume"),
            Some(&app.operator),
            &json!({}),
        )
        .await;
    assert_eq!((status, resumed["state"].as_str()), (200, Some("running")));
    eventually("the job to complete", Duration::from_secs(60), || async {
        (job(&app, &id).await["state"] == "completed").then_some(())
    })
    .await;
    let elapsed = started.elapsed();
    eprintln!("bulk replay of {N} at 50/s: stopped after {done_at_stop}, completed in {elapsed:?} (including the pause)");
    assert!(
        elapsed >= Duration::from_secs(4),
        "200 items at 50/s took {elapsed:?}"
    );
    eventually("every effect sent", Duration::from_secs(30), || async {
        (sent_keys(&mock) >= N).then_some(())
    })
    .await;
    let finished = job(&app, &id).await;
    assert_eq!(
        (
            finished["progress"]["replayed"].as_u64(),
            finished["progress"]["refused"].as_u64()
        ),
        (Some(N as u64), Some(0))
    );
    assert_each_key_once(&mock, N);
    let (status, _) = app
        .post(
            &format!("/v1/replay-jobs/{id}/resume"),
            Some(&app.operator),
            &json!({}),
        )
        .await;
    assert_eq!(status, 409, "a completed job does not run again");
    shutdown.cancel();
    dispatcher.await.unwrap();
    replayer.await.unwrap();
    app.stop().await;
}

async fn a_crashed_runners_job_resumes_without_duplicates(backend: Backend) {
    const N: usize = 40;
    let mock = MockTarget::start().await;
    let app = app_for(backend, &mock).await;
    dead_letter_many(&app, &mock, N).await;
    let (_, dry) = app
        .post(
            "/v1/replay-jobs/dry-run",
            Some(&app.operator),
            &json!({ "selection": { "filter": { "namespace": "crm" } } }),
        )
        .await;
    let body =
        json!({ "selection": { "ids": dry["ids"] }, "reason": "outage over", "rate_per_sec": 20 });
    let (status, created) = app
        .post("/v1/replay-jobs", Some(&app.operator), &body)
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();

    let first = runner(&app, 1_000);
    let crashed = tokio::spawn(first.clone().run(CancellationToken::new()));
    eventually("a few items replayed", Duration::from_secs(30), || async {
        (job(&app, &id).await["progress"]["replayed"]
            .as_u64()
            .unwrap()
            >= 10)
            .then_some(())
    })
    .await;
    crashed.abort(); // a crash: no release, the lease stays until it expires
    let _ = crashed.await;
    let held = job(&app, &id).await;
    assert_eq!(
        held["runner"],
        first.owner(),
        "the dead runner still holds the lease"
    );
    assert!(held["progress"]["pending"].as_u64().unwrap() > 0);

    let shutdown = CancellationToken::new();
    let second = runner(&app, 1_000);
    let replayer = tokio::spawn(second.clone().run(shutdown.clone()));
    let dispatcher = tokio::spawn(Arc::new(app.dispatcher()).run(shutdown.clone()));
    eventually(
        "the next runner finishes the job",
        Duration::from_secs(60),
        || async { (job(&app, &id).await["state"] == "completed").then_some(()) },
    )
    .await;
    eventually("every effect sent", Duration::from_secs(30), || async {
        (sent_keys(&mock) >= N).then_some(())
    })
    .await;
    let (_, detail) = get(
        &app,
        &format!("/v1/replay-jobs/{id}?items_limit=1000"),
        &app.operator,
    )
    .await;
    let items = detail["items"].as_array().unwrap();
    assert_eq!(items.len(), N);
    assert!(
        items
            .iter()
            .all(|i| i["state"] == "replayed" && i["outcome"] == "approved"),
        "{detail}"
    );
    assert_each_key_once(&mock, N);
    assert_eq!(
        app.db
            .count("SELECT COUNT(*) FROM runs WHERE state = 'completed'")
            .await,
        N as i64
    );
    shutdown.cancel();
    replayer.await.unwrap();
    dispatcher.await.unwrap();
    app.stop().await;
}

async fn bulk_needs_an_explicit_selection(backend: Backend) {
    let mock = MockTarget::start().await;
    let app = app_for(backend, &mock).await;
    dead_letter_many(&app, &mock, 2).await;
    let dry = |selection: Value| json!({ "selection": selection });
    for (selection, field) in [
        (json!({}), "selection"),
        (json!({ "filter": {} }), "selection.filter"),
        (json!({ "ids": [] }), "selection"),
        (
            json!({ "ids": ["x"], "filter": { "class": "permanent" } }),
            "selection",
        ),
        (
            json!({ "filter": { "class": "workflow_error" } }),
            "selection",
        ),
    ] {
        let (status, problem) = app
            .post(
                "/v1/replay-jobs/dry-run",
                Some(&app.operator),
                &dry(selection.clone()),
            )
            .await;
        assert_eq!(
            (status, problem["field"].as_str()),
            (400, Some(field)),
            "{selection}: {problem}"
        );
    }
    let (_, plan) = app
        .post(
            "/v1/replay-jobs/dry-run",
            Some(&app.operator),
            &dry(json!({ "ids": ["nope"] })),
        )
        .await;
    assert_eq!(plan["summary"]["refused"][0]["why"], "no such dead letter");
    let ok = json!({ "ids": ["nope"] });
    let (status, p) = app
        .post(
            "/v1/replay-jobs",
            Some(&app.operator),
            &json!({ "selection": ok, "reason": "x", "rate_per_sec": 0 }),
        )
        .await;
    assert_eq!((status, p["field"].as_str()), (400, Some("rate_per_sec")));
    let (status, p) = app
        .post(
            "/v1/replay-jobs",
            Some(&app.operator),
            &json!({ "selection": ok, "reason": " ", "rate_per_sec": 5 }),
        )
        .await;
    assert_eq!((status, p["field"].as_str()), (400, Some("reason")));
    assert_eq!(
        app.post(
            "/v1/replay-jobs",
            Some(&app.workflow),
            &json!({ "selection": ok, "reason": "x", "rate_per_sec": 5 })
        )
        .await
        .0,
        403
    );
    assert_eq!(app.db.count("SELECT COUNT(*) FROM replay_jobs").await, 0);
    assert_eq!(
        app.db
            .count("SELECT COUNT(*) FROM runs WHERE state = 'dead_lettered'")
            .await,
        2,
        "nothing replayed"
    );
    app.stop().await;
}
