//! Backups under load: every claim acknowledged before the backup started
//! is in the copy, and the copy passes audit verify. SQLite through
//! `oncegate backup` (`VACUUM INTO`); PostgreSQL, which `oncegate backup`
//! refuses, through the documented pg_dump procedure.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oncegate::audit::{verify, write_checkpoint, CheckpointReason};
use oncegate::clock::{Clock, SystemClock};
use oncegate::db::{self as store, SharedStore, StoreError, StoreOptions};
use oncegate::ledger::{
    ClaimOutcome, ClaimRequest, IdempotencyKey, Namespace, PayloadHash, RunMetadata,
};
use sqlx::Connection;

use crate::harness::{eventually, pg_admin_url, Backend, TestDb};

/// Claims keys from four tasks until `stop`; each key is recorded once its
/// claim was acknowledged.
fn load(
    store: &SharedStore,
    stop: &Arc<AtomicBool>,
    acked: &Arc<Mutex<Vec<String>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..4)
        .map(|w| {
            let (store, stop, acked) = (store.clone(), stop.clone(), acked.clone());
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("load:{w}:{i}");
                    let req = ClaimRequest {
                        namespace: Namespace::parse("crm").unwrap(),
                        key: IdempotencyKey::parse(key.clone()).unwrap(),
                        business_key: None,
                        payload_hash: PayloadHash::of_bytes(key.as_bytes()),
                        lease_ms: 60_000,
                        metadata: RunMetadata::default(),
                        claimed_by: "load".into(),
                    };
                    let outcome = store.claim(&req).await.unwrap();
                    assert!(matches!(outcome, ClaimOutcome::Claimed { .. }));
                    acked.lock().unwrap().push(key);
                    i += 1;
                }
            })
        })
        .collect()
}

async fn open(url: &str) -> SharedStore {
    let options = StoreOptions {
        max_connections: 2,
        busy_timeout_ms: 5_000,
        clock: Arc::new(SystemClock),
        use_db_clock: true,
        redaction: Default::default(),
        ledger: Default::default(),
    };
    let s = store::connect(url, options).await.unwrap();
    s.migrate().await.unwrap();
    s
}

/// Runs `take` (the backup) under load; returns the keys acknowledged
/// before it started and how many were acknowledged while it ran.
async fn under_load<F: std::future::Future<Output = ()>>(
    store: &SharedStore,
    take: F,
) -> (Vec<String>, usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let workers = load(store, &stop, &acked);
    eventually("claims under way", Duration::from_secs(30), || {
        let n = acked.lock().unwrap().len();
        async move { (n >= 100).then_some(()) }
    })
    .await;
    write_checkpoint(
        store.as_ref(),
        CheckpointReason::Manual,
        &[],
        SystemClock.now_ms(),
    )
    .await
    .unwrap();
    let before = acked.lock().unwrap().clone();
    take.await;
    let during = acked.lock().unwrap().len() - before.len();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    (before, during)
}

async fn check_restored(restored: &SharedStore, before: &[String]) {
    let report = verify(restored.as_ref(), None).await.unwrap();
    assert!(report.ok(), "{:?}", report.findings);
    assert_eq!(report.checkpoint_id, Some(1));
    for key in before {
        let run = restored
            .get_run(
                &Namespace::parse("crm").unwrap(),
                &IdempotencyKey::parse(key.clone()).unwrap(),
            )
            .await
            .unwrap();
        assert!(
            run.is_some(),
            "{key} was acknowledged before the backup but is missing"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_backup_under_load_restores_and_verifies() {
    let db = TestDb::new(Backend::Sqlite).await;
    let store = db.store(Arc::new(SystemClock), true).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("copy.db");
    let (before, during) = under_load(&store, async {
        store.backup(&file).await.unwrap();
    })
    .await;
    eprintln!(
        "{} claims acknowledged before the backup, {during} while it ran",
        before.len()
    );
    let again = store.backup(&file).await;
    assert!(matches!(again, Err(StoreError::Backup(m)) if m.contains("already exists")));
    store.close().await;
    let restored = open(&format!("sqlite://{}", file.display())).await;
    check_restored(&restored, &before).await;
    restored.close().await;
}

fn run(program: &str, args: &[&str]) {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_backup_is_refused_and_the_documented_procedure_restores() {
    let db = TestDb::new(Backend::Postgres).await;
    let store = db.store(Arc::new(SystemClock), true).await;
    let refused = store.backup(std::path::Path::new("/tmp/never.db")).await;
    assert!(
        matches!(&refused, Err(StoreError::Unsupported(p)) if p.contains("pg_dump --format=custom")),
        "{refused:?}"
    );
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(["backup", "/tmp/never.db"])
        .env("ONCEGATE_DATABASE_URL", &db.url)
        .env_remove("ONCEGATE_CONFIG")
        .output()
        .unwrap();
    assert!(!cli.status.success());
    assert!(String::from_utf8_lossy(&cli.stdout).contains("pg_restore"));

    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("oncegate.dump");
    let dump_arg = format!("--file={}", dump.display());
    let url = db.url.clone();
    let (before, _) = under_load(&store, async {
        let (url, dump_arg) = (url.clone(), dump_arg.clone());
        tokio::task::spawn_blocking(move || {
            run(
                "pg_dump",
                &["--format=custom", "--no-owner", &dump_arg, &url],
            )
        })
        .await
        .unwrap();
    })
    .await;
    store.close().await;

    let name = format!("og_restore_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(&pg_admin_url()).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    let restored_url = format!("{}/{name}", pg_admin_url().rsplit_once('/').unwrap().0);
    let target = format!("--dbname={restored_url}");
    let dump_path = dump.display().to_string();
    tokio::task::spawn_blocking(move || run("pg_restore", &["--no-owner", &target, &dump_path]))
        .await
        .unwrap();
    let restored = open(&restored_url).await;
    check_restored(&restored, &before).await;
    restored.close().await;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();
}
