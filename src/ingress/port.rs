//! The ingress's storage port: accepting a delivery in one transaction,
//! quarantining a conflicting one, and reading the stored evidence.

use async_trait::async_trait;

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
