//! Audit checkpoints over more moved heads than one staged chunk, on both
//! backends: the heads are staged ahead of the checkpoint row, only the
//! committing attempt's heads enter the head list, and every staging of
//! its id or an earlier one is gone once it commits.

use std::sync::Arc;

use futures_util::future::join_all;
use oncegate::audit::checkpoint::{ChainHead, Checkpoint, CheckpointWrite, STAGE_CHUNK};
use oncegate::audit::{verify, write_checkpoint, CheckpointReason};
use oncegate::clock::{Clock, SystemClock};
use oncegate::db::SharedStore;
use serde_json::json;

use crate::audit::finished_run;
use crate::harness::{on_both_backends, Backend, TestDb};

async fn checkpoint(store: &SharedStore) -> Checkpoint {
    let now = SystemClock.now_ms();
    let report = write_checkpoint(store.as_ref(), CheckpointReason::Manual, &[], now)
        .await
        .unwrap();
    assert_eq!(report.checkpoint.anomalies, 0, "{:?}", report.anomalies);
    report.checkpoint
}

/// `n` finished runs `{prefix}00000`, … in `crm`, 64 at a time.
async fn finished_runs(store: &SharedStore, prefix: &str, n: usize) {
    let keys: Vec<String> = (0..n).map(|i| format!("{prefix}{i:05}")).collect();
    for batch in keys.chunks(64) {
        join_all(
            batch
                .iter()
                .map(|key| finished_run(store, "crm", key, json!({ "key": key }))),
        )
        .await;
    }
}

/// Two chunks and a part of a third, with a crashed attempt's leftovers.
async fn checkpoints_stage_moved_heads_in_chunks(backend: Backend) {
    let db = TestDb::new(backend).await;
    let store = db.store(Arc::new(SystemClock), true).await;
    let n = 2 * STAGE_CHUNK + 37;
    finished_runs(&store, "k", n).await;
    // A preparation of checkpoint 1 that stopped half-way.
    db.exec(
        "INSERT INTO audit_heads_staged (checkpoint_id, attempt, namespace, run_key, seq, head) \
         VALUES (1, 'crashed', 'crm', 'ghost', 9, 'sha256:00')",
    )
    .await;

    let first = checkpoint(&store).await;
    assert_eq!((first.chain_count, first.changed), (n as i64, n as i64));
    assert_eq!(db.count("SELECT COUNT(*) FROM audit_heads").await, n as i64);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM audit_heads WHERE run_key = 'ghost'")
            .await,
        0
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM audit_heads_staged").await, 0);
    let report = verify(store.as_ref(), None).await.unwrap();
    assert!(report.ok(), "{:?}", report.findings);

    // A chunk and a half of new chains.
    let moved = STAGE_CHUNK + STAGE_CHUNK / 2;
    finished_runs(&store, "m", moved).await;
    let second = checkpoint(&store).await;
    assert_eq!(second.changed, moved as i64);
    assert_eq!(second.chain_count, (n + moved) as i64);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM audit_heads WHERE checkpoint_id = 2")
            .await,
        moved as i64
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM audit_heads_staged").await, 0);
    let report = verify(store.as_ref(), None).await.unwrap();
    assert!(report.ok(), "{:?}", report.findings);
    assert_eq!(report.chains, (n + moved) as i64);
}

fn head(key: &str, seq: i64) -> ChainHead {
    ChainHead {
        namespace: "crm".into(),
        key: key.into(),
        seq,
        head: format!("sha256:{key}{seq}"),
    }
}

fn write(id: i64, attempt: &str) -> CheckpointWrite {
    let mut checkpoint = Checkpoint {
        id,
        created_at: SystemClock.now_ms(),
        chain_count: 1,
        digest: "sha256:00".into(),
        changed: 1,
        removed: 0,
        anomalies: 0,
        reason: "manual".into(),
        prev_hash: None,
        hash: String::new(),
    };
    checkpoint.hash = checkpoint.compute_hash();
    CheckpointWrite {
        checkpoint,
        attempt: attempt.into(),
        removals: Vec::new(),
    }
}

/// Two attempts at checkpoint 1: the one that commits brings its own heads
/// only; the other then finds the id taken and writes nothing.
async fn only_the_committing_attempt_moves_its_heads(backend: Backend) {
    let db = TestDb::new(backend).await;
    let store = db.store(Arc::new(SystemClock), true).await;
    store.stage_heads(1, "won", &[head("a", 2)]).await.unwrap();
    store
        .stage_heads(1, "lost", &[head("a", 3), head("b", 1)])
        .await
        .unwrap();
    assert!(store.commit_checkpoint(&write(1, "won")).await.unwrap());
    let heads = db
        .texts("SELECT run_key || ':' || seq FROM audit_heads ORDER BY run_key")
        .await;
    assert_eq!(heads, ["a:2"]);
    assert_eq!(db.count("SELECT COUNT(*) FROM audit_heads_staged").await, 0);

    store.stage_heads(1, "late", &[head("b", 1)]).await.unwrap();
    assert!(!store.commit_checkpoint(&write(1, "late")).await.unwrap());
    assert_eq!(db.count("SELECT COUNT(*) FROM audit_heads").await, 1);
    // The next checkpoint to commit takes the late attempt's rows away.
    store.stage_heads(2, "next", &[head("a", 4)]).await.unwrap();
    assert!(store.commit_checkpoint(&write(2, "next")).await.unwrap());
    assert_eq!(db.count("SELECT COUNT(*) FROM audit_heads_staged").await, 0);
    let heads = db
        .texts("SELECT run_key || ':' || seq FROM audit_heads ORDER BY run_key")
        .await;
    assert_eq!(heads, ["a:4"]);
}

on_both_backends!(
    checkpoints_stage_moved_heads_in_chunks,
    only_the_committing_attempt_moves_its_heads,
);
