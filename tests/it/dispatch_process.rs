//! The dispatcher inside real `oncegate` processes: several dispatchers on
//! one PostgreSQL, a dispatcher killed between send and record, and the
//! kill switch from the CLI.

use std::sync::Arc;
use std::time::Duration;

use oncegate::clock::SystemClock;
use oncegate::config::Config;
use oncegate::ledger::{IdempotencyKey, Namespace};

use crate::harness::{eventually, queue_effect as queue, Backend, TestDb};
use crate::process::{command, write_config_with, Server};
use crate::target::{Behaviour, MockTarget};

fn targets_toml(base: &str, lease_ms: i64) -> String {
    format!(
        "[dispatcher]\nlease_ms = {lease_ms}\nidle_poll_ms = 100\n\n\
         [[targets]]\nname = \"mock\"\nbase_url = \"{base}\"\ntimeout_ms = 1500\nconnect_timeout_ms = 500\n\
         concurrency = 16\n\n\
         [[targets]]\nname = \"keyed\"\nbase_url = \"{base}\"\nhonours_idempotency_keys = true\n\
         timeout_ms = 1500\nconnect_timeout_ms = 500\nretry = {{ base_ms = 1, cap_ms = 5 }}\n\n\
         [[operations]]\nname = \"send_email\"\ngate = \"none\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_dispatchers_on_one_postgres_send_each_effect_once() {
    let mock = MockTarget::start().await;
    let db = TestDb::new(Backend::Postgres).await;
    let dir = tempfile::tempdir().unwrap();
    let (config_path, _) =
        write_config_with(dir.path(), &db.url, &targets_toml(&mock.base_url(), 10_000));
    let a = Server::start(&config_path, dir.path(), &[]);
    let b = Server::start(&config_path, dir.path(), &[]);
    let store = db.store(Arc::new(SystemClock), true).await;
    let config: Config = toml::from_str(&targets_toml(&mock.base_url(), 10_000)).unwrap();
    let local = Arc::new(
        oncegate::outbox::Dispatcher::new(
            store.clone(),
            &config.targets,
            config.dispatcher.clone(),
            Arc::new(SystemClock),
            Arc::new(oncegate::metrics::Metrics::new()),
            Arc::new(tokio::sync::Notify::new()),
            oncegate::outbox::KillSwitch::new(store.clone()),
        )
        .unwrap(),
    );
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(local.clone().run(stop.clone()));
    for i in 0..1000 {
        queue(&store, &format!("k{i}"), "mock", mock.url("/send")).await;
    }
    mock.wait_for_requests(1000, Duration::from_secs(120)).await;
    eventually("every run completed", Duration::from_secs(60), || async {
        (db.count("SELECT COUNT(*) FROM runs WHERE state = 'completed'")
            .await
            == 1000)
            .then_some(())
    })
    .await;
    stop.cancel();
    running.await.unwrap();
    assert_eq!(mock.requests().len(), 1000, "no effect was sent twice");
    for i in [0, 1, 499, 999] {
        assert_eq!(
            mock.effect_count_for_key(&format!("crm:k{i}:send_email")),
            1
        );
    }
    let dispatchers = db
        .count("SELECT COUNT(DISTINCT dispatcher) FROM effect_attempts")
        .await;
    assert_eq!(dispatchers, 3, "each dispatcher sent some");
    assert!(a.stop().success());
    assert!(b.stop().success());
    store.close().await;
}

crate::harness::on_both_backends!(
    killed_between_send_and_record_is_never_resent_blindly,
    killed_between_send_and_record_resends_the_same_key_where_honoured,
    killed_during_a_backoff_sends_on_schedule_with_the_same_key_and_budget,
);

/// A target that answers 429 twice, then 200; the process is killed (-9)
/// while the effect waits for its first retry. The restarted process sends
/// it no earlier than the stored schedule, under the same key, counting on
/// from the attempts already made.
async fn killed_during_a_backoff_sends_on_schedule_with_the_same_key_and_budget(backend: Backend) {
    let mock = MockTarget::start().await;
    // The first 429 asks for 3 s, so the kill lands inside the backoff
    // whatever the jitter; the second is an ordinary backoff.
    let wait = Behaviour::RespondNoCommit {
        status: 429,
        headers: vec![("retry-after".into(), "3".into())],
        body: "{}".into(),
    };
    mock.on_path_seq(
        "/send",
        vec![wait, Behaviour::no_commit(429), Behaviour::status(200)],
    );
    let db = TestDb::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[dispatcher]\nidle_poll_ms = 100\n\n\
         [[targets]]\nname = \"slow\"\nbase_url = \"{}\"\ntimeout_ms = 1500\n\
         retry = {{ max_attempts = 3, base_ms = 200, cap_ms = 5000 }}\n\n\
         [[operations]]\nname = \"send_email\"\ngate = \"none\"\n",
        mock.base_url()
    );
    let (config_path, _) = write_config_with(dir.path(), &db.url, &toml);
    let store = db.store(Arc::new(SystemClock), true).await;
    let server = Server::start(&config_path, dir.path(), &[]);
    queue(&store, "b1", "slow", mock.url("/send")).await;
    eventually(
        "the first retry is scheduled",
        Duration::from_secs(15),
        || async {
            (db.count(
                "SELECT COUNT(*) FROM effects WHERE state = 'pending' AND attempts = 1 \
                   AND next_attempt_at IS NOT NULL",
            )
            .await
                == 1)
                .then_some(())
        },
    )
    .await;
    server.kill9();
    assert_eq!(mock.requests().len(), 1, "killed before the retry went out");
    let scheduled = db.count("SELECT next_attempt_at FROM effects").await;
    let first = db
        .count("SELECT finished_at FROM effect_attempts WHERE attempt = 1")
        .await;
    assert!(
        scheduled >= first + 2_500,
        "Retry-After honoured: {first} -> {scheduled}"
    );

    let server = Server::start(&config_path, dir.path(), &[]);
    eventually("the effect completes", Duration::from_secs(30), || async {
        (db.count("SELECT COUNT(*) FROM effects WHERE state = 'completed'")
            .await
            == 1)
            .then_some(())
    })
    .await;
    assert!(server.stop().success());
    let requests = mock.requests();
    assert_eq!(requests.len(), 3, "two 429s and the 200, nothing more");
    assert!(requests
        .iter()
        .all(|r| r.header("idempotency-key") == Some("crm:b1:send_email")));
    assert_eq!(
        db.count("SELECT attempts FROM effects").await,
        3,
        "the budget counts on across the restart"
    );
    let second = db
        .count("SELECT started_at FROM effect_attempts WHERE attempt = 2")
        .await;
    assert!(
        second >= scheduled,
        "the retry waited for its schedule ({second} < {scheduled})"
    );
    store.close().await;
}

/// Sends one effect from a process, kills it (-9) while the target holds
/// the answer, restarts, and waits until the run settles.
async fn kill_mid_send(backend: Backend, target: &str) -> (MockTarget, TestDb, String) {
    let mock = MockTarget::start().await;
    mock.honour_keys("idempotency-key", target == "keyed");
    mock.on_path_seq(
        "/send",
        vec![Behaviour::CommitThenHang, Behaviour::status(200)],
    );
    let db = TestDb::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let (config_path, _) =
        write_config_with(dir.path(), &db.url, &targets_toml(&mock.base_url(), 2_500));
    let store = db.store(Arc::new(SystemClock), true).await;
    let server = Server::start(&config_path, dir.path(), &[]);
    queue(&store, "c1", target, mock.url("/send")).await;
    mock.wait_for_requests(1, Duration::from_secs(10)).await;
    server.kill9();
    assert_eq!(
        db.count("SELECT COUNT(*) FROM effects WHERE state = 'sending'")
            .await,
        1
    );
    let server = Server::start(&config_path, dir.path(), &[]);
    let settled = eventually("the run settles", Duration::from_secs(30), || async {
        let run = store
            .get_run(
                &Namespace::parse("crm").unwrap(),
                &IdempotencyKey::parse("c1").unwrap(),
            )
            .await
            .unwrap()?;
        (run.state.as_str() != "approved").then(|| run.state.as_str().to_owned())
    })
    .await;
    assert!(server.stop().success());
    store.close().await;
    (mock, db, settled)
}

async fn killed_between_send_and_record_is_never_resent_blindly(backend: Backend) {
    let (mock, db, settled) = kill_mid_send(backend, "mock").await;
    assert_eq!(
        settled, "dead_lettered",
        "an unknown outcome goes to a human"
    );
    assert_eq!(
        mock.requests().len(),
        1,
        "no automatic resend to a target that ignores keys"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM effects WHERE state = 'unknown'")
            .await,
        1
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM dead_letters WHERE class = 'unknown_outcome'")
            .await,
        1
    );
}

async fn killed_between_send_and_record_resends_the_same_key_where_honoured(backend: Backend) {
    let (mock, _db, settled) = kill_mid_send(backend, "keyed").await;
    assert_eq!(settled, "completed");
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests
        .iter()
        .all(|r| r.idempotency_key.as_deref() == Some("crm:c1:send_email")));
    assert_eq!(
        mock.effect_count_for_key("crm:c1:send_email"),
        1,
        "the target deduplicated"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_kill_switch_holds_a_running_dispatcher() {
    let mock = MockTarget::start().await;
    let db = TestDb::new(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let (config_path, _) =
        write_config_with(dir.path(), &db.url, &targets_toml(&mock.base_url(), 10_000));
    let cfg = config_path.to_str().unwrap();
    let out = command(&["actions", "disable", "--config", cfg])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = Server::start(&config_path, dir.path(), &[]);
    let store = db.store(Arc::new(SystemClock), true).await;
    for i in 0..5 {
        queue(&store, &format!("k{i}"), "mock", mock.url("/send")).await;
    }
    // Several idle polls pass; nothing may go out.
    eventually("the dispatcher polled", Duration::from_secs(10), || async {
        (db.count("SELECT COUNT(*) FROM effects WHERE state = 'pending'")
            .await
            == 5)
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(mock.requests().is_empty(), "held by the kill switch");
    let out = command(&["actions", "enable", "--config", cfg])
        .output()
        .unwrap();
    assert!(out.status.success());
    mock.wait_for_requests(5, Duration::from_secs(10)).await;
    assert!(server.stop().success());
    assert_eq!(mock.requests().len(), 5);
    let status = command(&["actions", "status", "--config", cfg])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("cli:"),
        "the actor is recorded"
    );
    store.close().await;
}
