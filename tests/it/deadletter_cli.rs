//! `oncegate dlq …` as an operator runs it: the real binary against a
//! served app, over HTTP with an operator token.

use std::sync::Arc;
use std::time::Duration;

use oncegate::deadletter::replay::ReplayContext;
use oncegate::deadletter::runner::ReplayRunner;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::deadletters::{app_for, claim_commit, dispatch_until};
use crate::harness::{eventually, Backend, TestApp};
use crate::target::{Behaviour, MockTarget};

async fn dlq(app: &TestApp, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .arg("dlq")
        .args(args)
        .env("ONCEGATE_URL", &app.base)
        .env("ONCEGATE_TOKEN", &app.operator)
        .env_remove("ONCEGATE_CONFIG")
        .output()
        .await
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
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
    let ctx = ReplayContext {
        store: app.store.clone(),
        config: app.state.config.clone(),
        wake: app.state.wake.clone(),
    };
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
