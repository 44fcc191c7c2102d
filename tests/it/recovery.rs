//! The recovery sweeper and the reclaim budget (DESIGN.md §2, "Nothing is
//! stranded"), through the real server on both backends, with an injected
//! clock: a stranded run is dead-lettered, released and reclaimed; a run
//! past its budget answers `claimed: false, state: dead_lettered`; a
//! release of a run with effects changes nothing; a pass run twice moves
//! nothing more; a reclaim racing a pass leaves exactly one winner.

use std::sync::Arc;

use oncegate::clock::ManualClock;
use oncegate::ledger::port::{RecoveryKind, RecoverySelection};
use oncegate::ledger::{recover, RecoveryReport};
use serde_json::{json, Value};

use crate::deadletters::{claim_commit, dead_letter_of, dispatch_until, dlq_config, get};
use crate::harness::{on_both_backends, Backend, TestApp};
use crate::target::{Behaviour, MockTarget};

const START: i64 = 1_800_000_000_000;
const HOUR: i64 = 3_600_000;
/// The lease every claim here asks for.
const LEASE: i64 = 30_000;

on_both_backends!(
    an_abandoned_run_is_stranded_released_and_reclaimed,
    a_run_past_its_budget_answers_dead_lettered,
    a_release_of_a_run_with_effects_changes_nothing,
    a_reclaim_racing_a_pass_has_exactly_one_winner,
    serve_s_maintenance_runs_the_sweeper,
    the_console_releases_a_run_without_effects_only,
    the_cli_runs_one_pass_under_the_same_lease,
);

async fn app(
    backend: Backend,
    clock: &Arc<ManualClock>,
    adjust: impl FnOnce(&mut oncegate::config::Config),
) -> TestApp {
    TestApp::spawn_clocked(backend, clock.clone(), adjust).await
}

fn claim_body(key: &str) -> Value {
    json!({ "namespace": "crm", "key": key, "payload": { "k": key },
        "execution_ref": format!("exec-{key}"), "lease_ms": LEASE })
}

async fn pass(app: &TestApp) -> RecoveryReport {
    let c = &app.state.config;
    recover(
        app.store.as_ref(),
        &c.ledger,
        &c.recovery,
        app.state.metrics.as_ref(),
    )
    .await
    .unwrap()
}

async fn release(app: &TestApp, id: &str) -> (u16, Value) {
    let body = json!({ "reason": "the workflow is fixed; re-run it" });
    app.post(
        &format!("/v1/dead-letters/{id}/release"),
        Some(&app.operator),
        &body,
    )
    .await
}

/// The only open dead letter of `crm/key`, without its run and timeline.
async fn letter(app: &TestApp, key: &str) -> Value {
    dead_letter_of(app, "crm", key).await["dead_letter"].clone()
}

fn recovered(app: &TestApp, class: &str) -> String {
    let text = app.state.metrics.render();
    let series = format!("oncegate_recovered_runs_total{{class=\"{class}\",namespace=\"crm\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .unwrap_or("none")
        .to_owned()
}

async fn an_abandoned_run_is_stranded_released_and_reclaimed(backend: Backend) {
    let clock = Arc::new(ManualClock::new(START));
    let app = app(backend, &clock, |_| {}).await;
    let (status, first) = app.claim(claim_body("abandoned")).await;
    assert_eq!(
        (status, first["claimed"].as_bool()),
        (200, Some(true)),
        "{first}"
    );
    assert_eq!(
        pass(&app).await,
        RecoveryReport::default(),
        "the lease is live"
    );
    // The default window: an hour after the lease expired, not a moment before.
    clock.advance_ms(LEASE + HOUR - 1);
    assert_eq!(pass(&app).await.stranded, 0);
    assert_eq!(
        app.get_run("crm", "abandoned").await.1["state"],
        "processing"
    );
    clock.advance_ms(1);
    let report = pass(&app).await;
    assert_eq!((report.stranded, report.exhausted), (1, 0), "{report:?}");
    assert_eq!(recovered(&app, "stranded"), "1");
    let run = app.get_run("crm", "abandoned").await.1;
    assert_eq!(run["state"], "dead_lettered", "{run}");
    let dl = letter(&app, "abandoned").await;
    assert_eq!(dl["class"], "stranded", "{dl}");
    let evidence = &dl["last_evidence"];
    assert_eq!(evidence["last_owner"], "n8n", "{dl}");
    assert_eq!(evidence["execution_ref"], "exec-abandoned", "{dl}");
    assert_eq!(evidence["attempts"], 1, "{dl}");
    assert_eq!(evidence["lease_history"][0]["kind"], "claim", "{dl}");
    // Nobody may take it while an operator decides; a second pass moves nothing.
    let (_, answer) = app.claim(claim_body("abandoned")).await;
    assert_eq!(
        (answer["claimed"].as_bool(), answer["state"].as_str()),
        (Some(false), Some("dead_lettered")),
        "{answer}"
    );
    let version = app.get_run("crm", "abandoned").await.1["version"].clone();
    assert_eq!(pass(&app).await, RecoveryReport::default(), "idempotent");
    assert_eq!(app.get_run("crm", "abandoned").await.1["version"], version);
    assert_eq!(recovered(&app, "stranded"), "1");
    // Released, the next claim reclaims it under the same key.
    let id = dl["id"].as_str().unwrap();
    let (status, done) = release(&app, id).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["run"]["state"], "failed_retryable", "{done}");
    assert_eq!(done["dead_letter"]["resolution"], "replayed", "{done}");
    let (status, again) = app.claim(claim_body("abandoned")).await;
    assert_eq!(
        (status, again["claimed"].as_bool()),
        (200, Some(true)),
        "{again}"
    );
    assert!(again["version"].as_i64() > version.as_i64(), "{again}");
}

async fn fail(app: &TestApp, key: &str, lease: &Value) {
    let body = json!({ "namespace": "crm", "key": key, "lease": lease, "retryable": true, "error": "the CRM timed out" });
    let (status, answer) = app.post("/v1/runs/fail", Some(&app.workflow), &body).await;
    assert_eq!(status, 200, "{answer}");
}

async fn a_run_past_its_budget_answers_dead_lettered(backend: Backend) {
    let clock = Arc::new(ManualClock::new(START));
    let app = app(backend, &clock, |c| c.ledger.max_reclaims = 2).await;
    // The first claim and two reclaims, each failed for a retry.
    for attempt in 1..=3 {
        let (_, c) = app.claim(claim_body("flaky")).await;
        assert_eq!(c["claimed"].as_bool(), Some(true), "attempt {attempt}: {c}");
        fail(&app, "flaky", &c["lease"]).await;
        clock.advance_ms(1_000);
    }
    let (status, answer) = app.claim(claim_body("flaky")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        (answer["claimed"].as_bool(), answer["state"].as_str()),
        (Some(false), Some("dead_lettered")),
        "{answer}"
    );
    assert_eq!(
        app.get_run("crm", "flaky").await.1["state"],
        "dead_lettered"
    );
    let dl = letter(&app, "flaky").await;
    assert_eq!(dl["class"], "reclaim_budget_exhausted", "{dl}");
    assert_eq!(dl["detail"]["reclaims"], 2, "{dl}");
    assert_eq!(dl["detail"]["trigger"], "claim", "{dl}");
    assert_eq!(recovered(&app, "reclaim_budget_exhausted"), "1");
    assert_eq!(
        pass(&app).await,
        RecoveryReport::default(),
        "the claim moved it already"
    );
    // The release restarts the budget: the next claim reclaims it.
    let (status, done) = release(&app, dl["id"].as_str().unwrap()).await;
    assert_eq!(status, 200, "{done}");
    let (_, c) = app.claim(claim_body("flaky")).await;
    assert_eq!(c["claimed"].as_bool(), Some(true), "{c}");
    // Older than the retry window: the sweeper moves it without a claim.
    let (_, c) = app.claim(claim_body("slow")).await;
    fail(&app, "slow", &c["lease"]).await;
    clock.advance_ms(24 * HOUR);
    let report = pass(&app).await;
    assert_eq!(report.exhausted, 1, "{report:?}");
    assert_eq!(letter(&app, "slow").await["detail"]["trigger"], "sweeper");
    let (_, answer) = app.claim(claim_body("slow")).await;
    assert_eq!(answer["state"], "dead_lettered", "{answer}");
}

async fn a_release_of_a_run_with_effects_changes_nothing(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/bad", Behaviour::no_commit(400));
    let clock = Arc::new(ManualClock::new(START));
    let app = app(backend, &clock, dlq_config(mock.base_url())).await;
    claim_commit(&app, "sent", "/bad").await;
    dispatch_until(&app, "sent", "dead_lettered").await;
    let dl = letter(&app, "sent").await;
    let before = app.get_run("crm", "sent").await.1;
    let (status, problem) = release(&app, dl["id"].as_str().unwrap()).await;
    assert_eq!(status, 409, "{problem}");
    assert!(
        problem["type"]
            .as_str()
            .unwrap()
            .ends_with("run-has-effects"),
        "{problem}"
    );
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("nothing was changed"),
        "{problem}"
    );
    assert_eq!(app.get_run("crm", "sent").await.1, before);
    let after = letter(&app, "sent").await;
    assert!(after["resolution"].is_null(), "{after}");
    // A release without a reason is refused before anything is read.
    let (status, _) = app
        .post(
            &format!("/v1/dead-letters/{}/release", dl["id"].as_str().unwrap()),
            Some(&app.operator),
            &json!({ "reason": " " }),
        )
        .await;
    assert_eq!(status, 400);
    let (status, _) = get(&app, "/v1/dead-letters?class=stranded", &app.operator).await;
    assert_eq!(status, 200, "the new classes filter");
}

async fn a_reclaim_racing_a_pass_has_exactly_one_winner(backend: Backend) {
    let clock = Arc::new(ManualClock::new(START));
    let app = app(backend, &clock, |_| {}).await;
    let keys: Vec<String> = (0..8).map(|i| format!("race-{i}")).collect();
    for key in &keys {
        app.claim(claim_body(key)).await;
    }
    clock.advance_ms(LEASE + HOUR);
    // The pass reads its candidates; a reclaim then takes one of them:
    // the pass's compare-and-set on the version it read loses cleanly.
    let sel = RecoverySelection {
        only: Some("crm".into()),
        exclude: vec![],
        rules: app.state.config.ledger.recovery("crm"),
        limit: 100,
    };
    let seen = app
        .store
        .recovery_candidates(&sel, RecoveryKind::Stranded)
        .await
        .unwrap();
    assert_eq!(seen.len(), keys.len());
    let (_, won) = app.claim(claim_body(&keys[0])).await;
    assert_eq!(won["claimed"].as_bool(), Some(true), "{won}");
    assert!(
        app.store.strand(&seen[0]).await.unwrap().is_none(),
        "the reclaim won"
    );
    assert_eq!(app.get_run("crm", &keys[0]).await.1["state"], "processing");
    // The others race for real: each key has exactly one winner.
    let claims = futures_util::future::join_all(keys[1..].iter().map(|k| app.claim(claim_body(k))));
    let (answers, report) = tokio::join!(claims, pass(&app));
    let mut reclaimed = 0;
    for (key, (status, answer)) in keys[1..].iter().zip(&answers) {
        assert_eq!(*status, 200, "{answer}");
        let state = app.get_run("crm", key).await.1["state"].clone();
        let (_, page) = get(
            &app,
            "/v1/dead-letters?namespace=crm&class=stranded&limit=500",
            &app.operator,
        )
        .await;
        let letters = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["key"] == key.as_str())
            .count();
        if answer["claimed"].as_bool() == Some(true) {
            reclaimed += 1;
            assert_eq!(
                (state.as_str(), letters),
                (Some("processing"), 0),
                "{key}: {answer}"
            );
        } else {
            assert_eq!(answer["state"], "dead_lettered", "{key}: {answer}");
            assert_eq!(
                (state.as_str(), letters),
                (Some("dead_lettered"), 1),
                "{key}"
            );
        }
    }
    assert_eq!(
        reclaimed + report.stranded as usize,
        keys.len() - 1,
        "{report:?}"
    );
}

/// The pass `serve` runs on its own: the maintenance jobs take the
/// `recovery` lease and dead-letter a stranded run without anyone asking.
async fn serve_s_maintenance_runs_the_sweeper(backend: Backend) {
    let clock = Arc::new(ManualClock::new(START));
    let app = app(backend, &clock, |c| c.recovery.interval_secs = 1).await;
    app.claim(claim_body("left")).await;
    clock.advance_ms(LEASE + HOUR);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let jobs = oncegate::app::spawn_maintenance(&app.state, shutdown.clone()).unwrap();
    crate::harness::eventually(
        "the sweeper in serve",
        std::time::Duration::from_secs(30),
        || async { (app.get_run("crm", "left").await.1["state"] == "dead_lettered").then_some(()) },
    )
    .await;
    shutdown.cancel();
    jobs.await.unwrap();
    assert_eq!(letter(&app, "left").await["class"], "stranded");
    assert_eq!(recovered(&app, "stranded"), "1");
}

/// The console offers a release only for runs that stop before any
/// effect (the API's refusal of a run with effects is tested above), and
/// checks its CSRF token.
async fn the_console_releases_a_run_without_effects_only(backend: Backend) {
    let c = crate::console::Console::start(backend).await;
    c.claim("crm", "broken", json!({})).await;
    let report = json!({ "execution_ref": "exec-broken", "retryable": false,
        "error": { "message": "node crashed", "node": "Send Email" } });
    let (status, answer) = c
        .app
        .post("/v1/runs/fail-by-execution", Some(&c.app.workflow), &report)
        .await;
    assert_eq!(status, 200, "{answer}");
    c.email("sent", "/bad").await;
    c.dispatch_until("crm", "sent", "dead_lettered").await;
    let root = crate::approvals::Browser::login(&c.app, &c.root).await;
    let (broken, sent) = (
        c.dead_letter_id("broken").await,
        c.dead_letter_id("sent").await,
    );
    let (_, page) = root.get(&format!("/ui/dead-letters/{sent}")).await;
    assert!(
        !page.contains("/release\""),
        "a run with effects is offered no release"
    );
    let refused = root
        .post_form(
            &format!("/ui/dead-letters/{sent}/release"),
            &[("reason", "x")],
        )
        .await;
    assert_eq!(refused.status(), 403, "no token, no release");
    assert_eq!(c.state("crm", "sent").await, "dead_lettered");
    let (_, page) = root.get(&format!("/ui/dead-letters/{broken}")).await;
    let action = format!("/ui/dead-letters/{broken}/release");
    let token = crate::console::csrf_in(&page, &action);
    let form = [("reason", "node fixed"), ("csrf", token.as_str())];
    let resp = root.post_form(&action, &form).await;
    assert_eq!(resp.status(), 303);
    assert_eq!(c.state("crm", "broken").await, "failed_retryable");
    let (_, again) = c
        .app
        .claim(json!({ "namespace": "crm", "key": "broken", "payload": { "k": "broken" } }))
        .await;
    assert_eq!(again["claimed"].as_bool(), Some(true), "{again}");
    assert_eq!(c.state("crm", "sent").await, "dead_lettered");
    c.app.stop().await;
}

/// `oncegate recovery run`: one pass through the real binary, refused
/// while another process holds the `recovery` lease, idempotent after.
async fn the_cli_runs_one_pass_under_the_same_lease(backend: Backend) {
    let db = crate::harness::TestDb::new(backend).await;
    // Claimed two hours ago (real time), so its lease expired long ago.
    let then = chrono::Utc::now().timestamp_millis() - 2 * HOUR;
    let store = db.manual_store(Arc::new(ManualClock::new(then))).await;
    let req = oncegate::ledger::ClaimRequest {
        namespace: oncegate::ledger::Namespace::parse("crm").unwrap(),
        key: oncegate::ledger::IdempotencyKey::parse("cli").unwrap(),
        business_key: None,
        payload_hash: oncegate::ledger::PayloadHash::of_bytes(b"cli"),
        lease_ms: LEASE,
        metadata: Default::default(),
        claimed_by: "n8n".into(),
    };
    store.claim(&req).await.unwrap();
    let run = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_oncegate"))
            .args(["recovery", "run"])
            .env("ONCEGATE_DATABASE_URL", &db.url)
            .env_remove("ONCEGATE_CONFIG")
            .output()
            .unwrap()
    };
    // Held until an hour from now: the store's clock is two hours behind.
    let held_ms = 3 * HOUR;
    assert!(store
        .take_job("recovery", "serve:other", held_ms)
        .await
        .unwrap());
    let held = run();
    let said = String::from_utf8_lossy(&held.stdout).into_owned();
    assert!(!held.status.success(), "{said}");
    assert!(String::from_utf8_lossy(&held.stderr).contains("another process"));
    assert_eq!(state_of(&store, &req).await, "processing", "nothing moved");
    store.release_job("recovery", "serve:other").await.unwrap();
    let first = run();
    let out = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(out.contains("1 stranded run(s)"), "{out}");
    assert_eq!(state_of(&store, &req).await, "dead_lettered");
    let again = String::from_utf8_lossy(&run().stdout).into_owned();
    assert!(again.contains("0 stranded run(s)"), "{again}");
    store.close().await;
}

async fn state_of(
    store: &oncegate::db::SharedStore,
    req: &oncegate::ledger::ClaimRequest,
) -> String {
    let run = store
        .get_run(&req.namespace, &req.key)
        .await
        .unwrap()
        .unwrap();
    run.state.as_str().to_owned()
}
