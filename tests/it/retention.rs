//! Retention on both backends: the sweeper archives and slims only
//! terminal runs (never processing, awaiting_human or approved ones), a
//! late duplicate within the tombstone window is answered as a duplicate,
//! and past it the key is new again; audit verify passes throughout.

use std::sync::Arc;

use oncegate::audit::{verify, write_checkpoint, CheckpointReason};
use oncegate::clock::{Clock, ManualClock};
use oncegate::db::SharedStore;
use oncegate::ledger::{
    ClaimOutcome, ClaimRequest, IdempotencyKey, Namespace, PayloadHash, RunMetadata,
};
use oncegate::retention::{sweep, RetentionConfig, DAY_MS};
use serde_json::{json, Value};

use crate::audit::finished_run;
use crate::harness::{on_both_backends, queue_effect, Backend, TestDb};

const START: i64 = 1_700_000_000_000;

fn claim_req(key: &str) -> ClaimRequest {
    ClaimRequest {
        namespace: Namespace::parse("crm").unwrap(),
        key: IdempotencyKey::parse(key).unwrap(),
        business_key: None,
        payload_hash: PayloadHash::of_bytes(key.as_bytes()),
        lease_ms: 400 * DAY_MS,
        metadata: RunMetadata::default(),
        claimed_by: "test".into(),
    }
}

/// A run's columns and the count of its rows elsewhere, as text.
async fn snapshot(db: &TestDb, key: &str) -> String {
    let mut out = String::new();
    for table in ["effects", "audit_events", "dead_letters"] {
        let n = db
            .count(&format!(
                "SELECT COUNT(*) FROM {table} WHERE namespace = 'crm' AND run_key = '{key}'"
            ))
            .await;
        out.push_str(&format!("{table}={n};"));
    }
    let row = db
        .texts(&format!(
            "SELECT state || '|' || version || '|' || COALESCE(result, '') || '|' || audit_seq || '|' || \
             COALESCE(audit_head, '') || '|' || updated_at || '|' || COALESCE(CAST(archived_at AS TEXT), '-') \
             FROM runs WHERE namespace = 'crm' AND run_key = '{key}'"
        ))
        .await;
    out.push_str(&row.join(","));
    out
}

async fn run_state(store: &SharedStore, key: &str) -> Option<oncegate::ledger::Run> {
    store
        .get_run(
            &Namespace::parse("crm").unwrap(),
            &IdempotencyKey::parse(key).unwrap(),
        )
        .await
        .unwrap()
}

async fn archive_slim_and_delete_tombstones(backend: Backend) {
    let db = TestDb::new(backend).await;
    let clock = Arc::new(ManualClock::new(START));
    let store = db.manual_store(clock.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = RetentionConfig {
        archive_dir: dir.path().join("archive"),
        batch_size: 2,
        ..RetentionConfig::default()
    };
    let redactor = oncegate::audit::Redactor::none();

    finished_run(&store, "crm", "done", json!({ "refund": "re_1" })).await;
    finished_run(&store, "crm", "done2", json!({})).await;
    for key in ["processing", "awaiting", "failed"] {
        let ClaimOutcome::Claimed { .. } = store.claim(&claim_req(key)).await.unwrap() else {
            panic!()
        };
    }
    db.exec(
        "UPDATE runs SET state = 'awaiting_human', lease_owner = NULL WHERE run_key = 'awaiting'",
    )
    .await;
    db.exec("UPDATE runs SET state = 'failed_terminal', lease_owner = NULL, reason = 'no' WHERE run_key = 'failed'").await;
    queue_effect(&store, "approved", "mail", "http://127.0.0.1:9/x".into()).await;
    // A completed run with an unresolved dead letter (a quarantined
    // conflicting delivery) is kept for the operator.
    finished_run(&store, "crm", "conflicted", json!({})).await;
    db.exec(
        "INSERT INTO dead_letters (id, namespace, run_key, class, component, detail, created_at) \
             VALUES ('dl1', 'crm', 'conflicted', 'payload_conflict', 'ingress', '{}', 0)",
    )
    .await;
    let active: Vec<String> = {
        let mut v = Vec::new();
        for key in ["processing", "awaiting", "approved", "conflicted"] {
            v.push(snapshot(&db, key).await);
        }
        v
    };
    write_checkpoint(
        store.as_ref(),
        CheckpointReason::Manual,
        &[],
        clock.now_ms(),
    )
    .await
    .unwrap();

    // Nothing is old enough yet.
    let r = sweep(store.as_ref(), &config, &redactor, clock.now_ms(), false)
        .await
        .unwrap();
    assert_eq!((r.archived, r.slimmed), (0, 0));

    clock.advance_ms(91 * DAY_MS);
    let dry = sweep(store.as_ref(), &config, &redactor, clock.now_ms(), true)
        .await
        .unwrap();
    assert_eq!((dry.archived, dry.slimmed), (3, 0));
    assert!(run_state(&store, "done")
        .await
        .unwrap()
        .archived_at
        .is_none());

    let r = sweep(store.as_ref(), &config, &redactor, clock.now_ms(), false)
        .await
        .unwrap();
    assert_eq!((r.archived, r.slimmed, r.files.len()), (3, 3, 2), "{r:?}");
    for (key, before) in ["processing", "awaiting", "approved", "conflicted"]
        .iter()
        .zip(&active)
    {
        assert_eq!(&snapshot(&db, key).await, before, "{key} was touched");
    }
    let tomb = run_state(&store, "done").await.unwrap();
    assert!(tomb.archived_at.is_some());
    assert_eq!(
        (tomb.result.clone(), tomb.state.as_str()),
        (None, "completed")
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM audit_events WHERE run_key = 'done'")
            .await,
        0
    );

    // The archive holds each run with its rows, and its chains verify.
    let mut lines = Vec::new();
    for file in &r.files {
        let text = std::fs::read_to_string(file).unwrap();
        lines.extend(
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
        let ok = std::process::Command::new(env!("CARGO_BIN_EXE_oncegate"))
            .args(["audit", "verify-archive", file])
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "{}",
            String::from_utf8_lossy(&ok.stdout)
        );
    }
    let done = lines.iter().find(|l| l["key"] == "done").unwrap();
    assert_eq!(done["audit_events"].as_array().unwrap().len(), 3);
    assert!(done["run"]["result"].as_str().unwrap().contains("re_1"));
    assert!(verify(store.as_ref(), None).await.unwrap().ok());

    // Within the tombstone window a late duplicate is a duplicate.
    let dup = store.claim(&claim_req("done")).await.unwrap();
    assert!(
        matches!(&dup, ClaimOutcome::Duplicate(run) if run.result.is_none()),
        "{dup:?}"
    );
    let mut other = claim_req("done");
    other.payload_hash = PayloadHash::of_bytes(b"different");
    assert!(matches!(
        store.claim(&other).await.unwrap(),
        ClaimOutcome::Conflict(_)
    ));
    assert!(matches!(
        store.claim(&claim_req("failed")).await.unwrap(),
        ClaimOutcome::Finished(_)
    ));

    // Past it, tombstones go with a checkpoint, verify stays clean, and
    // the key is new again.
    clock.advance_ms(310 * DAY_MS);
    let r = sweep(store.as_ref(), &config, &redactor, clock.now_ms(), false)
        .await
        .unwrap();
    assert_eq!(r.tombstones_deleted, 3, "{r:?}");
    assert!(run_state(&store, "done").await.is_none());
    let checkpoints = store.checkpoints().await.unwrap();
    let removed: i64 = checkpoints
        .iter()
        .filter(|c| c.reason == "retention")
        .map(|c| c.removed)
        .sum();
    assert_eq!(removed, 3);
    assert_eq!(checkpoints.last().unwrap().reason, "retention");
    let report = verify(store.as_ref(), None).await.unwrap();
    assert!(report.ok(), "{:?}", report.findings);
    for key in ["processing", "awaiting", "approved", "conflicted"] {
        assert!(run_state(&store, key).await.is_some(), "{key} was deleted");
    }
    let fresh = store.claim(&claim_req("done")).await.unwrap();
    assert!(
        matches!(&fresh, ClaimOutcome::Claimed { run, reclaimed_from: None, .. } if run.attempts == 1),
        "{fresh:?}"
    );
}

on_both_backends!(archive_slim_and_delete_tombstones);
