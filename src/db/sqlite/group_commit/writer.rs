//! The writer thread: forms batches, runs each job inside a savepoint to
//! its end, commits, and answers every job of the batch.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use super::{Counters, Durable, GroupCommitOptions, Request, Work};
use crate::clock::SharedClock;
use crate::db::exec::Tx;
use crate::db::sql::Statements;
use crate::db::sqlite::native::NativeConn;

/// The writer thread's state.
pub(super) struct Writer {
    pub(super) queue: mpsc::Receiver<Request>,
    /// Tells the checkpointer a commit added frames to the WAL.
    pub(super) checkpoints: mpsc::SyncSender<()>,
    pub(super) counters: Arc<Counters>,
    pub(super) options: GroupCommitOptions,
    pub(super) statements: Arc<Statements>,
    pub(super) clock: SharedClock,
    /// A request taken from the queue that belongs after the open batch.
    pub(super) next: Option<Request>,
    /// Set by the checkpointer when the WAL has grown past
    /// [`WAL_RESTART_FRAMES`]: the writer restarts it between two batches.
    pub(super) restart_due: Arc<AtomicBool>,
    /// The connection's usual busy timeout.
    pub(super) busy_timeout: Duration,
}

impl Writer {
    pub(super) fn run(mut self, mut conn: NativeConn) {
        loop {
            let request = match self.next.take() {
                Some(request) => request,
                None => match self.queue.recv() {
                    Ok(request) => request,
                    Err(_) => return,
                },
            };
            match request {
                Request::Close(ack) => {
                    drop(conn);
                    let _ = ack.send(());
                    return;
                }
                Request::Between(sql, answer) => {
                    let _ = answer.send(conn.scalar(&sql).map_err(Into::into));
                }
                Request::Job(first) => {
                    if self.restart_due.swap(false, Ordering::AcqRel) {
                        self.restart_wal(&conn);
                    }
                    self.batch(&mut conn, first);
                }
            }
        }
    }

    /// Starts the WAL over. SQLite restarts its WAL at a write only once
    /// every frame is copied into the database file, and the checkpointer
    /// copies them while the writer keeps appending: under sustained writes
    /// it never catches up, and the WAL grows without end (half a gigabyte
    /// in eight seconds of the claim benchmark, every append a new block of
    /// the file). Here, between two batches, nothing appends: copy the rest
    /// and wait briefly for readers still on the WAL; if one holds on, the
    /// checkpointer asks again later.
    fn restart_wal(&self, conn: &NativeConn) {
        match conn.restart_wal(RESTART_PATIENCE, self.busy_timeout) {
            Ok(true) => {
                self.counters.wal_restarts.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => {}
            Err(err) => tracing::warn!(error = %err, "restarting the WAL failed; retried later"),
        }
    }

    /// Runs one batch, starting with `first`, and answers its jobs.
    fn batch(&mut self, conn: &mut NativeConn, first: Box<dyn Work>) {
        if let Err(err) = conn.batch("BEGIN IMMEDIATE") {
            if conn.in_transaction() {
                let _ = conn.batch("ROLLBACK");
            }
            first.answer(&Err(Arc::new(err)));
            return;
        }
        let mut done: Vec<Box<dyn Work>> = Vec::with_capacity(self.options.max_batch);
        let started = Instant::now();
        let mut job = Some(first);
        while let Some(mut work) = job.take() {
            if !work.abandoned() {
                if let Err(err) = self.serve(conn, work.as_mut()) {
                    done.push(work);
                    return abort(conn, done, err);
                }
            }
            done.push(work);
            if done.len() < self.options.max_batch {
                job = self.next_job(started);
            }
        }
        let durable: Durable = conn.batch("COMMIT").map_err(Arc::new);
        if let Err(err) = durable {
            return abort(conn, done, err);
        }
        // Full: a checkpoint is already due.
        let _ = self.checkpoints.try_send(());
        self.counters.batches.fetch_add(1, Ordering::Relaxed);
        let jobs = done.len() as u64;
        self.counters.jobs.fetch_add(jobs, Ordering::Relaxed);
        for work in done {
            work.answer(&Ok(()));
        }
    }

    /// Runs one job inside a savepoint, keeping or undoing its writes.
    /// An error means the batch cannot go on (a savepoint statement failed).
    fn serve(
        &self,
        conn: &mut NativeConn,
        work: &mut dyn Work,
    ) -> Result<(), Arc<rusqlite::Error>> {
        conn.batch("SAVEPOINT og_job").map_err(Arc::new)?;
        let now = self.clock.now_ms();
        let keep = {
            let mut tx = Tx::new(conn, &self.statements, Some(now), now, "sqlite");
            work.run(&mut tx)
        };
        if !keep {
            conn.batch("ROLLBACK TO og_job").map_err(Arc::new)?;
        }
        conn.batch("RELEASE og_job").map_err(Arc::new)
    }

    /// The next job for the open batch, if one comes in time.
    fn next_job(&mut self, started: Instant) -> Option<Box<dyn Work>> {
        let request = match self.queue.try_recv() {
            Ok(request) => request,
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) => {
                let left = self.options.max_wait.checked_sub(started.elapsed())?;
                if left.is_zero() {
                    return None;
                }
                self.queue.recv_timeout(left).ok()?
            }
        };
        match request {
            Request::Job(work) => Some(work),
            // Outside any batch: it waits for this one to commit.
            other => {
                self.next = Some(other);
                None
            }
        }
    }
}

/// The checkpointer: after commits, SQLite's passive checkpoint (what
/// `wal_autocheckpoint` runs on the committing connection), at most once
/// per [`CHECKPOINT_EVERY`]; when the WAL has grown past
/// [`WAL_RESTART_FRAMES`], it asks the writer to start it over. It ends
/// with the writer.
pub(super) fn checkpoint(conn: NativeConn, due: mpsc::Receiver<()>, restart_due: &AtomicBool) {
    while due.recv().is_ok() {
        match conn.checkpoint_passive() {
            Ok((frames, _)) if frames > WAL_RESTART_FRAMES => {
                restart_due.store(true, Ordering::Release);
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(error = %err, "WAL checkpoint failed; the next commit retries it");
            }
        }
        std::thread::sleep(CHECKPOINT_EVERY);
    }
}

/// The WAL's length, in frames (pages), past which the writer starts it
/// over: 16 MiB of 4 KiB pages, a few hundred milliseconds of the heaviest
/// write load measured.
const WAL_RESTART_FRAMES: i64 = 4096;

/// How long a WAL restart waits for readers still on the WAL (point reads
/// take microseconds; a long scan makes it give up rather than hold up
/// the writes queued behind it).
const RESTART_PATIENCE: Duration = Duration::from_millis(20);

/// The shortest time between two checkpoints: long enough to copy many
/// commits' frames at once, short enough that the WAL stays small.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// Rolls the whole batch back and tells every job why.
fn abort(conn: &mut NativeConn, done: Vec<Box<dyn Work>>, err: Arc<rusqlite::Error>) {
    tracing::error!(error = %err, jobs = done.len(), "group commit failed; batch rolled back");
    if conn.in_transaction() {
        let _ = conn.batch("ROLLBACK");
    }
    let failed: Durable = Err(err);
    for work in done {
        work.answer(&failed);
    }
}

/// Wakes the writer thread when a job's future, pending, can go on.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a job's future to its end on this thread. Every statement a job
/// awaits is ready at once (the connection is this thread's), so the
/// first poll completes it; should it ever wait on something else, the
/// thread parks until that wakes it.
pub(super) fn block_on<F: Future>(future: F) -> F::Output {
    thread_local! {
        static WAKER: Waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    }
    let mut future = std::pin::pin!(future);
    WAKER.with(|waker| {
        let mut cx = Context::from_waker(waker);
        loop {
            match future.as_mut().poll(&mut cx) {
                Poll::Ready(output) => return output,
                Poll::Pending => std::thread::park(),
            }
        }
    })
}
