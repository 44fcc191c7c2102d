//! The writer task: forms batches, lends the connection for each job
//! inside a savepoint, commits, and answers every job of the batch.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::Connection;
use tokio::sync::{mpsc, oneshot};

use super::{Counters, Durable, GroupCommitOptions, Lent, Request, Returned};

/// The writer task's state.
pub(super) struct Writer {
    pub(super) queue: mpsc::UnboundedReceiver<Request>,
    pub(super) counters: Arc<Counters>,
    /// To reopen the connection if a turn never returns it.
    pub(super) connect: SqliteConnectOptions,
    pub(super) options: GroupCommitOptions,
    /// A request taken from the queue that belongs to the next batch.
    pub(super) next: Option<Request>,
}

/// A job's place in the open batch.
type Waiter = oneshot::Sender<Durable>;

impl Writer {
    pub(super) async fn run(mut self, mut conn: SqliteConnection) {
        loop {
            let request = match self.next.take() {
                Some(request) => request,
                None => match self.queue.recv().await {
                    Some(request) => request,
                    None => break,
                },
            };
            match request {
                Request::Close(ack) => {
                    let _ = conn.close().await;
                    let _ = ack.send(());
                    return;
                }
                Request::Between(sql, answer) => {
                    let value = sqlx::query_scalar::<_, i64>(&sql)
                        .fetch_optional(&mut conn)
                        .await;
                    let _ = answer.send(value);
                }
                Request::Job(first) => match self.batch(conn, first).await {
                    Some(back) => conn = back,
                    None => match SqliteConnection::connect_with(&self.connect).await {
                        Ok(fresh) => conn = fresh,
                        Err(err) => {
                            tracing::error!(error = %err, "the group-commit writer cannot reconnect; writes stop");
                            return;
                        }
                    },
                },
            }
        }
        let _ = conn.close().await;
    }

    /// Runs one batch; `None` when the connection was lost with it.
    async fn batch(
        &mut self,
        mut conn: SqliteConnection,
        first: oneshot::Sender<Result<Lent, sqlx::Error>>,
    ) -> Option<SqliteConnection> {
        // The first job's savepoint rides along: one trip to SQLite's thread.
        if let Err(err) = exec(&mut conn, "BEGIN IMMEDIATE; SAVEPOINT og_job").await {
            let _ = exec(&mut conn, "ROLLBACK").await;
            let _ = first.send(Err(err));
            return Some(conn);
        }
        let mut waiters: Vec<Waiter> = Vec::with_capacity(self.options.max_batch);
        let started = Instant::now();
        let mut job = Some(first);
        let mut savepoint_taken = true;
        while let Some(lend) = job.take() {
            match serve(conn, lend, savepoint_taken, &mut waiters).await {
                Served::Ok(back) => conn = back,
                Served::Broken(back, err) => return Some(abort(back, waiters, err).await),
                Served::Lost => {
                    let err = Arc::new(sqlx::Error::WorkerCrashed);
                    for waiter in waiters {
                        let _ = waiter.send(Err(err.clone()));
                    }
                    return None;
                }
            }
            savepoint_taken = false;
            if waiters.len() < self.options.max_batch {
                job = self.next_job(started).await;
            }
        }
        match exec(&mut conn, "COMMIT").await {
            Ok(()) => {
                self.counters.batches.fetch_add(1, Ordering::Relaxed);
                let jobs = waiters.len() as u64;
                self.counters.jobs.fetch_add(jobs, Ordering::Relaxed);
                for waiter in waiters {
                    let _ = waiter.send(Ok(()));
                }
                Some(conn)
            }
            Err(err) => Some(abort(conn, waiters, Arc::new(err)).await),
        }
    }

    /// The next job for the open batch, if one comes in time.
    async fn next_job(
        &mut self,
        started: Instant,
    ) -> Option<oneshot::Sender<Result<Lent, sqlx::Error>>> {
        let request = match self.queue.try_recv() {
            Ok(request) => request,
            Err(mpsc::error::TryRecvError::Disconnected) => return None,
            Err(mpsc::error::TryRecvError::Empty) => {
                let left = self.options.max_wait.checked_sub(started.elapsed())?;
                if left.is_zero() {
                    return None;
                }
                self.wait_for_job(left).await?
            }
        };
        match request {
            Request::Job(lend) => Some(lend),
            // Outside any batch: it waits for this one to commit.
            other => {
                self.next = Some(other);
                None
            }
        }
    }

    /// Waits up to `left` for a request. Tokio's timer counts whole
    /// milliseconds, so shorter waits yield to the runtime instead: the
    /// tasks that run meanwhile are the ones about to send a job.
    async fn wait_for_job(&mut self, left: Duration) -> Option<Request> {
        if left >= Duration::from_millis(1) {
            return tokio::time::timeout(left, self.queue.recv())
                .await
                .ok()
                .flatten();
        }
        let deadline = Instant::now() + left;
        while Instant::now() < deadline {
            tokio::task::yield_now().await;
            if let Ok(request) = self.queue.try_recv() {
                return Some(request);
            }
        }
        None
    }
}

enum Served {
    Ok(SqliteConnection),
    /// The batch cannot go on (a savepoint statement failed).
    Broken(SqliteConnection, Arc<sqlx::Error>),
    /// The connection never came back (its turn was leaked): its batch
    /// is gone with it, and the writer opens a new one.
    Lost,
}

/// Lends the connection for one job inside a savepoint and takes it back.
async fn serve(
    mut conn: SqliteConnection,
    lend: oneshot::Sender<Result<Lent, sqlx::Error>>,
    savepoint_taken: bool,
    waiters: &mut Vec<Waiter>,
) -> Served {
    if lend.is_closed() {
        // The caller gave up while queued (an unused savepoint is harmless).
        return Served::Ok(conn);
    }
    if !savepoint_taken {
        if let Err(err) = exec(&mut conn, "SAVEPOINT og_job").await {
            return Served::Broken(conn, Arc::new(err));
        }
    }
    let (back_tx, back_rx) = oneshot::channel();
    let (durable_tx, durable_rx) = oneshot::channel();
    let lent = Lent {
        conn,
        back: back_tx,
        durable: durable_rx,
    };
    let returned = match lend.send(Ok(lent)) {
        Ok(()) => match back_rx.await {
            Ok(returned) => returned,
            Err(_) => return Served::Lost,
        },
        // The caller went away between asking and receiving: nothing ran.
        Err(unsent) => match unsent {
            Ok(lent) => Returned {
                conn: lent.conn,
                keep: true,
            },
            Err(_) => return Served::Lost,
        },
    };
    waiters.push(durable_tx);
    let mut conn = returned.conn;
    if !returned.keep {
        if let Err(err) = exec(&mut conn, "ROLLBACK TO og_job").await {
            return Served::Broken(conn, Arc::new(err));
        }
    }
    Served::Ok(conn)
}

/// Rolls the whole batch back and tells every job why.
async fn abort(
    mut conn: SqliteConnection,
    waiters: Vec<Waiter>,
    err: Arc<sqlx::Error>,
) -> SqliteConnection {
    tracing::error!(error = %err, jobs = waiters.len(), "group commit failed; batch rolled back");
    let _ = exec(&mut conn, "ROLLBACK").await;
    for waiter in waiters {
        let _ = waiter.send(Err(err.clone()));
    }
    conn
}

/// Runs one fixed statement.
async fn exec(conn: &mut SqliteConnection, sql: &'static str) -> Result<(), sqlx::Error> {
    sqlx::query(sql).execute(conn).await.map(|_| ())
}
