//! Audit integrity on both backends: `audit verify` passes on a clean log
//! and names the first bad row after an UPDATE, a middle DELETE, a DELETE
//! of the last event and a deleted run; checkpoints never launder a
//! deletion; the timeline answers the four audit questions.

use std::sync::Arc;

use oncegate::audit::{verify, write_checkpoint, CheckpointReason, Finding, VerifyReport};
use oncegate::clock::{Clock, SystemClock};
use oncegate::db::SharedStore;
use oncegate::ledger::{
    ClaimOutcome, ClaimRequest, IdempotencyKey, Namespace, OwnerCall, OwnerMove, PayloadHash,
    RunMetadata,
};
use serde_json::{json, Value};

use crate::harness::{on_both_backends, Backend, TestApp, TestDb};

/// Claims `ns/key`, renews once and completes: a chain of three events.
pub async fn finished_run(store: &SharedStore, ns: &str, key: &str, result: Value) {
    let req = ClaimRequest {
        namespace: Namespace::parse(ns).unwrap(),
        key: IdempotencyKey::parse(key).unwrap(),
        business_key: None,
        payload_hash: PayloadHash::of_bytes(key.as_bytes()),
        lease_ms: 30_000,
        metadata: RunMetadata::default(),
        claimed_by: "test".into(),
    };
    let ClaimOutcome::Claimed { lease, .. } = store.claim(&req).await.unwrap() else {
        panic!("claim {key}")
    };
    let mut call = OwnerCall {
        namespace: req.namespace,
        key: req.key,
        lease,
        actor: "test".into(),
    };
    call.lease = store
        .renew(&call, 30_000, 600_000)
        .await
        .unwrap()
        .lease
        .unwrap();
    let done = OwnerMove::Complete {
        result: Some(result),
    };
    store.finish(&call, &done).await.unwrap();
}

fn finding<'a>(report: &'a VerifyReport, key: &str) -> &'a Finding {
    report
        .findings
        .iter()
        .find(|f| f.key == key)
        .unwrap_or_else(|| panic!("no finding for {key}: {:?}", report.findings))
}

async fn tampered(db: &TestDb, store: &SharedStore) -> VerifyReport {
    db.exec("UPDATE audit_events SET actor = 'mallory' WHERE namespace = 'crm' AND run_key = 'edited' AND seq = 2").await;
    db.exec("DELETE FROM audit_events WHERE namespace = 'crm' AND run_key = 'middle' AND seq = 2")
        .await;
    db.exec("DELETE FROM audit_events WHERE namespace = 'crm' AND run_key = 'last' AND seq = 3")
        .await;
    db.exec("DELETE FROM audit_events WHERE namespace = 'crm' AND run_key = 'gone'")
        .await;
    db.exec("DELETE FROM runs WHERE namespace = 'crm' AND run_key = 'gone'")
        .await;
    verify(store.as_ref(), None).await.unwrap()
}

async fn verify_names_the_first_bad_row(backend: Backend) {
    let db = TestDb::new(backend).await;
    let store = db.store(Arc::new(SystemClock), true).await;
    for key in ["clean", "edited", "middle", "last", "gone"] {
        finished_run(&store, "crm", key, json!({ "ok": key })).await;
    }
    store.set_actions("*", false, "ops").await.unwrap();
    let clean = verify(store.as_ref(), None).await.unwrap();
    assert!(clean.ok(), "{:?}", clean.findings);
    assert_eq!((clean.chains, clean.events), (6, 16));
    let first = write_checkpoint(
        store.as_ref(),
        CheckpointReason::Manual,
        &[],
        SystemClock.now_ms(),
    )
    .await
    .unwrap();
    assert_eq!((first.checkpoint.id, first.checkpoint.chain_count), (1, 6));
    assert!(verify(store.as_ref(), None).await.unwrap().ok());

    let report = tampered(&db, &store).await;
    assert_eq!(report.failures, 4, "{:#?}", report.findings);
    let edited = finding(&report, "edited");
    assert_eq!(
        (edited.table.as_str(), edited.row),
        ("audit_events", Some(2))
    );
    assert!(edited.problem.contains("edited"), "{edited}");
    let middle = finding(&report, "middle");
    assert_eq!(
        (middle.table.as_str(), middle.row),
        ("audit_events", Some(2))
    );
    assert!(middle.problem.contains("deleted"), "{middle}");
    let last = finding(&report, "last");
    assert_eq!((last.table.as_str(), last.row), ("audit_events", Some(3)));
    assert!(last.problem.contains("run row's head is seq 3"), "{last}");
    let gone = finding(&report, "gone");
    assert_eq!(gone.table, "runs");
    assert!(
        gone.problem.contains("checkpoint 1 recorded this key"),
        "{gone}"
    );
    assert!(report.findings.iter().all(|f| f.key != "clean"));

    // A later checkpoint keeps the vanished key and counts it: no laundering.
    let second = write_checkpoint(
        store.as_ref(),
        CheckpointReason::Manual,
        &[],
        SystemClock.now_ms(),
    )
    .await
    .unwrap();
    assert_eq!(second.checkpoint.anomalies, 1);
    assert_eq!(second.anomalies[0].key, "gone");
    let again = verify(store.as_ref(), Some("crm")).await.unwrap();
    assert_eq!(again.failures, 4);
    assert_eq!(finding(&again, "gone").table, "runs");
}

async fn checkpoint_tampering_is_found(backend: Backend) {
    let db = TestDb::new(backend).await;
    let store = db.store(Arc::new(SystemClock), true).await;
    for key in ["a", "b"] {
        finished_run(&store, "crm", key, json!({})).await;
    }
    let now = SystemClock.now_ms();
    write_checkpoint(store.as_ref(), CheckpointReason::Manual, &[], now)
        .await
        .unwrap();
    write_checkpoint(store.as_ref(), CheckpointReason::Periodic, &[], now)
        .await
        .unwrap();
    // Deleting a run together with its checkpointed head breaks the digest.
    db.exec("DELETE FROM audit_heads WHERE run_key = 'a'").await;
    let report = verify(store.as_ref(), None).await.unwrap();
    let heads = report
        .findings
        .iter()
        .find(|f| f.table == "audit_heads")
        .unwrap();
    assert!(heads.problem.contains("1 head(s) were deleted"), "{heads}");
    // Editing a checkpoint breaks its own hash; deleting one leaves a gap.
    db.exec("UPDATE audit_checkpoints SET chain_count = 5 WHERE id = 1")
        .await;
    let report = verify(store.as_ref(), None).await.unwrap();
    let c = report
        .findings
        .iter()
        .find(|f| f.table == "audit_checkpoints")
        .unwrap();
    assert_eq!(c.row, Some(1));
    db.exec("DELETE FROM audit_checkpoints WHERE id = 1").await;
    let report = verify(store.as_ref(), None).await.unwrap();
    let c = report
        .findings
        .iter()
        .find(|f| f.table == "audit_checkpoints")
        .unwrap();
    assert!(c.problem.contains("missing"), "{c}");
}

/// The real binary exits non-zero and prints the bad row.
async fn the_cli_exits_non_zero_on_a_broken_log(backend: Backend) {
    let db = TestDb::new(backend).await;
    let store = db.store(Arc::new(SystemClock), true).await;
    finished_run(&store, "crm", "k", json!({})).await;
    store.close().await;
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_oncegate"))
            .args(args)
            .env("ONCEGATE_DATABASE_URL", &db.url)
            .env_remove("ONCEGATE_CONFIG")
            .output()
            .unwrap()
    };
    let ok = run(&["audit", "verify"]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let stderr = String::from_utf8_lossy(&ok.stderr);
    assert!(
        !stderr.contains("verifying the audit chains"),
        "no progress spinner into a pipe: {stderr}"
    );
    let cp = run(&["audit", "checkpoint"]);
    assert!(String::from_utf8_lossy(&cp.stdout).contains("checkpoint 1 written: 1 chains"));
    db.exec("DELETE FROM audit_events WHERE run_key = 'k' AND seq = 3")
        .await;
    let bad = run(&["audit", "verify", "--namespace", "crm"]);
    assert!(!bad.status.success());
    let out = String::from_utf8_lossy(&bad.stdout);
    assert!(
        out.contains("BAD audit_events namespace=crm key=k seq=3"),
        "{out}"
    );
}

/// Inserts a correctly chained event after the run's head, as the
/// approval and validation parts will, and moves the head.
async fn append_event(
    db: &TestDb,
    store: &SharedStore,
    key: &str,
    kind: &str,
    actor: &str,
    detail: Value,
) {
    let trail = store
        .audit_trail(
            &Namespace::parse("crm").unwrap(),
            &IdempotencyKey::parse(key).unwrap(),
        )
        .await
        .unwrap();
    let last = trail.last().unwrap();
    let entry = oncegate::audit::AuditEntry::unmoved(
        "crm",
        key,
        last.entry.seq + 1,
        kind,
        actor,
        detail,
        last.entry.created_at + 1,
    );
    let hash = entry.chain_hash(Some(&last.hash));
    let detail = entry.detail.to_string().replace('\'', "''");
    db.exec(&format!(
        "INSERT INTO audit_events (namespace, run_key, seq, kind, actor, detail, prev_hash, hash, created_at) \
         VALUES ('crm', '{key}', {}, '{kind}', '{actor}', '{detail}', '{}', '{hash}', {})",
        entry.seq, last.hash, entry.created_at
    ))
    .await;
    db.exec(&format!(
        "UPDATE runs SET audit_seq = {}, audit_head = '{hash}' WHERE namespace = 'crm' AND run_key = '{key}'",
        entry.seq
    ))
    .await;
}

async fn timeline_answers_the_four_questions(backend: Backend) {
    let mock = crate::target::MockTarget::start().await;
    mock.set_default(crate::target::Behaviour::Respond {
        status: 201,
        headers: vec![("x-external-id".into(), "msg_42".into())],
        body: "{}".into(),
    });
    let base = mock.base_url();
    let app = TestApp::spawn_with(backend, move |config| {
        let parsed: oncegate::config::Config = toml::from_str(&format!(
            "[[targets]]\nname = \"mail\"\nbase_url = \"{base}\"\n\
             [[operations]]\nname = \"send_email\"\ngate = \"none\"\n"
        ))
        .unwrap();
        config.targets = parsed.targets;
        config.operations = parsed.operations;
    })
    .await;
    let (_, claim) = app
        .claim(json!({ "namespace": "crm", "key": "draft:7", "payload": { "n": 7 } }))
        .await;
    let body = json!({ "namespace": "crm", "key": "draft:7", "lease": claim["lease"],
        "effects": [{ "operation": "send_email", "effect_type": "send_email", "target": "mail",
                      "path": "/send", "body": { "to": "x" }, "external_id": { "header": "x-external-id" } }] });
    let (status, _) = app
        .post("/v1/runs/commit", Some(&app.workflow), &body)
        .await;
    assert_eq!(status, 200);
    app.dispatcher().dispatch_once().await.unwrap();
    append_event(&app.db, &app.store, "draft:7", "output_recorded", "n8n",
        json!({ "model_provider": "anthropic", "model": "claude-x", "model_revision": "2025-01", "valid": true })).await;
    append_event(
        &app.db,
        &app.store,
        "draft:7",
        "approval_granted",
        "alice",
        json!({ "approver": "alice", "decision": "approve" }),
    )
    .await;

    let get = |token: String| {
        let req = app
            .client
            .get(format!("{}/v1/runs/timeline", app.base))
            .query(&[("namespace", "crm"), ("key", "draft:7")])
            .bearer_auth(token);
        async move {
            let resp = req.send().await.unwrap();
            (
                resp.status().as_u16(),
                resp.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let (status, t) = get(app.operator.clone()).await;
    assert_eq!(status, 200, "{t}");
    assert_eq!(t["processed"]["known"], true);
    assert_eq!(t["processed"]["state"], "completed");
    let states: Vec<&str> = t["processed"]["states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["to"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["processing", "approved", "completed"]);
    assert_eq!(t["sent"]["any_sent"], true);
    assert_eq!(t["sent"]["effects"][0]["external_ref"], "msg_42");
    assert_eq!(t["sent"]["effects"][0]["attempts"][0]["class"], "success");
    assert_eq!(t["approvals"][0]["approver"], "alice");
    assert_eq!(t["approvals"][0]["decision"], "approve");
    assert_eq!(t["model_outputs"][0]["model"], "claude-x");
    assert_eq!(t["model_outputs"][0]["provider"], "anthropic");
    assert_eq!(t["chain"]["ok"], true, "{t}");
    assert_eq!(t["events"].as_array().unwrap().len(), 5);

    app.db.exec("UPDATE audit_events SET detail = '{\"approver\":\"mallory\",\"decision\":\"approve\"}' WHERE run_key = 'draft:7' AND kind = 'approval_granted'").await;
    let (_, t) = get(app.workflow.clone()).await;
    assert_eq!(t["chain"]["ok"], false);
    assert!(
        t["chain"]["problem"].as_str().unwrap().contains("seq=5"),
        "{t}"
    );
    assert_eq!(t["events"][3]["chain_ok"], true);
    assert_eq!(t["events"][4]["chain_ok"], false);

    let (status, _) = get(app.approver.clone()).await;
    assert_eq!(status, 403);
    let missing = app
        .client
        .get(format!(
            "{}/v1/runs/timeline?namespace=crm&key=nope",
            app.base
        ))
        .bearer_auth(&app.operator)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    let doc: Value = app
        .client
        .get(format!("{}/openapi.json", app.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["paths"]["/v1/runs/timeline"]["get"].is_object());
    app.stop().await;
}

/// `serve`'s periodic task writes a checkpoint at start and shows it (and
/// the latest verification) as metrics.
async fn serve_checkpoints_and_reports_metrics(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| {
        c.audit.checkpoint_interval_secs = 3600;
        c.audit.verify_interval_secs = 0;
        c.retention.enabled = false;
    })
    .await;
    finished_run(&app.store, "crm", "k", json!({})).await;
    let failed = oncegate::audit::Verification {
        id: "v1".into(),
        started_at: 1_000,
        finished_at: 2_000,
        namespace: None,
        chains: 9,
        failures: 2,
        first_failure: Some("runs namespace=crm key=x: missing".into()),
        checkpoint_id: None,
    };
    app.store.record_verification(&failed).await.unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let jobs = oncegate::app::spawn_maintenance(&app.state, shutdown.clone()).unwrap();
    let text = crate::harness::eventually(
        "checkpoint metrics",
        std::time::Duration::from_secs(20),
        || async {
            let text = app
                .client
                .get(format!("{}/metrics", app.base))
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            text.lines()
                .any(|l| {
                    l.starts_with("oncegate_audit_checkpoint_last_timestamp_seconds ")
                        && !l.ends_with(" 0")
                })
                .then_some(text)
        },
    )
    .await;
    assert!(text.contains("oncegate_audit_verify_failures 2"), "{text}");
    assert!(
        text.contains("oncegate_audit_checkpoint_anomalies 0"),
        "{text}"
    );
    let c = app.store.latest_checkpoint().await.unwrap().unwrap();
    assert_eq!((c.reason.as_str(), c.chain_count), ("periodic", 1));
    shutdown.cancel();
    jobs.await.unwrap();
    app.stop().await;
}

on_both_backends!(
    serve_checkpoints_and_reports_metrics,
    verify_names_the_first_bad_row,
    checkpoint_tampering_is_found,
    the_cli_exits_non_zero_on_a_broken_log,
    timeline_answers_the_four_questions,
);

/// Measures checkpoint and verify cost (run by hand:
/// `cargo test --test it audit_scale -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement, not a check"]
async fn audit_scale() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let db = TestDb::new(backend).await;
        let store = db.store(Arc::new(SystemClock), true).await;
        let n = 20_000;
        let tasks: Vec<_> = (0..8)
            .map(|w| {
                let store = store.clone();
                tokio::spawn(async move {
                    for i in (w..n).step_by(8) {
                        finished_run(&store, "crm", &format!("scale:{i}"), json!({ "i": i })).await;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let time = std::time::Instant::now();
        let first = write_checkpoint(
            store.as_ref(),
            CheckpointReason::Manual,
            &[],
            SystemClock.now_ms(),
        )
        .await
        .unwrap();
        let t_first = time.elapsed();
        let time = std::time::Instant::now();
        write_checkpoint(
            store.as_ref(),
            CheckpointReason::Manual,
            &[],
            SystemClock.now_ms(),
        )
        .await
        .unwrap();
        let t_second = time.elapsed();
        let time = std::time::Instant::now();
        let report = verify(store.as_ref(), None).await.unwrap();
        let t_verify = time.elapsed();
        assert!(report.ok());
        eprintln!(
            "{backend:?}: {} chains, {} events: first checkpoint {t_first:?} ({} heads written), \
             unchanged checkpoint {t_second:?}, verify {t_verify:?}",
            report.chains, report.events, first.checkpoint.changed
        );
    }
}
