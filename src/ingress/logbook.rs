//! Writes deliveries-log entries in batches, off the request path: the
//! intake hands an entry over and answers the provider; one task writes
//! whatever has gathered in one transaction. A webhook thus costs no extra
//! commit (on PostgreSQL new event ids share one batched statement and
//! commit; an entry each would add an fsync per request), and a burst of
//! duplicates shares one write.
//!
//! Reads of the log first [`Logbook::flush`] it, so an operator sees every
//! delivery answered before their request. A crash loses at most the
//! entries not yet written (a few milliseconds' worth): log lines, never
//! events, whose raw bodies and runs were committed before the answer. A
//! `duplicate_of` entry does not come here: it is written with its raw body
//! before the 2xx ([`super::port::DeliveryStore::record_delivery`]).

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::log::DeliveryEntry;
use super::port::DeliveryStore;

/// Entries waiting at most; past it, the intake writes its entry itself.
const QUEUE: usize = 10_000;
/// Entries per transaction at most.
const BATCH: usize = 500;

enum Message {
    Entry(Box<DeliveryEntry>),
    Flush(oneshot::Sender<()>),
}

/// The handle the intake and the readers share.
#[derive(Debug, Clone)]
pub struct Logbook {
    tx: mpsc::Sender<Message>,
    store: Arc<dyn DeliveryStore>,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Entry(e) => f.debug_tuple("Entry").field(&e.id).finish(),
            Self::Flush(_) => f.write_str("Flush"),
        }
    }
}

impl Logbook {
    /// A logbook writing to `store`, with its writer task spawned on the
    /// current runtime; the task ends when every handle is dropped, after
    /// writing what it holds.
    pub fn spawn(store: Arc<dyn DeliveryStore>) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write_batches(rx, store.clone()));
        Self { tx, store }
    }

    /// Records `entry`: queued for the next batch, or written now when the
    /// queue is full (or its writer gone), so no entry is dropped.
    ///
    /// # Errors
    /// The direct write failed.
    pub async fn record(&self, entry: DeliveryEntry) -> crate::ledger::storage::Result<()> {
        match self.tx.try_send(Message::Entry(Box::new(entry))) {
            Ok(()) => Ok(()),
            Err(
                mpsc::error::TrySendError::Full(Message::Entry(entry))
                | mpsc::error::TrySendError::Closed(Message::Entry(entry)),
            ) => self.store.record_delivery(&entry, None).await,
            Err(_) => Ok(()),
        }
    }

    /// Waits until every entry handed over before this call is written.
    pub async fn flush(&self) {
        let (done, written) = oneshot::channel();
        if self.tx.send(Message::Flush(done)).await.is_ok() {
            let _ = written.await;
        }
    }
}

/// The writer: takes what has gathered (up to [`BATCH`]), writes it in one
/// transaction, answers the flushes that came with it.
async fn write_batches(mut rx: mpsc::Receiver<Message>, store: Arc<dyn DeliveryStore>) {
    let mut entries = Vec::with_capacity(BATCH);
    let mut flushes = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Entry(e) => entries.push(*e),
                Message::Flush(done) => flushes.push(done),
            }
            if entries.len() < BATCH {
                next = rx.try_recv().ok();
            }
        }
        if !entries.is_empty() {
            if let Err(err) = store.record_deliveries(&entries).await {
                tracing::warn!(entries = entries.len(), error = %err,
                    "deliveries-log entries could not be written; the deliveries were answered");
            }
            entries.clear();
        }
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
    }
}
