//! The ingress's storage ports: accepting a delivery in one transaction,
//! quarantining a conflicting one, and reading the stored evidence; and
//! the deliveries log with the operator's forwards.

use async_trait::async_trait;

use super::log::{DeliveryEntry, DeliveryFilter};
use super::operator::{ForwardCommand, ForwardOutcome};
use super::RawEvent;
use crate::clock::Millis;
use crate::ledger::storage::Result;
use crate::ledger::{ClaimOutcome, ClaimRequest, Run};
use crate::outbox::NewEffect;

/// Storage calls of the webhook ingress.
#[async_trait]
pub trait IngressStore: Send + Sync + std::fmt::Debug {
    /// Accepts a webhook delivery: claims its ingress run and, in the same
    /// transaction, moves it to `approved`, stores the raw event and
    /// inserts the forward effect. A claim that does not win changes
    /// nothing and returns its answer as a plain claim would. With a
    /// `body_window`, the body is remembered for that long, and a body
    /// remembered under another event id makes the delivery
    /// [`ClaimOutcome::DuplicateOf`] that event's run (nothing written).
    ///
    /// # Errors
    /// On database failure.
    async fn accept_event(
        &self,
        req: &ClaimRequest,
        event: &RawEvent,
        forward: &NewEffect,
        body_window: Option<Millis>,
    ) -> Result<ClaimOutcome>;

    /// Stores a delivery whose body conflicts with the run's payload as
    /// evidence (never forwarded) and records a `payload_conflict` dead letter.
    ///
    /// # Errors
    /// On database failure.
    async fn quarantine_event(&self, event: &RawEvent, run: &Run) -> Result<()>;

    /// One stored raw delivery.
    ///
    /// # Errors
    /// On database failure.
    async fn raw_event(&self, id: &str) -> Result<Option<RawEvent>>;
}

/// Storage calls of the deliveries log and the operator's forwards.
#[async_trait]
pub trait DeliveryStore: Send + Sync + std::fmt::Debug {
    /// Records one verified delivery; with `raw`, stores that raw event in
    /// the same transaction (a `duplicate_of` delivery's body).
    ///
    /// # Errors
    /// On database failure; nothing is stored.
    async fn record_delivery(&self, entry: &DeliveryEntry, raw: Option<&RawEvent>) -> Result<()>;

    /// Records a batch of entries in one transaction.
    ///
    /// # Errors
    /// On database failure; nothing is stored.
    async fn record_deliveries(&self, entries: &[DeliveryEntry]) -> Result<()>;

    /// A page of the log, newest first.
    ///
    /// # Errors
    /// On database failure.
    async fn deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<DeliveryEntry>>;

    /// One entry of the log.
    ///
    /// # Errors
    /// On database failure.
    async fn delivery(&self, id: &str) -> Result<Option<DeliveryEntry>>;

    /// An operator's forward of a stored delivery, in one transaction: the
    /// entry marked (guarded, so it happens once), a new run claimed and
    /// approved with the forward effect, audited with its links.
    ///
    /// # Errors
    /// On database failure; nothing is changed.
    async fn forward_delivery(&self, cmd: &ForwardCommand) -> Result<ForwardOutcome>;
}
