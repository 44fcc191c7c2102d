//! The recorder: writes the decisions that have come in, a batch per
//! transaction, retrying a failed write until it goes through.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};

use super::{Dispatcher, StepReport, RECORDERS, RECORD_RETRY_MAX};
use crate::ledger::storage::StoreError;
use crate::outbox::{Decision, Recorded};

impl Dispatcher {
    /// Records decisions as they come, all that are waiting at once (up to
    /// `batch_size`), in up to `RECORDERS` transactions at a time, until
    /// every sender is done. A failed write is retried a few times (the
    /// effects stay leased meanwhile); if it never succeeds their leases
    /// expire to `unknown`, never back to `pending`.
    pub(super) async fn record_loop(self: Arc<Self>, mut decisions: mpsc::Receiver<Decision>) {
        let slots = Arc::new(Semaphore::new(RECORDERS));
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let mut batch = Vec::with_capacity(self.batch());
            if decisions.recv_many(&mut batch, self.batch()).await == 0 {
                break;
            }
            let this = self.clone();
            tokio::spawn(async move {
                this.record_with_retries(&batch).await;
                drop(slot);
            });
        }
        // Every record in flight finishes before the dispatcher stops.
        let _ = slots.acquire_many(RECORDERS as u32).await;
    }

    pub(super) async fn record_with_retries(&self, decided: &[Decision]) {
        let mut delay = Duration::from_millis(100);
        while let Err(err) = self.record(decided, &mut StepReport::default()).await {
            if delay > RECORD_RETRY_MAX {
                tracing::error!(error = %err, count = decided.len(), "recording dispatch outcomes failed; their leases will expire to unknown");
                return;
            }
            tracing::warn!(error = %err, retry_in_ms = delay.as_millis() as u64, "recording dispatch outcomes failed");
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
    }

    /// Records decisions in one transaction and counts what happened.
    pub(super) async fn record(
        &self,
        decisions: &[Decision],
        report: &mut StepReport,
    ) -> Result<(), StoreError> {
        if decisions.iter().any(|d| d.attempt.is_some()) {
            // Sent and answered, not yet recorded (the chaos tests die here).
            crate::chaos::point("after_send_before_record");
        }
        let outcomes = self.store.record_decisions(decisions).await?;
        self.recorded.notify_one();
        for outcome in &outcomes {
            match outcome {
                Recorded::Lost => report.lost += 1,
                Recorded::Written { ended: Some(run) } => self.metrics.run_moved(run),
                Recorded::Written { ended: None } => {}
            }
        }
        if report.lost > 0 {
            tracing::warn!(
                count = report.lost,
                "leases lost before their outcome was recorded"
            );
        }
        Ok(())
    }
}
