//! Dead letters through real binaries: `oncegate dlq …` as an operator
//! runs it against a served app, and the replay runner inside `oncegate
//! serve`, whose job another process resumes after a `kill -9`.

use std::sync::Arc;
use std::time::Duration;

use oncegate::deadletter::runner::ReplayRunner;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::deadletters::{app_for, claim_commit, dispatch_until};
use crate::harness::{eventually, oncegate_cli, Backend, TestApp};
use crate::target::{Behaviour, MockTarget};

async fn dlq(app: &TestApp, args: &[&str]) -> (bool, String, String) {
    let args: Vec<&str> = std::iter::once("dlq").chain(args.iter().copied()).collect();
    oncegate_cli(&app.base, &app.operator, &args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_shows_replays_in_bulk_and_resolves() {
    let mock = MockTarget::start().await;
    mock.on_path("/bad", Behaviour::no_commit(422));
    let app = app_for(Backend::Sqlite, &mock).await;
    for key in ["c1", "c2", "c3"] {
        claim_commit(&app, key, "/bad").await;
        dispatch_until(&app, key, "dead_lettered").await;
    }
    let (ok, out, err) = dlq(&app, &["list", "--json"]).await;
    assert!(ok, "{err}");
    let page: Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<String> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 3);
    let (ok, out, _) = dlq(&app, &["list", "--class", "permanent"]).await;
    assert!(
        ok && out.contains(&ids[0]) && out.contains("3 dead letter(s)"),
        "{out}"
    );
    let (ok, out, _) = dlq(&app, &["show", &ids[0]]).await;
    assert!(
        ok && out.contains("effects_failed") && out.contains("crm:c1:send_email"),
        "{out}"
    );

    let (ok, out, err) = dlq(
        &app,
        &[
            "resolve",
            &ids[0],
            "--as",
            "reject",
            "--note",
            "cancelled by the customer",
        ],
    )
    .await;
    assert!(ok && out.contains("failed_terminal"), "{out}{err}");
    let (ok, _, err) = dlq(
        &app,
        &["resolve", &ids[0], "--as", "reject", "--note", "again"],
    )
    .await;
    assert!(!ok && err.contains("already resolved"), "{err}");

    let (ok, _, err) = dlq(&app, &["bulk"]).await;
    assert!(!ok && err.contains("select what to replay"), "{err}");
    mock.on_path("/bad", Behaviour::status(200));
    let (ok, out, _) = dlq(&app, &["bulk", "--class", "permanent"]).await;
    assert!(
        ok && out.contains("replayable:   2") && out.contains("dry run: nothing was replayed"),
        "{out}"
    );
    assert_eq!(mock.effects().len(), 0, "the dry run sent nothing");

    let shutdown = CancellationToken::new();
    let ctx = app.state.replay.clone();
    let runner = tokio::spawn(
        Arc::new(ReplayRunner::new(ctx, &app.state.config.dead_letters)).run(shutdown.clone()),
    );
    let (ok, out, err) = dlq(
        &app,
        &[
            "bulk",
            "--class",
            "permanent",
            "--execute",
            "--rate",
            "10",
            "--reason",
            "target fixed",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        out.contains("is completed") && out.contains("2 replayed, 0 refused, 0 remaining"),
        "{out}"
    );
    let dispatcher = app.dispatcher();
    eventually("both replays sent", Duration::from_secs(10), || async {
        dispatcher.dispatch_once().await.unwrap();
        (mock.effects().len() == 2).then_some(())
    })
    .await;
    let (ok, out, _) = dlq(&app, &["jobs", "list"]).await;
    assert!(
        ok && out.contains("completed") && out.contains("2/0/0"),
        "{out}"
    );
    let (ok, _, err) = dlq(&app, &["--token", "og_wrong", "list"]).await;
    assert!(!ok && err.contains("401"), "{err}");
    shutdown.cancel();
    runner.await.unwrap();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_servers_replay_job_is_finished_by_another_server() {
    const N: usize = 30;
    let mock = MockTarget::start().await;
    // A send cut short by the kill is retried with the same key, which
    // the target honours: the count below is of effects, not requests.
    mock.honour_keys("idempotency-key", true);
    mock.on_path("/bulk", Behaviour::no_commit(400));
    let db = crate::harness::TestDb::new(Backend::Postgres).await;
    let dir = tempfile::tempdir().unwrap();
    let (operator, entry) = crate::harness::token("ops", &[oncegate::config::Scope::Operator]);
    let extra = format!(
        "[dispatcher]\nidle_poll_ms = 100\nlease_ms = 3000\n\n[dead_letters]\njob_lease_ms = 1000\njob_poll_ms = 100\n\n\
         [[targets]]\nname = \"mock\"\nbase_url = \"{}\"\ntimeout_ms = 1500\nconnect_timeout_ms = 500\n\
         honours_idempotency_keys = true\nretry = {{ base_ms = 1, cap_ms = 5 }}\n\n\
         [[operations]]\nname = \"send_email\"\ngate = \"none\"\n\n\
         [[tokens]]\nsubject = \"ops\"\ndigest = \"{}\"\nscopes = [\"operator\"]\n",
        mock.base_url(),
        entry.digest
    );
    let (config, _) = crate::process::write_config_with(dir.path(), &db.url, &extra);
    let first = crate::process::Server::start(&config, dir.path(), &[]);
    let store = db.store(Arc::new(oncegate::clock::SystemClock), true).await;
    for i in 0..N {
        crate::harness::queue_effect(&store, &format!("b{i}"), "mock", mock.url("/bulk")).await;
    }
    eventually(
        "the server's dispatcher dead-letters them",
        Duration::from_secs(30),
        || async {
            (db.count("SELECT COUNT(*) FROM runs WHERE state = 'dead_lettered'")
                .await
                == N as i64)
                .then_some(())
        },
    )
    .await;
    mock.on_path("/bulk", Behaviour::status(200));
    let client = reqwest::Client::new();
    let post = |base: String, path: &'static str, body: Value| {
        let (client, operator) = (client.clone(), operator.clone());
        async move {
            let resp = client
                .post(format!("{base}{path}"))
                .bearer_auth(operator)
                .json(&body)
                .send()
                .await
                .unwrap();
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
        }
    };
    let (_, dry) = post(
        first.base.clone(),
        "/v1/replay-jobs/dry-run",
        serde_json::json!({ "selection": { "filter": { "namespace": "crm" } } }),
    )
    .await;
    let body = serde_json::json!({ "selection": { "ids": dry["ids"] }, "reason": "recovered", "rate_per_sec": 10 });
    let (status, job) = post(first.base.clone(), "/v1/replay-jobs", body).await;
    assert_eq!(status, 201, "{job}");
    let replayed = || async {
        db.count("SELECT COUNT(*) FROM replay_job_items WHERE state = 'replayed'")
            .await
    };
    eventually(
        "the first server to replay some",
        Duration::from_secs(30),
        || async { (replayed().await >= 5).then_some(()) },
    )
    .await;
    first.kill9();
    let left = N as i64 - replayed().await;
    assert!(left > 0, "killed mid-job");
    let second = crate::process::Server::start(&config, dir.path(), &[]);
    eventually(
        "the second server to finish the job",
        Duration::from_secs(60),
        || async {
            (db.count("SELECT COUNT(*) FROM replay_jobs WHERE state = 'completed'")
                .await
                == 1)
                .then_some(())
        },
    )
    .await;
    eventually("every replay sent", Duration::from_secs(30), || async {
        (mock.effects().len() >= N).then_some(())
    })
    .await;
    assert_eq!(
        replayed().await,
        N as i64,
        "every item replayed, none refused"
    );
    for i in 0..N {
        assert_eq!(
            mock.effect_count_for_key(&format!("crm:b{i}:send_email")),
            1,
            "b{i}"
        );
    }
    assert_eq!(mock.effects().len(), N);
    assert!(second.stop().success());
    store.close().await;
}
