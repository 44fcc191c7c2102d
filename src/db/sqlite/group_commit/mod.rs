//! Group commit for SQLite: one writer thread, one durable transaction per batch.
//!
//! SQLite with `synchronous=FULL` spends most of a small write in the
//! commit's `fsync`. One commit per request caps a node at a few thousand
//! writes a second; one commit for every request that arrived while the
//! previous commit was syncing costs one `fsync` for all of them.
//!
//! # How it works
//!
//! [`GroupCommit`] owns the store's only write connection on a thread of
//! its own, and runs each write transaction there ([`GroupCommit::write`]):
//! a [`Job`] is a plain `async fn` over a [`Tx`], and every statement it
//! awaits runs synchronously on that thread through SQLite's C API
//! ([`super::native`]), so a job runs start to finish without a hand-off
//! per statement. The writer opens a batch (`BEGIN IMMEDIATE`), and for
//! each queued job in arrival order sets a `SAVEPOINT` and runs it:
//!
//! - a job that ends in [`Finish::Commit`] keeps its writes in the batch
//!   (`RELEASE`);
//! - one that ends in [`Finish::Rollback`], returns an error or panics is
//!   undone alone (`ROLLBACK TO` its savepoint), and the rest of the batch
//!   stays.
//!
//! When no job is queued, or the batch holds `max_batch` jobs (after
//! waiting up to `max_wait` for more), the writer commits. Every job of the
//! batch is answered only once that commit is durable, and a failed commit
//! fails every job in it: a caller is never answered from writes that
//! could still be lost, and one that lost a race reads the winner's
//! committed row.
//!
//! The writer never checkpoints (`wal_autocheckpoint = 0`): a second
//! thread with its own connection runs SQLite's passive checkpoint after
//! commits, as the automatic one would, but without stalling the batch
//! whose commit crossed the threshold (copying frames to the database file
//! and syncing it cost several of the writer's commits).
//! That thread alone never lets the WAL start over under sustained writes
//! (SQLite restarts it only once every frame is copied back), so when the
//! WAL passes 16 MiB it asks the writer, which restarts it between two
//! batches (`wal_checkpoint(RESTART)`, waiting briefly for readers).
//!
//! # Running a new write through it
//!
//! Nothing above the backend calls this directly. A write transaction is
//! a plain function over [`Tx`] in `db/tx/`, run by `Db::write` (or
//! `Db::commit`). Two rules hold by construction: no write runs outside a
//! job (the read pool refuses writes), and a job awaits nothing but its
//! own [`Tx`] (it only ever sees its `Tx`; anything else it awaited would
//! hold up the whole writer). Reads that need no transaction use the read
//! pool and never wait for the writer.

mod writer;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use tokio::sync::oneshot;

use super::native::NativeConn;
use crate::clock::SharedClock;
use crate::db::exec::Tx;
use crate::db::sql::Statements;
use crate::db::{Finish, Job};
use crate::ledger::storage::{Result, StoreError};
use writer::Writer;

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
    /// Times the writer started the WAL over (see [`writer`]).
    pub wal_restarts: u64,
}

#[derive(Debug, Default)]
struct Counters {
    batches: AtomicU64,
    jobs: AtomicU64,
    wal_restarts: AtomicU64,
}

/// Where the write connection is and how it waits on a lock.
#[derive(Debug, Clone)]
pub struct WriterSettings {
    /// The database file.
    pub path: PathBuf,
    /// SQLite's busy timeout.
    pub busy_timeout: Duration,
    /// Every statement, spelled for SQLite (a job's [`Tx`] carries them).
    pub statements: Arc<Statements>,
    /// The clock whose time each job's [`Tx`] binds.
    pub clock: SharedClock,
}

/// What a batch's commit came to, shared by every job in it.
type Durable = std::result::Result<(), Arc<rusqlite::Error>>;

/// A value one statement outside a batch returns: the first column of
/// its first row, if it is an integer.
type Answer = Result<Option<i64>>;

/// A job with its answer, its output type erased for the writer's queue.
trait Work: Send {
    /// Whether the caller has gone (its job need not run).
    fn abandoned(&self) -> bool;
    /// Runs the job to its end on the writer thread; whether to keep its
    /// writes.
    fn run(&mut self, tx: &mut Tx<'_>) -> bool;
    /// Answers the caller once the batch has ended as `durable` says.
    fn answer(self: Box<Self>, durable: &Durable);
}

/// One queued job and the caller waiting for its output.
struct Pending<T> {
    job: Option<Job<T>>,
    outcome: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T: Send + 'static> Work for Pending<T> {
    fn abandoned(&self) -> bool {
        self.reply.is_closed()
    }

    fn run(&mut self, tx: &mut Tx<'_>) -> bool {
        let Some(job) = self.job.take() else {
            return false;
        };
        let ran =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| writer::block_on(job(tx))));
        let (keep, outcome) = match ran {
            Ok(Ok(Finish::Commit(value))) => (true, Ok(value)),
            Ok(Ok(Finish::Rollback(value))) => (false, Ok(value)),
            Ok(Err(err)) => (false, Err(err)),
            Err(_) => (false, Err(StoreError::WritePanicked)),
        };
        self.outcome = Some(outcome);
        keep
    }

    fn answer(self: Box<Self>, durable: &Durable) {
        let output = match (durable, self.outcome) {
            // A job's own failure stands whatever became of its batch.
            (_, Some(Err(own))) => Err(own),
            (Ok(()), Some(output)) => output,
            (Err(err), _) => Err(StoreError::BatchFailed(err.clone())),
            (Ok(()), None) => Err(StoreError::WritePanicked),
        };
        let _ = self.reply.send(output);
    }
}

enum Request {
    Job(Box<dyn Work>),
    /// One statement between batches, outside any transaction.
    Between(String, oneshot::Sender<Answer>),
    Close(oneshot::Sender<()>),
}

/// The single-writer group-commit executor (see the module docs).
#[derive(Debug)]
pub struct GroupCommit {
    requests: mpsc::Sender<Request>,
    counters: Arc<Counters>,
}

impl GroupCommit {
    /// Opens the write connection and starts the writer on its own thread.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] when the connection cannot be opened with its
    /// settings; [`StoreError::WriterClosed`] when the thread cannot start.
    pub async fn start(settings: WriterSettings, options: GroupCommitOptions) -> Result<Self> {
        let (requests, queue) = mpsc::channel();
        let counters = Arc::new(Counters::default());
        let (opened, open) = oneshot::channel();
        let (checkpoints, due) = mpsc::sync_channel(1);
        let checkpointer = NativeConn::open(&settings.path, settings.busy_timeout)?;
        let restart_due = Arc::new(AtomicBool::new(false));
        let asks = restart_due.clone();
        std::thread::Builder::new()
            .name("oncegate-checkpoint".into())
            .spawn(move || writer::checkpoint(checkpointer, due, &asks))
            .map_err(|_| StoreError::WriterClosed)?;
        let writer = Writer {
            checkpoints,
            queue,
            counters: counters.clone(),
            options: GroupCommitOptions {
                max_batch: options.max_batch.max(1),
                ..options
            },
            statements: settings.statements.clone(),
            clock: settings.clock.clone(),
            next: None,
            restart_due,
            busy_timeout: settings.busy_timeout,
        };
        // Tokio's context, should a job ever await something of it.
        let runtime = tokio::runtime::Handle::try_current().ok();
        std::thread::Builder::new()
            .name("oncegate-writer".into())
            .spawn(move || {
                let _entered = runtime.as_ref().map(tokio::runtime::Handle::enter);
                match NativeConn::open_writer(&settings.path, settings.busy_timeout) {
                    Ok(conn) => {
                        let _ = opened.send(Ok(()));
                        writer.run(conn);
                    }
                    Err(err) => {
                        let _ = opened.send(Err(err));
                    }
                }
            })
            .map_err(|_| StoreError::WriterClosed)?;
        open.await.map_err(|_| StoreError::WriterClosed)??;
        Ok(Self { requests, counters })
    }

    /// Batches and jobs committed so far.
    pub fn stats(&self) -> GroupCommitStats {
        GroupCommitStats {
            batches: self.counters.batches.load(Ordering::Relaxed),
            jobs: self.counters.jobs.load(Ordering::Relaxed),
            wal_restarts: self.counters.wal_restarts.load(Ordering::Relaxed),
        }
    }

    /// Runs `job` in the next batch, in a savepoint of its own; its output
    /// once the batch is durable.
    ///
    /// # Errors
    /// The job's own error; [`StoreError::BatchFailed`] when its batch's
    /// commit failed (nothing in it is stored); [`StoreError::WritePanicked`]
    /// when the job panicked (it was rolled back alone);
    /// [`StoreError::WriterClosed`] after [`GroupCommit::close`].
    pub async fn write<T: Send + 'static>(&self, job: Job<T>) -> Result<T> {
        let (reply, answer) = oneshot::channel();
        let work = Pending {
            job: Some(job),
            outcome: None,
            reply,
        };
        self.requests
            .send(Request::Job(Box::new(work)))
            .map_err(|_| StoreError::WriterClosed)?;
        answer.await.map_err(|_| StoreError::WriterClosed)?
    }

    /// Runs one statement on the write connection between two batches,
    /// outside any transaction, and returns the first column of its first
    /// row. For the connection's own settings and upkeep, which a
    /// transaction refuses or which must hold for every later batch:
    /// `PRAGMA wal_checkpoint(TRUNCATE)`, `PRAGMA query_only = ON` (after
    /// which every batch fails to begin until `OFF`), `PRAGMA
    /// max_page_count`. Never for data: writes belong in a job.
    ///
    /// # Errors
    /// The statement failed; [`StoreError::WriterClosed`] once the writer
    /// has stopped.
    pub async fn between_batches(&self, sql: &str) -> Answer {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send(Request::Between(sql.to_owned(), tx))
            .map_err(|_| StoreError::WriterClosed)?;
        rx.await.map_err(|_| StoreError::WriterClosed)?
    }

    /// Lets the jobs queued so far finish, then closes the connection.
    /// Later writes fail with [`StoreError::WriterClosed`].
    pub async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        if self.requests.send(Request::Close(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}
