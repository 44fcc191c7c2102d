//! The outbox and dispatcher against a real target on 127.0.0.1, on both
//! backends: send once, classify, retry within budget, reconcile the
//! unknown, obey the kill switch.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use oncegate::clock::{Clock, ManualClock};
use oncegate::config::Config;
use oncegate::db::sql::{Dialect, Statements};
use oncegate::ledger::{IdempotencyKey, Namespace};
use oncegate::outbox::TargetRoom;
use serde_json::{json, Value};

use crate::harness::{on_both_backends, Backend, TestApp, TestDb};
use crate::plans::{binds, explain};
use crate::target::{Behaviour, MockTarget};

/// Targets `mock` (ignores keys) and `keyed` (honours keys) on one mock
/// server, and operations `send_email` (no gate) and `refund` (gated).
fn with_mock(base: String, extra_target: &'static str) -> impl FnOnce(&mut Config) {
    move |config: &mut Config| {
        let targets = format!(
            "[[targets]]\nname = \"mock\"\nbase_url = \"{base}\"\ntimeout_ms = 1000\nconnect_timeout_ms = 500\n\
             retry = {{ max_attempts = 4, base_ms = 1, cap_ms = 2, max_elapsed_ms = 60000 }}\n{extra_target}\n\
             [[targets]]\nname = \"keyed\"\nbase_url = \"{base}\"\nhonours_idempotency_keys = true\n\
             timeout_ms = 1000\nretry = {{ max_attempts = 4, base_ms = 1, cap_ms = 2, max_elapsed_ms = 60000 }}\n\
             [[operations]]\nname = \"send_email\"\ngate = \"none\"\n\
             [[operations]]\nname = \"refund\"\nirreversible = true\n"
        );
        let parsed: Config = toml::from_str(&targets).unwrap();
        config.targets = parsed.targets;
        config.operations = parsed.operations;
        config.dispatcher.lease_ms = 10_000;
        config.tokens.push(oncegate::config::TokenConfig {
            subject: "root".into(),
            digest: oncegate::tokens::digest(ADMIN_TOKEN),
            scopes: vec![oncegate::config::Scope::Admin],
            roles: vec![],
            namespaces: None,
        });
    }
}

async fn app_with(backend: Backend, mock: &MockTarget) -> TestApp {
    TestApp::spawn_with(backend, with_mock(mock.base_url(), "")).await
}

/// Claims `key` and commits `effects`; returns the commit's status and body.
async fn claim_commit(app: &TestApp, key: &str, effects: Value) -> (u16, Value) {
    let (_, claim) = app
        .claim(json!({ "namespace": "crm", "key": key, "payload": { "k": key } }))
        .await;
    let lease = claim["lease"].as_str().expect("claimed").to_owned();
    let body = json!({ "namespace": "crm", "key": key, "lease": lease, "result": { "ok": true }, "effects": effects });
    app.post("/v1/runs/commit", Some(&app.workflow), &body)
        .await
}

fn email(target: &str, path: &str) -> Value {
    json!([{ "operation": "send_email", "effect_type": "send_email", "target": target, "path": path,
             "body": { "to": "a@example.com" } }])
}

async fn steps(app: &TestApp, dispatcher: &oncegate::outbox::Dispatcher, n: usize) {
    for _ in 0..n {
        dispatcher.dispatch_once().await.unwrap();
    }
    let _ = app;
}

async fn run_state(app: &TestApp, key: &str) -> String {
    app.get_run("crm", key).await.1["state"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn effect_state(app: &TestApp, key: &str) -> Value {
    let effects = app
        .store
        .effects_of(
            &Namespace::parse("crm").unwrap(),
            &IdempotencyKey::parse(key).unwrap(),
        )
        .await
        .unwrap();
    json!({ "state": effects[0].state.as_str(), "attempts": effects[0].attempts, "class": effects[0].last_class })
}

on_both_backends!(
    sends_once_with_key_version_and_completes_the_run,
    a_retried_commit_is_refused_and_sends_once,
    refused_commits_store_nothing,
    lost_answer_with_probe_is_reconciled_not_resent,
    lost_answer_without_probe_goes_to_a_human,
    undecidable_probe_keeps_reconciling_and_never_resends,
    honouring_target_gets_the_same_key_again,
    statuses_route_end_to_end,
    kill_switch_holds_everything_then_sends_each_once,
    retry_schedule_stays_inside_the_budget,
    a_slow_target_does_not_hold_up_another,
);

/// A slow target's backlog fills only its share of the effects in flight:
/// another target's effects, committed after it, go out at once. (With one
/// room for all, the oldest due effects, all the slow target's, took every
/// lease, and the fast target waited for the whole backlog.)
async fn a_slow_target_does_not_hold_up_another(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/slow/send", Behaviour::Hang);
    let base = mock.base_url();
    let app = TestApp::spawn_with(backend, move |config: &mut Config| {
        let parsed: Config = toml::from_str(&format!(
            "[[targets]]\nname = \"slow\"\nbase_url = \"{base}/slow\"\nconcurrency = 2\ntimeout_ms = 2000\n\
             [[targets]]\nname = \"fast\"\nbase_url = \"{base}/fast\"\nconcurrency = 8\n"
        ))
        .unwrap();
        config.targets = parsed.targets;
        config.dispatcher.lease_ms = 30_000;
    })
    .await;
    for i in 0..30 {
        crate::harness::queue_effect(&app.store, &format!("s{i}"), "slow", mock.url("/slow/send"))
            .await;
    }
    for i in 0..5 {
        crate::harness::queue_effect(&app.store, &format!("f{i}"), "fast", mock.url("/fast/send"))
            .await;
    }
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(Arc::new(app.dispatcher()).run(shutdown.clone()));
    let sent_to = |prefix: &str| {
        mock.requests()
            .iter()
            .filter(|r| r.path.starts_with(prefix))
            .count()
    };
    crate::harness::eventually(
        "the fast target's 5 effects sent",
        Duration::from_secs(10),
        || async { (sent_to("/fast/") == 5).then_some(()) },
    )
    .await;
    let waiting = app
        .db
        .count("SELECT COUNT(*) FROM effects WHERE target = 'slow' AND state = 'pending'")
        .await;
    assert!(
        waiting >= 20,
        "the slow target's backlog still waits ({waiting} pending)"
    );
    shutdown.cancel();
    running.await.unwrap();
}

async fn sends_once_with_key_version_and_completes_the_run(backend: Backend) {
    let mock = MockTarget::start().await;
    let app = app_with(backend, &mock).await;
    let (status, commit) = claim_commit(&app, "c1", email("mock", "/send")).await;
    assert_eq!(status, 200, "{commit}");
    assert_eq!(commit["state"], "approved");
    assert_eq!(commit["effects"][0]["idempotency_key"], "crm:c1:send_email");
    let dispatcher = app.dispatcher();
    let report = dispatcher.dispatch_once().await.unwrap();
    assert_eq!((report.leased, report.sent), (1, 1));
    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!(sent.path, "/send");
    assert_eq!(sent.idempotency_key.as_deref(), Some("crm:c1:send_email"));
    assert_eq!(sent.header("x-oncegate-version"), Some("2"));
    assert_eq!(sent.header("x-oncegate-key"), Some("c1"));
    assert!(sent.header("x-correlation-id").is_some());
    assert_eq!(
        serde_json::from_slice::<Value>(&sent.body).unwrap(),
        json!({ "to": "a@example.com" })
    );
    assert_eq!(run_state(&app, "c1").await, "completed");
    assert_eq!(
        dispatcher.dispatch_once().await.unwrap().leased,
        0,
        "nothing left"
    );
    let (_, listed) = get_effects(&app, "c1").await;
    assert_eq!(listed[0]["state"], "completed");
    assert_eq!(listed[0]["history"][0]["class"], "success");
    crate::harness::assert_times_rfc3339(&listed);
    app.stop().await;
}

async fn get_effects(app: &TestApp, key: &str) -> (u16, Value) {
    let resp = app
        .client
        .get(format!("{}/v1/runs/effects", app.base))
        .query(&[("namespace", "crm"), ("key", key)])
        .bearer_auth(&app.operator)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

async fn a_retried_commit_is_refused_and_sends_once(backend: Backend) {
    let mock = MockTarget::start().await;
    let app = app_with(backend, &mock).await;
    let (_, claim) = app
        .claim(json!({ "namespace": "crm", "key": "c1", "payload": {} }))
        .await;
    let body = json!({ "namespace": "crm", "key": "c1", "lease": claim["lease"], "effects": email("mock", "/send") });
    let (first, _) = app
        .post("/v1/runs/commit", Some(&app.workflow), &body)
        .await;
    let (second, problem) = app
        .post("/v1/runs/commit", Some(&app.workflow), &body)
        .await;
    assert_eq!((first, second), (200, 409), "{problem}");
    assert_eq!(problem["state"], "approved");
    steps(&app, &app.dispatcher(), 3).await;
    assert_eq!(mock.requests().len(), 1);
    app.stop().await;
}

async fn refused_commits_store_nothing(backend: Backend) {
    let mock = MockTarget::start().await;
    let app = app_with(backend, &mock).await;
    let (_, claim) = app
        .claim(json!({ "namespace": "crm", "key": "c1", "payload": {} }))
        .await;
    let lease = claim["lease"].clone();
    let effect = |patch: Value| {
        let mut e = json!({ "operation": "send_email", "effect_type": "send_email", "target": "mock", "path": "/send" });
        e.as_object_mut()
            .unwrap()
            .extend(patch.as_object().unwrap().clone());
        json!({ "namespace": "crm", "key": "c1", "lease": lease, "effects": [e] })
    };
    let cases = [
        (
            "credential header",
            effect(json!({ "headers": { "Authorization": "Bearer x" } })),
            400,
        ),
        (
            "undeclared operation",
            effect(json!({ "operation": "launch_missiles" })),
            400,
        ),
        (
            "gated operation",
            effect(json!({ "operation": "refund" })),
            409,
        ),
        (
            "unknown target",
            effect(json!({ "target": "elsewhere" })),
            400,
        ),
        (
            "outside the allow-list",
            effect(json!({ "path": null, "url": "http://127.0.0.2:1/x" })),
            400,
        ),
        (
            "userinfo trick",
            effect(json!({ "path": null, "url": format!("{}@evil.example/x", mock.base_url()) })),
            400,
        ),
    ];
    for (what, body, status) in cases {
        let (got, problem) = app
            .post("/v1/runs/commit", Some(&app.workflow), &body)
            .await;
        assert_eq!(got, status, "{what}: {problem}");
        if status == 409 {
            assert!(
                problem["detail"]
                    .as_str()
                    .unwrap()
                    .contains("/v1/runs/gate"),
                "{problem}"
            );
        }
    }
    assert_eq!(app.db.count("SELECT COUNT(*) FROM effects").await, 0);
    let (_, run) = app.get_run("crm", "c1").await;
    assert_eq!(
        (run["state"].as_str(), run["version"].as_i64()),
        (Some("processing"), Some(1))
    );
    app.stop().await;
}

async fn lost_answer_with_probe_is_reconciled_not_resent(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/send", Behaviour::CommitThenClose);
    mock.on_probe("/probe");
    let app = app_with(backend, &mock).await;
    let mut effects = email("mock", "/send");
    effects[0]["probe_url"] = json!(format!("{}/probe/{{idempotency_key}}", mock.base_url()));
    claim_commit(&app, "c1", effects).await;
    let dispatcher = app.dispatcher();
    dispatcher.dispatch_once().await.unwrap();
    assert_eq!(effect_state(&app, "c1").await["state"], "unknown");
    crate::harness::eventually("the probe decides", Duration::from_secs(10), || async {
        dispatcher.dispatch_once().await.unwrap();
        (run_state(&app, "c1").await == "completed").then_some(())
    })
    .await;
    assert_eq!(mock.effect_count_for_key("crm:c1:send_email"), 1);
    let posts = mock
        .requests()
        .iter()
        .filter(|r| r.method == "POST")
        .count();
    assert_eq!(posts, 1, "an unknown outcome is never blindly resent");
    app.stop().await;
}

async fn lost_answer_without_probe_goes_to_a_human(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/send", Behaviour::CommitThenClose);
    let app = app_with(backend, &mock).await;
    claim_commit(&app, "c1", email("mock", "/send")).await;
    steps(&app, &app.dispatcher(), 3).await;
    assert_eq!(effect_state(&app, "c1").await["state"], "unknown");
    assert_eq!(run_state(&app, "c1").await, "dead_lettered");
    assert_eq!(
        app.db
            .count("SELECT COUNT(*) FROM dead_letters WHERE class = 'unknown_outcome'")
            .await,
        1
    );
    assert_eq!(mock.requests().len(), 1);
    app.stop().await;
}

/// Found by the Retry Lab (docs/lab.md): after a probe that cannot decide,
/// the effect is still unknown and must be probed again, never re-sent to a
/// target that ignores keys.
async fn undecidable_probe_keeps_reconciling_and_never_resends(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/send", Behaviour::CommitThenClose);
    mock.on_path(
        "/undecided",
        Behaviour::RespondNoCommit {
            status: 503,
            headers: vec![],
            body: "{}".into(),
        },
    );
    let app = app_with(backend, &mock).await;
    let mut effects = email("mock", "/send");
    effects[0]["probe_url"] = json!(format!(
        "{}/undecided?key={{idempotency_key}}",
        mock.base_url()
    ));
    claim_commit(&app, "c1", effects).await;
    let dispatcher = app.dispatcher();
    let probes = || mock.requests().iter().filter(|r| r.method == "GET").count();
    crate::harness::eventually(
        "three undecided probes",
        Duration::from_secs(10),
        || async {
            dispatcher.dispatch_once().await.unwrap();
            (probes() >= 3).then_some(())
        },
    )
    .await;
    let posts = mock
        .requests()
        .iter()
        .filter(|r| r.method == "POST")
        .count();
    assert_eq!(posts, 1, "an undecided outcome is never blindly resent");
    assert_eq!(mock.effect_count_for_key("crm:c1:send_email"), 1);
    assert_eq!(effect_state(&app, "c1").await["state"], "unknown");
    app.stop().await;
}

async fn honouring_target_gets_the_same_key_again(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.honour_keys("idempotency-key", true);
    mock.on_path_seq(
        "/send",
        vec![Behaviour::CommitThenClose, Behaviour::status(200)],
    );
    let app = app_with(backend, &mock).await;
    claim_commit(&app, "c1", email("keyed", "/send")).await;
    let dispatcher = app.dispatcher();
    crate::harness::eventually("the retry completes", Duration::from_secs(10), || async {
        dispatcher.dispatch_once().await.unwrap();
        (run_state(&app, "c1").await == "completed").then_some(())
    })
    .await;
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests
        .iter()
        .all(|r| r.idempotency_key.as_deref() == Some("crm:c1:send_email")));
    assert_eq!(
        mock.effect_count_for_key("crm:c1:send_email"),
        1,
        "the target deduplicated the retry"
    );
    app.stop().await;
}

async fn statuses_route_end_to_end(backend: Backend) {
    let mock = MockTarget::start().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let app = TestApp::spawn_with(backend, |c| {
        with_mock(mock.base_url(), "")(c);
        let down: Config = toml::from_str(&format!(
            "[[targets]]\nname = \"down\"\nbase_url = \"http://127.0.0.1:{closed_port}\"\nconnect_timeout_ms = 300\ntimeout_ms = 500\n"
        ))
        .unwrap();
        c.targets.extend(down.targets);
    })
    .await;
    mock.on_path(
        "/moved",
        Behaviour::Respond {
            status: 301,
            headers: vec![("location".into(), "/elsewhere".into())],
            body: String::new(),
        },
    );
    mock.on_path("/bad", Behaviour::status(400));
    mock.on_path(
        "/busy",
        Behaviour::Respond {
            status: 429,
            headers: vec![("retry-after".into(), "30".into())],
            body: "{}".into(),
        },
    );
    mock.on_path("/broken", Behaviour::no_commit(500));
    mock.on_path("/slow", Behaviour::CommitThenHang);
    mock.on_path(
        "/declined",
        Behaviour::json(200, r#"{"status":"declined"}"#),
    );
    // (key, target, path, effect state, run state)
    let cases = [
        ("moved", "mock", "/moved", "failed", "dead_lettered"),
        ("bad", "mock", "/bad", "failed", "dead_lettered"),
        ("busy", "mock", "/busy", "pending", "approved"),
        ("broken-keyed", "keyed", "/broken", "pending", "approved"),
        ("broken", "mock", "/broken", "unknown", "dead_lettered"),
        ("slow", "mock", "/slow", "unknown", "dead_lettered"),
        ("refused", "down", "/x", "pending", "approved"),
        ("declined", "mock", "/declined", "failed", "failed_terminal"),
    ];
    for (key, target, path, _, _) in cases {
        let mut effects = email(target, path);
        if key == "declined" {
            effects[0]["reject"] = json!({ "pointer": "/status", "equals": "declined" });
        }
        let (status, body) = claim_commit(&app, key, effects).await;
        assert_eq!(status, 200, "{key}: {body}");
    }
    app.dispatcher().dispatch_once().await.unwrap();
    for (key, _, _, effect, run) in cases {
        assert_eq!(
            effect_state(&app, key).await["state"],
            effect,
            "{key} effect"
        );
        assert_eq!(run_state(&app, key).await, run, "{key} run");
    }
    assert!(
        mock.requests().iter().all(|r| r.path != "/elsewhere"),
        "redirects are never followed"
    );
    let (_, busy) = get_effects(&app, "busy").await;
    assert_eq!(
        busy[0]["history"][0]["evidence"]["headers"]["retry-after"], "30",
        "evidence keeps Retry-After"
    );
    app.stop().await;
}

async fn kill_switch_holds_everything_then_sends_each_once(backend: Backend) {
    let mock = MockTarget::start().await;
    let app = app_with(backend, &mock).await;
    let admin = |enabled: bool| json!({ "enabled": enabled });
    let (status, _) = app
        .post("/v1/admin/actions", Some(&app.operator), &admin(false))
        .await;
    assert_eq!(status, 403, "operators may read but not flip the switch");
    let admin_token = ADMIN_TOKEN;
    let (status, switches) = app
        .post("/v1/admin/actions", Some(admin_token), &admin(false))
        .await;
    assert_eq!(status, 200, "{switches}");
    let keys: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
    join_all(
        keys.iter()
            .map(|k| claim_commit(&app, k, email("mock", "/send"))),
    )
    .await;
    let dispatcher = app.dispatcher();
    for _ in 0..3 {
        let report = dispatcher.dispatch_once().await.unwrap();
        assert_eq!(report.sent, 0);
    }
    assert!(
        mock.requests().is_empty(),
        "nothing is sent while actions are disabled"
    );
    assert_eq!(
        app.db
            .count("SELECT COUNT(*) FROM effects WHERE state = 'pending'")
            .await,
        100
    );
    app.post("/v1/admin/actions", Some(admin_token), &admin(true))
        .await;
    crate::harness::eventually("all 100 sent", Duration::from_secs(30), || async {
        dispatcher.dispatch_once().await.unwrap();
        (mock.requests().len() >= 100).then_some(())
    })
    .await;
    steps(&app, &dispatcher, 2).await;
    assert_eq!(mock.requests().len(), 100, "each exactly once");
    let trail = app
        .db
        .count("SELECT COUNT(*) FROM audit_events WHERE namespace = 'oncegate' AND actor = 'root'")
        .await;
    assert_eq!(trail, 2, "both changes are audited with their actor");
    app.stop().await;
}

const ADMIN_TOKEN: &str = "og_test_admin_token_for_dispatch_tests_only_000";

async fn retry_schedule_stays_inside_the_budget(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/busy", Behaviour::no_commit(503));
    let db = TestDb::new(backend).await;
    let clock = Arc::new(ManualClock::new(1_800_000_000_000));
    let store = db.manual_store(clock.clone()).await;
    let target: Config = toml::from_str(&format!(
        "[[targets]]\nname = \"mock\"\nbase_url = \"{}\"\nhonours_idempotency_keys = true\n\
         retry = {{ max_attempts = 3, base_ms = 1000, cap_ms = 4000, max_elapsed_ms = 600000 }}\n",
        mock.base_url()
    ))
    .unwrap();
    crate::harness::queue_effect(&store, "c1", "mock", format!("{}/busy", mock.base_url())).await;
    let (namespace, key) = (
        Namespace::parse("crm").unwrap(),
        IdempotencyKey::parse("c1").unwrap(),
    );
    let dispatcher = oncegate::outbox::Dispatcher::new(
        store.clone(),
        &target.targets,
        oncegate::outbox::DispatcherConfig::default(),
        clock.clone(),
        Arc::new(oncegate::metrics::Metrics::new()),
        Arc::new(tokio::sync::Notify::new()),
        oncegate::outbox::KillSwitch::new(store.clone()),
    )
    .unwrap();
    for (attempt, ceiling) in [(1, 1_000), (2, 2_000)] {
        let now = clock.now_ms();
        assert_eq!(
            dispatcher.dispatch_once().await.unwrap().sent,
            1,
            "attempt {attempt}"
        );
        let effect = &store.effects_of(&namespace, &key).await.unwrap()[0];
        assert_eq!(
            (effect.state.as_str(), effect.attempts),
            ("pending", attempt)
        );
        let delay = effect.next_attempt_at - now;
        assert!(
            (0..=ceiling).contains(&delay),
            "attempt {attempt}: delay {delay} outside [0, {ceiling}]"
        );
        // Not due a millisecond early.
        if delay > 0 {
            clock.advance_ms(delay - 1);
            assert_eq!(dispatcher.dispatch_once().await.unwrap().leased, 0);
            clock.advance_ms(1);
        }
    }
    assert_eq!(
        dispatcher.dispatch_once().await.unwrap().sent,
        1,
        "attempt 3"
    );
    let effect = &store.effects_of(&namespace, &key).await.unwrap()[0];
    assert_eq!((effect.state.as_str(), effect.attempts), ("failed", 3));
    let run = store.get_run(&namespace, &key).await.unwrap().unwrap();
    assert_eq!(run.state.as_str(), "dead_lettered");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM dead_letters WHERE class = 'retry_exhausted'")
            .await,
        1
    );
    assert_eq!(mock.requests().len(), 3);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_switch_engaged_between_lease_and_send_holds_the_rest() {
    let mock = MockTarget::start().await;
    let app = TestApp::spawn_with(
        Backend::Sqlite,
        with_mock(mock.base_url(), "rate_per_second = 2"),
    )
    .await;
    for key in ["a", "b", "c"] {
        claim_commit(&app, key, email("mock", "/send")).await;
    }
    let dispatcher = Arc::new(app.dispatcher());
    let step = tokio::spawn({
        let d = dispatcher.clone();
        async move { d.dispatch_once().await.unwrap() }
    });
    mock.wait_for_requests(1, Duration::from_secs(5)).await;
    let (status, _) = app
        .post(
            "/v1/admin/actions",
            Some(ADMIN_TOKEN),
            &json!({ "enabled": false }),
        )
        .await;
    assert_eq!(status, 200);
    let report = step.await.unwrap();
    assert_eq!((report.leased, report.sent, report.held), (3, 1, 2));
    assert_eq!(mock.requests().len(), 1);
    assert_eq!(
        app.db
            .count("SELECT COUNT(*) FROM effects WHERE state = 'pending' AND attempts = 0")
            .await,
        2
    );
    app.stop().await;
}

/// Many dispatchers leasing at once never get more than they asked for,
/// and never the same effect twice (PostgreSQL could run a `LIMIT … SKIP
/// LOCKED` subquery more than once and overshoot the limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_leases_keep_to_their_limit_and_never_overlap() {
    let mock = MockTarget::start().await;
    let app = app_with(Backend::Postgres, &mock).await;
    for i in 0..300 {
        crate::harness::queue_effect(
            &app.store,
            &format!("l{i}"),
            "mock",
            format!("{}/send", mock.base_url()),
        )
        .await;
    }
    let leases = join_all((0..12).map(|n| {
        let store = app.store.clone();
        async move {
            store
                .lease_effects(&format!("d{n}"), 60_000, 7, &room("mock", 7))
                .await
                .unwrap()
        }
    }))
    .await;
    let mut ids = std::collections::HashSet::new();
    for leased in &leases {
        assert!(leased.len() <= 7, "a lease of 7 returned {}", leased.len());
        for l in leased {
            assert!(
                ids.insert(l.effect.id.clone()),
                "{} leased twice",
                l.effect.id
            );
        }
    }
    assert_eq!(ids.len(), 84, "every lease filled: 12 × 7 of 300 due");
}

/// The last two effects of one run recorded by two transactions at once
/// (the dispatcher records up to four batches concurrently): the run still
/// completes, because each record locks its runs first, so the second sees
/// the first's effect completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_last_effects_are_recorded_concurrently_completes() {
    use oncegate::outbox::{Decision, Verdict};
    let mock = MockTarget::start().await;
    let app = app_with(Backend::Postgres, &mock).await;
    for i in 0..20 {
        let key = format!("pair{i}");
        let effects = json!([
            { "operation": "send_email", "effect_type": "first", "target": "mock", "path": "/a" },
            { "operation": "send_email", "effect_type": "second", "target": "mock", "path": "/b" }
        ]);
        assert_eq!(claim_commit(&app, &key, effects).await.0, 200);
        let leased = app
            .store
            .lease_effects("d", 60_000, 10, &room("mock", 10))
            .await
            .unwrap();
        assert_eq!(leased.len(), 2);
        let decide = |l: &oncegate::outbox::Leased| Decision {
            leased: l.clone(),
            verdict: Verdict::Completed { external_ref: None },
            attempt: None,
        };
        let (a, b) = (vec![decide(&leased[0])], vec![decide(&leased[1])]);
        let (ra, rb) = tokio::join!(
            app.store.record_decisions(&a),
            app.store.record_decisions(&b)
        );
        ra.unwrap();
        rb.unwrap();
        assert_eq!(run_state(&app, &key).await, "completed", "{key}");
    }
}

/// A lease's room: up to `limit` effects of `target`.
fn room(target: &str, limit: i64) -> Vec<TargetRoom> {
    vec![TargetRoom {
        target: target.into(),
        limit,
        cluster: Default::default(),
    }]
}

/// PostgreSQL plans a lease as a walk of the due index in order, and a
/// record's look-ups by key, even on tables it has no statistics for yet (a
/// fresh database, a burst before autovacuum's next ANALYZE). Left to the
/// planner, each lease of 64 read and sorted every due effect, and each
/// record scanned every run: 20,000 queued effects drained at ~800/s.
#[tokio::test]
async fn postgres_leases_and_records_by_index_without_statistics() {
    use sqlx::Arguments;
    let db = TestDb::new(Backend::Postgres).await;
    db.exec(
        "INSERT INTO runs (namespace, run_key, state, payload_hash, version, attempts, correlation_id, \
             claimed_by, created_at, updated_at) \
         SELECT 'ns', 'k' || i, 'approved', 'h', 2, 1, 'c', 'test', 0, 0 FROM generate_series(1, 5000) i",
    )
    .await;
    db.exec(
        "INSERT INTO effects (id, namespace, run_key, operation, effect_type, target, method, url, headers, \
             idempotency_key, spec, state, next_attempt_at, created_at, updated_at) \
         SELECT 'e' || i, 'ns', 'k' || i, 'send', 'send', 'mock', 'POST', 'http://127.0.0.1:9/', '{}', \
             'k' || i, '{}', 'pending', i, 0, 0 FROM generate_series(1, 5000) i",
    )
    .await;
    let statements = Statements::new(Dialect::Postgres);
    let st = &statements.outbox;

    let lease_binds = binds(|a| {
        a.add(None::<i64>)?;
        a.add("d")?;
        a.add(60_000_i64)?;
        a.add(64_i64)?;
        a.add("mock")
    });
    let lease = explain(&db, st.lease_plan.as_deref(), &st.lease[1], lease_binds).await;
    assert!(lease.contains("Index Scan using effects_due"), "{lease}");
    assert!(
        !lease.contains("Sort"),
        "the lease sorts every due effect:\n{lease}"
    );

    let runs = r#"[{"v_ns":"ns","v_key":"k1"},{"v_ns":"ns","v_key":"k2"}]"#;
    let lock = binds(|a| a.add(runs));
    let complete = binds(|a| {
        a.add(None::<i64>)?;
        a.add(runs)
    });
    let audits = binds(|a| a.add(r#"[{"v_ns":"ns","v_key":"k1","v_hash":"h"}]"#));
    for (statement, binds) in [
        (statements.runs.lock_runs.as_deref().unwrap(), lock),
        (&statements.runs.complete_runs, complete),
        (&statements.runs.append_audits, audits),
    ] {
        let plan = explain(&db, st.record_plan.as_deref(), statement, binds).await;
        assert!(plan.contains("Index Scan using runs_pkey"), "{plan}");
        assert!(
            !plan.contains("Scan on runs "),
            "a record reads every run:\n{plan}"
        );
    }
    let verdicts = r#"[{"v_id":"e1","v_owner":"d","v_state":"completed","v_sent":1}]"#;
    let record = binds(|a| {
        a.add(None::<i64>)?;
        a.add(verdicts)
    });
    let plan = explain(&db, st.record_plan.as_deref(), &st.record_batch, record).await;
    assert!(plan.contains("Index Scan using effects_pkey"), "{plan}");
}
