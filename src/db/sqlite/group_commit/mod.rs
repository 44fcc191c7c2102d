//! Group commit for SQLite: one writer task, one durable transaction per batch.
//!
//! SQLite with `synchronous=FULL` spends most of a small write in the
//! commit's `fsync`. One commit per request caps a node at a few thousand
//! writes a second; one commit for every request that arrived while the
//! previous commit was syncing costs one `fsync` for all of them.
//!
//! # How it works
//!
//! [`GroupCommit`] owns the store's only write connection inside a task.
//! A caller asks for a turn with [`GroupCommit::begin`], exactly as it
//! would begin a transaction on a pool. The writer opens a batch
//! (`BEGIN IMMEDIATE`), and for each waiting caller in arrival order sets a
//! `SAVEPOINT` and lends it the connection as a [`Turn`]. The caller runs
//! its statements on the turn (it derefs to the connection) and ends it:
//!
//! - [`Turn::commit`] keeps the job's writes in the batch;
//! - [`Turn::rollback`], or dropping the turn (an error returned with `?`,
//!   a cancelled request), makes the writer `ROLLBACK TO` the job's
//!   savepoint, so that one job fails alone and the rest of the batch stays.
//!
//! When no caller is waiting, or the batch holds `max_batch` jobs (after
//! waiting up to `max_wait` for more), the writer commits. Both `commit`
//! and `rollback` return only once that commit is durable, and report its
//! failure: a caller is never answered from writes that could still be
//! lost, and one that lost a race reads the winner's committed row.
//!
//! # Running a new write through it
//!
//! Nothing above the backend calls this directly. A write transaction is
//! a plain function over [`Tx`](crate::db::exec::Tx) in `db/tx/`, run by
//! `Db::write` (or `Db::commit`); on SQLite the backend ships the whole
//! function to the writer's thread ([`GroupCommit::run`]), takes a turn
//! there, and commits or rolls the turn back as the function decides. Two
//! rules hold by construction: no write runs outside a turn (the read pool
//! refuses writes), and no function begins a second turn while it holds
//! one (a transaction function only ever sees its own `Tx`). Reads that
//! need no transaction use the read pool and never wait for the writer.

mod writer;

use writer::Writer;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::Connection;
use tokio::sync::{mpsc, oneshot};

/// How batches are formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCommitOptions {
    /// Most jobs in one transaction.
    pub max_batch: usize,
    /// How long a batch waits for more jobs once nobody is queued. Zero
    /// commits as soon as the queue is empty: jobs that arrive during a
    /// commit form the next batch, which already batches well under load.
    pub max_wait: Duration,
}

impl Default for GroupCommitOptions {
    fn default() -> Self {
        Self {
            max_batch: 64,
            max_wait: Duration::ZERO,
        }
    }
}

/// What the writer has committed so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// Durable commits.
    pub batches: u64,
    /// Jobs in them (kept or rolled back to their savepoint).
    pub jobs: u64,
}

#[derive(Debug, Default)]
struct Counters {
    batches: AtomicU64,
    jobs: AtomicU64,
}

/// Why a batch failed to become durable (shared by every job in it).
#[derive(Debug, thiserror::Error)]
#[error("the group commit failed; nothing in its batch was stored")]
pub struct BatchFailed(#[source] pub Arc<sqlx::Error>);

type Durable = Result<(), Arc<sqlx::Error>>;

/// What the writer hands a caller: its connection, for one job.
struct Lent {
    conn: SqliteConnection,
    back: oneshot::Sender<Returned>,
    durable: oneshot::Receiver<Durable>,
}

/// What a caller hands back.
#[derive(Debug)]
struct Returned {
    conn: SqliteConnection,
    keep: bool,
}

/// A value one statement outside a batch returns: the first column of
/// its first row, if it has one.
type Answer = Result<Option<i64>, sqlx::Error>;

enum Request {
    Job(oneshot::Sender<Result<Lent, sqlx::Error>>),
    /// One statement between batches, outside any transaction.
    Between(String, oneshot::Sender<Answer>),
    Close(oneshot::Sender<()>),
}

/// The single-writer group-commit executor (see the module docs).
#[derive(Debug)]
pub struct GroupCommit {
    requests: mpsc::UnboundedSender<Request>,
    /// The writer thread's own runtime, where write operations run.
    runtime: tokio::runtime::Handle,
    counters: Arc<Counters>,
}

impl GroupCommit {
    /// Opens the write connection and starts the writer on its own thread.
    ///
    /// # Errors
    /// The connection cannot be opened, or the thread not started.
    pub async fn start(
        connect: &SqliteConnectOptions,
        options: GroupCommitOptions,
    ) -> Result<Self, sqlx::Error> {
        let conn = SqliteConnection::connect_with(connect).await?;
        let (requests, queue) = mpsc::unbounded_channel();
        let counters = Arc::new(Counters::default());
        let writer = Writer {
            queue,
            counters: counters.clone(),
            connect: connect.clone(),
            options: GroupCommitOptions {
                max_batch: options.max_batch.max(1),
                ..options
            },
            next: None,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("oncegate-writer".into())
            .spawn(move || runtime.block_on(writer.run(conn)))?;
        Ok(Self {
            requests,
            runtime: handle,
            counters,
        })
    }

    /// Batches and jobs committed so far.
    pub fn stats(&self) -> GroupCommitStats {
        GroupCommitStats {
            batches: self.counters.batches.load(Ordering::Relaxed),
            jobs: self.counters.jobs.load(Ordering::Relaxed),
        }
    }

    /// Runs a whole write operation on the writer's thread and returns its
    /// output. Operations that [`begin`](Self::begin) their turns there
    /// pass the connection back and forth without queueing behind the
    /// HTTP server's tasks: under load, a turn handed to a task on the
    /// server's runtime waits for every task queued before it.
    ///
    /// # Errors
    /// [`sqlx::Error::PoolClosed`] once the writer has stopped;
    /// [`sqlx::Error::WorkerCrashed`] if the operation panicked.
    pub async fn run<F>(&self, operation: F) -> Result<F::Output, sqlx::Error>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.runtime.spawn(operation).await.map_err(|e| {
            if e.is_panic() {
                sqlx::Error::WorkerCrashed
            } else {
                sqlx::Error::PoolClosed
            }
        })
    }

    /// Waits for a turn on the write connection, inside the next batch.
    ///
    /// # Errors
    /// [`sqlx::Error::PoolClosed`] after [`GroupCommit::close`]; the
    /// database's error when the batch could not begin.
    pub async fn begin(&self) -> Result<Turn, sqlx::Error> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send(Request::Job(tx))
            .map_err(|_| sqlx::Error::PoolClosed)?;
        let lent = rx.await.map_err(|_| sqlx::Error::PoolClosed)??;
        Ok(Turn {
            conn: Some(lent.conn),
            back: Some(lent.back),
            durable: Some(lent.durable),
        })
    }

    /// Runs one statement on the write connection between two batches,
    /// outside any transaction, and returns the first column of its first
    /// row. For the connection's own settings and upkeep, which a
    /// transaction refuses or which must hold for every later batch:
    /// `PRAGMA wal_checkpoint(TRUNCATE)`, `PRAGMA query_only = ON` (after
    /// which every batch fails to begin until `OFF`), `PRAGMA
    /// max_page_count`. Never for data: writes belong in a [`Turn`].
    ///
    /// # Errors
    /// The statement failed; [`sqlx::Error::PoolClosed`] once the writer
    /// has stopped.
    pub async fn between_batches(&self, sql: &str) -> Answer {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send(Request::Between(sql.to_owned(), tx))
            .map_err(|_| sqlx::Error::PoolClosed)?;
        rx.await.map_err(|_| sqlx::Error::PoolClosed)?
    }

    /// Lets the jobs queued so far finish, then closes the connection.
    /// Later calls to [`GroupCommit::begin`] fail.
    pub async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        if self.requests.send(Request::Close(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

/// One job's exclusive use of the write connection, inside a batch.
///
/// Derefs to the connection: run statements on `&mut *turn`. End it with
/// [`Turn::commit`] or [`Turn::rollback`]; dropping it rolls the job back.
#[derive(Debug)]
pub struct Turn {
    conn: Option<SqliteConnection>,
    back: Option<oneshot::Sender<Returned>>,
    durable: Option<oneshot::Receiver<Durable>>,
}

impl Turn {
    /// Keeps this job's writes and waits until its batch is durable.
    ///
    /// # Errors
    /// The batch's commit failed: none of its writes are stored.
    pub async fn commit(mut self) -> Result<(), sqlx::Error> {
        self.give_back(true);
        self.wait().await
    }

    /// Undoes this job's writes (the rest of its batch stays) and waits
    /// until the batch is durable, so that what the caller reads next
    /// includes everything committed before it.
    ///
    /// # Errors
    /// The batch's commit failed.
    pub async fn rollback(mut self) -> Result<(), sqlx::Error> {
        self.give_back(false);
        self.wait().await
    }

    fn give_back(&mut self, keep: bool) {
        if let (Some(conn), Some(back)) = (self.conn.take(), self.back.take()) {
            // The writer is waiting on this channel; it only closes if the
            // writer task is gone, and then the connection goes with it.
            let _ = back.send(Returned { conn, keep });
        }
    }

    async fn wait(&mut self) -> Result<(), sqlx::Error> {
        let durable = self.durable.take().ok_or(sqlx::Error::PoolClosed)?;
        match durable.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) => Err(sqlx::Error::Io(std::io::Error::other(BatchFailed(err)))),
            Err(_) => Err(sqlx::Error::WorkerCrashed),
        }
    }
}

impl std::ops::Deref for Turn {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        self.conn
            .as_ref()
            .expect("a turn holds the connection until it ends")
    }
}

impl std::ops::DerefMut for Turn {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        self.conn
            .as_mut()
            .expect("a turn holds the connection until it ends")
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.give_back(false);
    }
}
