//! The queue a PostgreSQL batcher's requests wait in: whatever arrives
//! while batches are in flight goes as the next batch, one statement for
//! all of it ([`super::batch`] for claims and intakes,
//! [`super::proxy_replay`] for the proxy's replays).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, Semaphore};

/// Most requests in one statement.
const MAX_BATCH: usize = 256;

/// Batches in flight at once, per kind. While they run, requests queue
/// for the next one.
const IN_FLIGHT: usize = 2;

/// What a batcher has sent so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Statements sent.
    pub batches: u64,
    /// Requests they answered or passed on.
    pub requests: u64,
}

/// A batcher's counts, as its task updates them.
#[derive(Debug, Default)]
pub(super) struct Counters {
    batches: AtomicU64,
    requests: AtomicU64,
}

impl Counters {
    pub(super) fn stats(&self) -> BatchStats {
        BatchStats {
            batches: self.batches.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
        }
    }
}

/// The time bound into each statement (`None`: the database's clock).
pub(crate) type Now = Arc<dyn Fn() -> Option<i64> + Send + Sync>;

/// A batcher's loop: takes what queued (up to [`MAX_BATCH`]) as one batch
/// whenever one of [`IN_FLIGHT`] slots is free, and runs `send` on it in
/// a task of its own; returns when every sender is gone.
pub(super) async fn drive<W, F, Fut>(
    mut rx: mpsc::UnboundedReceiver<W>,
    counters: &Counters,
    mut send: F,
) where
    W: Send + 'static,
    F: FnMut(Vec<W>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        if rx.recv_many(&mut batch, MAX_BATCH).await == 0 {
            return;
        }
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        // Everything that queued while the batches in flight ran.
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(waiting) => batch.push(waiting),
                Err(_) => break,
            }
        }
        counters.batches.fetch_add(1, Ordering::Relaxed);
        let n = batch.len() as u64;
        counters.requests.fetch_add(n, Ordering::Relaxed);
        let sending = send(std::mem::replace(&mut batch, Vec::with_capacity(MAX_BATCH)));
        tokio::spawn(async move {
            sending.await;
            drop(slot);
        });
    }
}
