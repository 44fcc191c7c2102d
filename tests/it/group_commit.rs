//! SQLite's group-commit writer on its own: batching, one failing (or
//! panicking) job rolled back alone, answers only after the batch's
//! commit, statements between batches, shutdown.
//!
//! Jobs run on the writer's thread, one after another; a job that blocks
//! there (on a channel the test holds) keeps its batch open, so the jobs
//! queued meanwhile all join that batch.

use std::str::FromStr;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use oncegate::clock::SystemClock;
use oncegate::db::exec::Args;
use oncegate::db::sql::{Dialect, Statements};
use oncegate::db::sqlite::group_commit::{
    GroupCommit, GroupCommitOptions, GroupCommitStats, WriterSettings,
};
use oncegate::db::{Finish, Job, StoreError};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::Connection;

struct Fixture {
    gc: Arc<GroupCommit>,
    url: String,
    _dir: tempfile::TempDir,
}

async fn fixture(max_batch: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gc.db");
    let url = format!("sqlite://{}", path.display());
    let options = SqliteConnectOptions::from_str(&url)
        .unwrap()
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full);
    let mut setup = sqlx::SqliteConnection::connect_with(&options)
        .await
        .unwrap();
    sqlx::query("CREATE TABLE t (x INTEGER PRIMARY KEY)")
        .execute(&mut setup)
        .await
        .unwrap();
    sqlx::query("INSERT INTO t VALUES (0)")
        .execute(&mut setup)
        .await
        .unwrap();
    setup.close().await.unwrap();
    let group = GroupCommitOptions {
        max_batch,
        max_wait: Duration::ZERO,
    };
    let settings = WriterSettings {
        path,
        busy_timeout: Duration::from_millis(5_000),
        statements: Arc::new(Statements::new(Dialect::Sqlite)),
        clock: Arc::new(SystemClock),
    };
    let gc = Arc::new(GroupCommit::start(settings, group).await.unwrap());
    Fixture { gc, url, _dir: dir }
}

impl Fixture {
    /// The rows a fresh connection sees (only what was committed).
    async fn rows(&self) -> Vec<i64> {
        let mut c = sqlx::SqliteConnection::connect(&self.url).await.unwrap();
        let rows = sqlx::query_scalar("SELECT x FROM t ORDER BY x")
            .fetch_all(&mut c)
            .await
            .unwrap();
        c.close().await.unwrap();
        rows
    }
}

/// A job that inserts each value in turn and commits; the first failing
/// insert ends it with that error (which rolls the job back).
fn inserts(values: Vec<i64>) -> Job<()> {
    Box::new(move |tx| {
        Box::pin(async move {
            for x in values {
                tx.execute("INSERT INTO t VALUES ($1)", Args::new().bind(x))
                    .await?;
            }
            Ok(Finish::Commit(()))
        })
    })
}

/// A job that inserts `values`, says it is running, then holds the writer
/// (and so its batch) until `go` is sent.
fn holding(values: Vec<i64>) -> (Job<()>, mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (running_tx, running) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let job: Job<()> = Box::new(move |tx| {
        Box::pin(async move {
            for x in values {
                tx.execute("INSERT INTO t VALUES ($1)", Args::new().bind(x))
                    .await?;
            }
            running_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            Ok(Finish::Commit(()))
        })
    });
    (job, running, go)
}

/// Starts a job that holds the writer and waits until it runs.
async fn hold(
    f: &Fixture,
    values: Vec<i64>,
) -> (
    tokio::task::JoinHandle<Result<(), StoreError>>,
    mpsc::Sender<()>,
) {
    let (job, running, go) = holding(values);
    let gc = f.gc.clone();
    let handle = tokio::spawn(async move { gc.write(job).await });
    tokio::task::spawn_blocking(move || running.recv().unwrap())
        .await
        .unwrap();
    (handle, go)
}

/// Queues jobs behind the one holding the writer, in order: each is
/// polled once (which queues it) before it is spawned.
async fn queue_jobs(
    gc: &Arc<GroupCommit>,
    jobs: Vec<Job<()>>,
) -> Vec<tokio::task::JoinHandle<Result<(), StoreError>>> {
    let mut handles = Vec::new();
    for job in jobs {
        let gc = gc.clone();
        let mut fut = Box::pin(async move { gc.write(job).await });
        assert!(futures_util::poll!(&mut fut).is_pending());
        handles.push(tokio::spawn(fut));
    }
    handles
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_job_is_rolled_back_alone_and_its_batch_commits_once() {
    let f = fixture(64).await;
    let (first, go) = hold(&f, vec![100]).await;
    // Job 5 writes 55, then collides with the existing row 0.
    let jobs = (1..=10)
        .map(|i| inserts(if i == 5 { vec![55, 0] } else { vec![i] }))
        .collect();
    let handles = queue_jobs(&f.gc, jobs).await;
    go.send(()).unwrap();
    first.await.unwrap().unwrap();
    let mut failed = Vec::new();
    for (i, handle) in handles.into_iter().enumerate() {
        if let Err(err) = handle.await.unwrap() {
            assert!(err.is_unique_violation(), "job {}: {err:?}", i + 1);
            failed.push(i + 1);
        }
    }
    assert_eq!(failed, vec![5]);
    assert_eq!(f.rows().await, vec![0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 100]);
    assert_eq!(
        f.gc.stats(),
        GroupCommitStats {
            batches: 1,
            jobs: 11,
            wal_restarts: 0,
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_job_is_rolled_back_alone() {
    let f = fixture(64).await;
    let (first, go) = hold(&f, vec![100]).await;
    let panics: Job<()> = Box::new(|tx| {
        Box::pin(async move {
            tx.execute("INSERT INTO t VALUES (7)", Args::new()).await?;
            panic!("a bug in a write transaction");
        })
    });
    let handles = queue_jobs(&f.gc, vec![inserts(vec![1]), panics, inserts(vec![2])]).await;
    go.send(()).unwrap();
    first.await.unwrap().unwrap();
    let results: Vec<_> = futures_util::future::join_all(handles)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(results[0].is_ok() && results[2].is_ok());
    assert!(matches!(results[1], Err(StoreError::WritePanicked)));
    assert_eq!(f.rows().await, vec![0, 1, 2, 100]);
    assert_eq!(f.gc.stats().batches, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_hold_at_most_max_batch_jobs() {
    let f = fixture(4).await;
    let (first, go) = hold(&f, vec![]).await;
    let handles = queue_jobs(&f.gc, (1..=10).map(|i| inserts(vec![i])).collect()).await;
    go.send(()).unwrap();
    first.await.unwrap().unwrap();
    for handle in handles {
        handle.await.unwrap().unwrap();
    }
    assert_eq!(f.rows().await.len(), 11);
    // 1 + 3, then 4, then 3.
    assert_eq!(
        f.gc.stats(),
        GroupCommitStats {
            batches: 3,
            jobs: 11,
            wal_restarts: 0,
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_answered_only_when_its_whole_batch_is_committed() {
    let f = fixture(64).await;
    let (first, go_first) = hold(&f, vec![1]).await;
    // A second job queues, then holds the writer until told to finish.
    let (second, second_running, go_second) = holding(vec![2]);
    let mut second = queue_jobs(&f.gc, vec![second]).await;
    go_first.send(()).unwrap();
    tokio::task::spawn_blocking(move || second_running.recv().unwrap())
        .await
        .unwrap();
    // The batch is still open: the first job's write is not durable, so
    // its caller has no answer and nobody else sees the row.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!first.is_finished());
    assert_eq!(f.rows().await, vec![0]);
    go_second.send(()).unwrap();
    first.await.unwrap().unwrap();
    second.pop().unwrap().await.unwrap().unwrap();
    assert_eq!(f.rows().await, vec![0, 1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_finishes_queued_jobs_then_refuses_new_ones() {
    let f = fixture(64).await;
    let (first, go) = hold(&f, vec![]).await;
    let handles = queue_jobs(&f.gc, vec![inserts(vec![1]), inserts(vec![2])]).await;
    let gc = f.gc.clone();
    let mut closing = Box::pin(async move { gc.close().await });
    assert!(futures_util::poll!(&mut closing).is_pending());
    let closing = tokio::spawn(closing);
    go.send(()).unwrap();
    first.await.unwrap().unwrap();
    for handle in handles {
        handle.await.unwrap().unwrap();
    }
    closing.await.unwrap();
    assert!(matches!(
        f.gc.write(inserts(vec![3])).await,
        Err(StoreError::WriterClosed)
    ));
    assert_eq!(f.rows().await, vec![0, 1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_between_batches_waits_for_the_open_batch_and_outlives_it() {
    let f = fixture(64).await;
    // A job holds the writer, so its batch is open: the statement waits.
    let (held, go) = hold(&f, vec![]).await;
    let gc = f.gc.clone();
    let between = tokio::spawn(async move { gc.between_batches("PRAGMA query_only = ON").await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!between.is_finished(), "waits for the open batch");
    go.send(()).unwrap();
    held.await.unwrap().unwrap();
    between.await.unwrap().unwrap();
    let refused = f.gc.write(inserts(vec![1])).await.unwrap_err();
    assert!(
        refused.is_unavailable(),
        "read-only is unavailable: {refused:?}"
    );
    assert_eq!(
        f.gc.between_batches("PRAGMA query_only").await.unwrap(),
        Some(1),
        "the setting is the connection's and outlives the batch"
    );
    f.gc.between_batches("PRAGMA query_only = OFF")
        .await
        .unwrap();
    f.gc.write(inserts(vec![2])).await.unwrap();
    assert_eq!(f.rows().await, vec![0, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writers_connection_is_durable_wal_with_full_sync() {
    let f = fixture(64).await;
    let setting = |sql: &'static str| {
        let gc = f.gc.clone();
        async move { gc.between_batches(sql).await.unwrap() }
    };
    assert_eq!(
        setting("SELECT journal_mode = 'wal' FROM pragma_journal_mode").await,
        Some(1)
    );
    assert_eq!(
        setting("PRAGMA synchronous").await,
        Some(2),
        "synchronous=FULL"
    );
    assert_eq!(setting("PRAGMA foreign_keys").await, Some(1));
    assert_eq!(setting("PRAGMA busy_timeout").await, Some(5_000));
}

/// Under writes that never pause, with readers on the WAL all along, the
/// WAL still starts over: SQLite restarts it only once every frame is in
/// the database file, which a checkpointer racing the writer never reaches,
/// so without the writer's restart it grows by every page written (the
/// claim benchmark's reached half a gigabyte in eight seconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_starts_over_under_sustained_writes_and_reads() {
    let f = fixture(64).await;
    let create: Job<()> = Box::new(|tx| {
        Box::pin(async move {
            tx.execute(
                "CREATE TABLE big (x INTEGER PRIMARY KEY, b BLOB)",
                Args::new(),
            )
            .await?;
            Ok(Finish::Commit(()))
        })
    });
    f.gc.write(create).await.unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (url, stop) = (f.url.clone(), stop.clone());
        tokio::spawn(async move {
            let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
            let mut reads = 0i64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Point reads, as the claim path's: each holds the WAL
                // snapshot it began on for a moment.
                let _: Option<i64> = sqlx::query_scalar("SELECT length(b) FROM big WHERE x = $1")
                    .bind(reads % 64 * 1_000 + reads % 200)
                    .fetch_optional(&mut c)
                    .await
                    .unwrap();
                reads += 1;
            }
            c.close().await.unwrap();
            reads
        })
    };
    // 64 writers, each row two pages and more: ~100 MiB through the WAL.
    let writers = (0..64_i64).map(|w| {
        let gc = f.gc.clone();
        tokio::spawn(async move {
            for i in 0..200_i64 {
                let x = w * 1_000 + i;
                let job: Job<()> = Box::new(move |tx| {
                    Box::pin(async move {
                        tx.execute(
                            "INSERT INTO big VALUES ($1, randomblob(8000))",
                            Args::new().bind(x),
                        )
                        .await?;
                        Ok(Finish::Commit(()))
                    })
                });
                gc.write(job).await.unwrap();
            }
        })
    });
    for writer in futures_util::future::join_all(writers).await {
        writer.unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.await.unwrap();
    let wal = std::fs::metadata(format!("{}-wal", f.url.trim_start_matches("sqlite://")))
        .unwrap()
        .len();
    let stats = f.gc.stats();
    println!("{stats:?}, {reads} reads alongside, WAL {wal} bytes");
    assert!(stats.wal_restarts > 0, "{stats:?}");
    // 16 MiB is where a restart is asked for; the checkpointer looks every
    // 50 ms, and a restart can give way to a reader: slack above it, and
    // still well under the ~150 MiB that pass through the WAL.
    assert!(wal < 64 << 20, "the WAL grew to {wal} bytes");
}
