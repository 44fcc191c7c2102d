//! Replay after a fix, on both backends against the real server: the
//! request that was sent and the answer shown on the dead letter, the
//! `schema_version` recorded at commit, a `permanent` dead letter replayed
//! with a declared JSON Patch reaching a counting target exactly once with
//! the patched body (its key kept), a whole-body correction of a target
//! that may hold the old key going out under a new one, and every bad
//! input refused with nothing changed.

use oncegate::config::Config;
use serde_json::{json, Value};

use crate::deadletters::{dead_letter_of, dispatch_until, dlq_config, get};
use crate::harness::{on_both_backends, Backend, TestApp};
use crate::target::{Behaviour, MockTarget};

on_both_backends!(
    a_permanent_dead_letter_is_replayed_with_a_patch_once,
    a_target_that_may_hold_the_key_gets_the_correction_under_a_new_key,
    bad_corrections_are_refused_and_change_nothing,
    a_resolved_dead_letter_goes_at_its_own_deadline,
    the_console_shows_the_request_and_replays_with_a_transform,
);

/// `dlq_config` plus three transforms: one for `send_email`, one for
/// another operation, one whose `test` never holds.
pub(crate) fn fix_config(base: String) -> impl FnOnce(&mut Config) {
    move |config: &mut Config| {
        dlq_config(base)(config);
        let text = r#"
            [[transforms]]
            name = "fix-to"
            version = 2
            operation = "send_email"
            patch = [{ op = "replace", path = "/to", value = "b@example.com" }]
            [[transforms]]
            name = "refund-amount"
            version = 1
            operation = "refund"
            patch = [{ op = "replace", path = "/amount", value = 1 }]
            [[transforms]]
            name = "guarded"
            version = 1
            operation = "send_email"
            patch = [{ op = "test", path = "/to", value = "nobody" }, { op = "remove", path = "/to" }]
        "#;
        let parsed: oncegate::deadletter::DeadLetterConfig = toml::from_str(text).unwrap();
        config.dead_letters.transforms = parsed.transforms;
        config.validate().expect("a valid config");
    }
}

/// Claims `crm/key` and commits one email to `path` under schema `v3`.
async fn commit_v3(app: &TestApp, key: &str, path: &str) {
    let (_, claim) = app
        .claim(json!({ "namespace": "crm", "key": key, "payload": { "k": key } }))
        .await;
    let lease = claim["lease"].as_str().expect("claimed").to_owned();
    let effects = json!([{ "operation": "send_email", "effect_type": "send_email", "target": "mock",
        "path": path, "body": { "to": "a@example", "subject": "hello" } }]);
    let body = json!({ "namespace": "crm", "key": key, "lease": lease, "effects": effects,
        "schema_version": "v3" });
    let (status, answer) = app
        .post("/v1/runs/commit", Some(&app.workflow), &body)
        .await;
    assert_eq!(status, 200, "{answer}");
}

/// The audit entry of dead letter `id`'s corrected replay.
pub(crate) async fn correction_entry(app: &TestApp, id: &str) -> Value {
    let (_, after) = get(app, &format!("/v1/dead-letters/{id}"), &app.operator).await;
    after["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["detail"]["correction"].is_object())
        .expect("the replay's audit entry")
        .clone()
}

async fn id_of(app: &TestApp, key: &str) -> String {
    dead_letter_of(app, "crm", key).await["dead_letter"]["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// An app whose target refuses `crm/key`'s email with a 422 (then takes
/// the next request), and that run dead-lettered.
async fn refused_with_422(backend: Backend, key: &str) -> (MockTarget, TestApp) {
    let mock = MockTarget::start().await;
    let refusal = Behaviour::RespondNoCommit {
        status: 422,
        headers: vec![],
        body: "{\"error\":\"invalid address\"}".into(),
    };
    mock.on_path_seq("/mail", vec![refusal, Behaviour::status(200)]);
    let app = TestApp::spawn_with(backend, fix_config(mock.base_url())).await;
    commit_v3(&app, key, "/mail").await;
    dispatch_until(&app, key, "dead_lettered").await;
    (mock, app)
}

async fn a_permanent_dead_letter_is_replayed_with_a_patch_once(backend: Backend) {
    let (mock, app) = refused_with_422(backend, "p1").await;
    let detail = dead_letter_of(&app, "crm", "p1").await;
    let d = &detail["dead_letter"];
    assert_eq!(d["class"], "permanent");
    assert_eq!(d["schema_version"], "v3", "recorded at commit");
    let sent = &d["last_request"];
    assert_eq!(sent["method"], "POST");
    assert_eq!(sent["url"], mock.url("/mail"));
    assert_eq!(
        sent["body"],
        json!({ "to": "a@example", "subject": "hello" })
    );
    assert_eq!(sent["headers"]["idempotency-key"], "crm:p1:send_email");
    assert_eq!(sent["headers"]["x-oncegate-key"], "p1");
    assert_eq!(d["last_evidence"]["evidence"]["status"], 422);
    let id = d["id"].as_str().unwrap().to_owned();

    let transform = json!({ "name": "fix-to", "version": 2 });
    let (status, preview) = app
        .post(
            &format!("/v1/dead-letters/{id}/replay/dry-run"),
            Some(&app.operator),
            &json!({ "transform": transform }),
        )
        .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(
        preview["diff"],
        json!([{ "op": "replace", "path": "/to", "value": "b@example.com" }])
    );
    assert_eq!(preview["after"]["to"], "b@example.com");
    assert_eq!(
        preview["key_after"], preview["key_before"],
        "a 4xx keeps the key"
    );
    assert_eq!(preview["transform"], "fix-to@2");
    assert_eq!(mock.requests().len(), 1, "a dry run sends nothing");
    assert!(dead_letter_of(&app, "crm", "p1").await["dead_letter"]["resolved"] == false);

    let (status, replayed) = app
        .post(
            &format!("/v1/dead-letters/{id}/replay"),
            Some(&app.operator),
            &json!({ "reason": "address corrected by fix-to", "transform": transform }),
        )
        .await;
    assert_eq!(status, 200, "{replayed}");
    assert_eq!(replayed["effects"], 1);
    dispatch_until(&app, "p1", "completed").await;
    let effects = mock.effects();
    assert_eq!(effects.len(), 1, "exactly once at the target");
    let body: Value = serde_json::from_slice(&effects[0].body).unwrap();
    assert_eq!(body, json!({ "to": "b@example.com", "subject": "hello" }));
    assert_eq!(
        effects[0].header("idempotency-key"),
        Some("crm:p1:send_email")
    );
    let again = app
        .post(
            &format!("/v1/dead-letters/{id}/replay"),
            Some(&app.operator),
            &json!({ "reason": "twice", "transform": transform }),
        )
        .await;
    assert_eq!(again.0, 409, "{}", again.1);
    dispatch_until(&app, "p1", "completed").await;
    assert_eq!(mock.effects().len(), 1);

    let entry = correction_entry(&app, &id).await;
    assert_eq!(entry["actor"], "ops");
    let fix = &entry["detail"]["correction"];
    assert_eq!(entry["detail"]["reason"], "address corrected by fix-to");
    assert_eq!(fix["transform"], "fix-to@2");
    assert_eq!(fix["hash_before"], preview["hash_before"]);
    assert_eq!(fix["hash_after"], preview["hash_after"]);
    assert_ne!(fix["hash_before"], fix["hash_after"]);
    app.stop().await;
}

async fn a_target_that_may_hold_the_key_gets_the_correction_under_a_new_key(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path_seq(
        "/busy",
        vec![
            Behaviour::no_commit(429),
            Behaviour::no_commit(429),
            Behaviour::no_commit(429),
            Behaviour::status(200),
        ],
    );
    let app = TestApp::spawn_with(backend, fix_config(mock.base_url())).await;
    commit_v3(&app, "b1", "/busy").await;
    dispatch_until(&app, "b1", "dead_lettered").await;
    let id = id_of(&app, "b1").await;
    let whole = json!({ "to": "c@example.com", "subject": "hello again" });
    let (status, replayed) = app
        .post(
            &format!("/v1/dead-letters/{id}/replay"),
            Some(&app.operator),
            &json!({ "reason": "new body", "body": whole }),
        )
        .await;
    assert_eq!(status, 200, "{replayed}");
    dispatch_until(&app, "b1", "completed").await;
    let effects = mock.effects();
    assert_eq!(effects.len(), 1);
    let new_key = format!("crm:b1:send_email:fix:{id}");
    assert_eq!(effects[0].header("idempotency-key"), Some(new_key.as_str()));
    assert_eq!(
        serde_json::from_slice::<Value>(&effects[0].body).unwrap(),
        whole
    );
    app.stop().await;
}

async fn bad_corrections_are_refused_and_change_nothing(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/mail", Behaviour::no_commit(422));
    let app = TestApp::spawn_with(backend, fix_config(mock.base_url())).await;
    commit_v3(&app, "x1", "/mail").await;
    dispatch_until(&app, "x1", "dead_lettered").await;
    let id = id_of(&app, "x1").await;
    let before = dead_letter_of(&app, "crm", "x1").await;
    let sent = mock.requests().len();
    let replay = format!("/v1/dead-letters/{id}/replay");
    let named = |name: &str, version: u32| json!({ "name": name, "version": version });
    for (body, status, slug) in [
        (
            json!({ "reason": "r", "transform": named("guarded", 1) }),
            422,
            "patch-failed",
        ),
        (
            json!({ "reason": "r", "transform": named("refund-amount", 1) }),
            422,
            "transform-mismatch",
        ),
        (
            json!({ "reason": "r", "transform": named("fix-to", 9) }),
            422,
            "unknown-transform",
        ),
        (
            json!({ "reason": "r", "transform": named("fix-to", 2), "body": {} }),
            400,
            "invalid-request",
        ),
        (
            json!({ "reason": "r", "body": { "to": "a@example", "subject": "hello" } }),
            422,
            "correction-unchanged",
        ),
        (
            json!({ "reason": "r", "body": {}, "effect_id": "nope" }),
            422,
            "no-effect-to-correct",
        ),
        (
            json!({ "reason": "", "body": { "to": "z" } }),
            400,
            "invalid-request",
        ),
    ] {
        let mut preview = body.clone();
        preview.as_object_mut().unwrap().remove("reason");
        let mut tries = vec![(replay.clone(), body.clone())];
        if body["reason"] != "" {
            tries.push((format!("{replay}/dry-run"), preview));
        }
        for (path, body) in tries {
            let (got, problem) = app.post(&path, Some(&app.operator), &body).await;
            assert_eq!(got, status, "{path} {body}: {problem}");
            assert_eq!(
                problem["type"],
                format!("urn:oncegate:problem:{slug}"),
                "{problem}"
            );
        }
    }
    let mut after = dead_letter_of(&app, "crm", "x1").await;
    let mut before = before;
    for d in [&mut before, &mut after] {
        d["dead_letter"]["age_seconds"] = Value::Null;
    }
    assert_eq!(
        after["dead_letter"], before["dead_letter"],
        "nothing changed"
    );
    assert_eq!(after["run"]["state"], "dead_lettered");
    assert_eq!(after["timeline"], before["timeline"]);
    dispatch_until(&app, "x1", "dead_lettered").await;
    assert_eq!(mock.requests().len(), sent, "nothing was sent");
    app.stop().await;
}

/// `dead_letters.retention_days` is enforced: a resolved record outlives
/// its run's archiving, and goes (archived, redacted, then deleted) when
/// its deadline passes, not before.
async fn a_resolved_dead_letter_goes_at_its_own_deadline(backend: Backend) {
    use oncegate::retention::{sweep, RetentionConfig, DAY_MS};

    let mock = MockTarget::start().await;
    mock.on_path("/mail", Behaviour::no_commit(422));
    let base = mock.base_url();
    let app = TestApp::spawn_with(backend, move |c: &mut Config| {
        dlq_config(base)(c);
        c.dead_letters.retention_days = 30;
    })
    .await;
    commit_v3(&app, "r1", "/mail").await;
    dispatch_until(&app, "r1", "dead_lettered").await;
    let id = id_of(&app, "r1").await;
    let (status, done) = app
        .post(
            &format!("/v1/dead-letters/{id}/resolve"),
            Some(&app.operator),
            &json!({ "resolution": "reject", "note": "bad address, customer told" }),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    let deadline = chrono::DateTime::parse_from_rfc3339(
        done["dead_letter"]["retention_deadline"].as_str().unwrap(),
    )
    .unwrap()
    .timestamp_millis();
    let now = app.state.clock.now_ms();
    assert!(
        (deadline - now - 30 * DAY_MS).abs() < 60_000,
        "{deadline} {now}"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = RetentionConfig {
        archive_dir: dir.path().join("archive"),
        archive_after_days: 1,
        ..RetentionConfig::default()
    };
    let redactor = oncegate::audit::Redactor::none();
    let sql = format!("SELECT COUNT(*) FROM dead_letters WHERE id = '{id}'");
    let count = || app.db.count(&sql);
    let early = sweep(
        app.store.as_ref(),
        &config,
        &redactor,
        now + 2 * DAY_MS,
        false,
    )
    .await
    .unwrap();
    assert_eq!(
        (early.slimmed, early.dead_letters_expired),
        (1, 0),
        "{early:?}"
    );
    assert_eq!(
        count().await,
        1,
        "kept past its run's archiving, until its deadline"
    );
    let dry = sweep(app.store.as_ref(), &config, &redactor, deadline + 1, true)
        .await
        .unwrap();
    assert_eq!(dry.dead_letters_expired, 1);
    assert_eq!(count().await, 1, "a dry run deletes nothing");
    let due = sweep(app.store.as_ref(), &config, &redactor, deadline + 1, false)
        .await
        .unwrap();
    assert_eq!(due.dead_letters_expired, 1, "{due:?}");
    assert_eq!(count().await, 0);
    let file = due
        .files
        .iter()
        .find(|f| f.contains("dead-letters-"))
        .expect("an archive file");
    let text = std::fs::read_to_string(file).unwrap();
    let line: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(line["dead_letter"]["id"], id.as_str());
    assert_eq!(line["dead_letter"]["resolution"], "reject");
    app.stop().await;
}

/// The console: the record's page shows the request sent and the target's
/// answer and offers the operation's transforms; the preview page shows
/// the diff; its form replays with the transform, once at the target.
async fn the_console_shows_the_request_and_replays_with_a_transform(backend: Backend) {
    let (mock, app) = refused_with_422(backend, "c1").await;
    let id = id_of(&app, "c1").await;
    let ops = crate::approvals::Browser::login(&app, &app.operator).await;
    let (status, page) = ops.get(&format!("/ui/dead-letters/{id}")).await;
    assert_eq!(status, 200, "{page}");
    for shown in [
        "Request sent",
        "a@example",
        "crm:p1:send_email".replace("p1", "c1").as_str(),
        "s answer",
        "invalid address",
        "fix-to@2",
    ] {
        assert!(page.contains(shown), "{shown} missing:\n{page}");
    }
    assert!(
        !page.contains("refund-amount@1"),
        "another operation's transform"
    );
    let (status, preview) = ops
        .get(&format!("/ui/dead-letters/{id}/fix?transform=fix-to%402"))
        .await;
    assert_eq!(status, 200, "{preview}");
    assert!(preview.contains("b@example.com") && preview.contains("replace"));
    assert_eq!(mock.requests().len(), 1, "a preview sends nothing");
    let action = format!("/ui/dead-letters/{id}/replay-fixed");
    let csrf = crate::console::csrf_in(&preview, &action);
    let form = [
        ("csrf", csrf.as_str()),
        ("transform", "fix-to@2"),
        ("reason", "address corrected"),
    ];
    assert_eq!(ops.post_form(&action, &form).await.status(), 303);
    dispatch_until(&app, "c1", "completed").await;
    let effects = mock.effects();
    assert_eq!(effects.len(), 1);
    let body: Value = serde_json::from_slice(&effects[0].body).unwrap();
    assert_eq!(body["to"], "b@example.com");
    app.stop().await;
}

/// `oncegate dlq bulk --transform NAME@VERSION --execute` starts a job
/// whose fix is that transform; a malformed one is refused before anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_starts_a_bulk_replay_job_with_a_transform() {
    let (_mock, app) = refused_with_422(Backend::Sqlite, "cli1").await;
    let id = id_of(&app, "cli1").await;
    let cli = |extra: &[&str]| {
        let mut args = vec![
            "dlq",
            "bulk",
            "--id",
            id.as_str(),
            "--execute",
            "--rate",
            "5",
        ];
        args.extend_from_slice(&["--reason", "address fixed", "--no-wait"]);
        args.extend_from_slice(extra);
        args.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let bad = cli(&["--transform", "fix-to"]);
    let bad: Vec<&str> = bad.iter().map(String::as_str).collect();
    let (ok, _, err) = crate::harness::oncegate_cli(&app.base, &app.operator, &bad).await;
    assert!(!ok && err.contains("NAME@VERSION"), "{err}");
    let (_, jobs) = get(&app, "/v1/replay-jobs", &app.operator).await;
    assert_eq!(jobs.as_array().map(Vec::len), Some(0), "{jobs}");
    let good = cli(&["--transform", "fix-to@2"]);
    let good: Vec<&str> = good.iter().map(String::as_str).collect();
    let (ok, out, err) = crate::harness::oncegate_cli(&app.base, &app.operator, &good).await;
    assert!(ok, "{out}{err}");
    let (_, jobs) = get(&app, "/v1/replay-jobs", &app.operator).await;
    assert_eq!(jobs[0]["fix"]["transform"], "fix-to@2", "{jobs}");
    crate::harness::assert_times_rfc3339(&jobs);
    app.stop().await;
}
