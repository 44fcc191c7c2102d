//! SQLite's group-commit executor on its own: batching, one failing job
//! rolled back alone, answers only after the batch's commit, shutdown.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use oncegate::db::sqlite::group_commit::{GroupCommit, GroupCommitOptions, GroupCommitStats};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::Connection;

struct Fixture {
    gc: Arc<GroupCommit>,
    url: String,
    _dir: tempfile::TempDir,
}

async fn fixture(max_batch: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("gc.db").display());
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
    let gc = Arc::new(GroupCommit::start(&options, group).await.unwrap());
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

/// One job: inserts each value in turn and commits; stops at the first
/// failing insert and drops its turn (which rolls the job back).
async fn job(gc: Arc<GroupCommit>, values: Vec<i64>) -> Result<(), sqlx::Error> {
    let mut turn = gc.begin().await?;
    for x in values {
        sqlx::query("INSERT INTO t VALUES ($1)")
            .bind(x)
            .execute(&mut *turn)
            .await?;
    }
    turn.commit().await
}

/// Queues jobs behind a turn that is held, so they are all waiting when it
/// ends: each is polled once (which sends its request) before it is spawned.
async fn queue_jobs(
    gc: &Arc<GroupCommit>,
    jobs: Vec<Vec<i64>>,
) -> Vec<tokio::task::JoinHandle<Result<(), sqlx::Error>>> {
    let mut handles = Vec::new();
    for values in jobs {
        let mut fut = Box::pin(job(gc.clone(), values));
        assert!(futures_util::poll!(&mut fut).is_pending());
        handles.push(tokio::spawn(fut));
    }
    handles
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_job_is_rolled_back_alone_and_its_batch_commits_once() {
    let f = fixture(64).await;
    let mut first = f.gc.begin().await.unwrap();
    sqlx::query("INSERT INTO t VALUES (100)")
        .execute(&mut *first)
        .await
        .unwrap();
    // Job 5 writes 55, then collides with the existing row 0.
    let jobs = (1..=10)
        .map(|i| if i == 5 { vec![55, 0] } else { vec![i] })
        .collect();
    let handles = queue_jobs(&f.gc, jobs).await;
    first.commit().await.unwrap();
    let mut failed = Vec::new();
    for (i, handle) in handles.into_iter().enumerate() {
        if handle.await.unwrap().is_err() {
            failed.push(i + 1);
        }
    }
    assert_eq!(failed, vec![5]);
    assert_eq!(f.rows().await, vec![0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 100]);
    assert_eq!(
        f.gc.stats(),
        GroupCommitStats {
            batches: 1,
            jobs: 11
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_hold_at_most_max_batch_jobs() {
    let f = fixture(4).await;
    let first = f.gc.begin().await.unwrap();
    let handles = queue_jobs(&f.gc, (1..=10).map(|i| vec![i]).collect()).await;
    first.commit().await.unwrap();
    for handle in handles {
        handle.await.unwrap().unwrap();
    }
    assert_eq!(f.rows().await.len(), 11);
    // 1 + 3, then 4, then 3.
    assert_eq!(
        f.gc.stats(),
        GroupCommitStats {
            batches: 3,
            jobs: 11
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_answered_only_when_its_whole_batch_is_committed() {
    let f = fixture(64).await;
    let mut first = f.gc.begin().await.unwrap();
    sqlx::query("INSERT INTO t VALUES (1)")
        .execute(&mut *first)
        .await
        .unwrap();
    // A second job queues, then holds its turn until told to finish.
    let (has_turn, mut got_turn) = tokio::sync::mpsc::channel(1);
    let (finish, mut may_finish) = tokio::sync::mpsc::channel::<()>(1);
    let gc = f.gc.clone();
    let mut second = Box::pin(async move {
        let mut turn = gc.begin().await?;
        has_turn.send(()).await.unwrap();
        may_finish.recv().await;
        sqlx::query("INSERT INTO t VALUES (2)")
            .execute(&mut *turn)
            .await?;
        turn.commit().await
    });
    assert!(futures_util::poll!(&mut second).is_pending());
    let second = tokio::spawn(second);
    let first = tokio::spawn(first.commit());
    got_turn.recv().await.unwrap();
    // The batch is still open: the first job's write is not durable, so
    // its caller has no answer and nobody else sees the row.
    assert!(!first.is_finished());
    assert_eq!(f.rows().await, vec![0]);
    finish.send(()).await.unwrap();
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    assert_eq!(f.rows().await, vec![0, 1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_finishes_queued_jobs_then_refuses_new_ones() {
    let f = fixture(64).await;
    let first = f.gc.begin().await.unwrap();
    let handles = queue_jobs(&f.gc, vec![vec![1], vec![2]]).await;
    let gc = f.gc.clone();
    let closing = tokio::spawn(async move { gc.close().await });
    first.commit().await.unwrap();
    for handle in handles {
        handle.await.unwrap().unwrap();
    }
    closing.await.unwrap();
    assert!(matches!(f.gc.begin().await, Err(sqlx::Error::PoolClosed)));
    assert_eq!(f.rows().await, vec![0, 1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_between_batches_waits_for_the_open_batch_and_outlives_it() {
    let f = fixture(64).await;
    // A turn is held, so its batch is open: the statement waits for it.
    let held = f.gc.begin().await.unwrap();
    let gc = f.gc.clone();
    let between = tokio::spawn(async move { gc.between_batches("PRAGMA query_only = ON").await });
    tokio::task::yield_now().await;
    assert!(!between.is_finished(), "waits for the open batch");
    held.commit().await.unwrap();
    between.await.unwrap().unwrap();
    assert!(
        job(f.gc.clone(), vec![1]).await.is_err(),
        "a batch under query_only fails to begin"
    );
    assert_eq!(
        f.gc.between_batches("PRAGMA query_only").await.unwrap(),
        Some(1),
        "the setting is the connection's and outlives the batch"
    );
    f.gc.between_batches("PRAGMA query_only = OFF")
        .await
        .unwrap();
    job(f.gc.clone(), vec![2]).await.unwrap();
    assert_eq!(f.rows().await, vec![0, 2]);
}
