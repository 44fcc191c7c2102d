//! The expiry sweeper: a challenge past its absolute expiry sends nothing.
//! Its run goes `dead_lettered` (reason `approval_expired`), or, when the
//! operation names an escalation group, a new challenge goes to that
//! group once and the run keeps waiting.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::port::{ApprovalStore, SessionStore};
use super::{challenge_callback, escalation_of, ApprovalsConfig};
use crate::approval::OperationConfig;
use crate::clock::SharedClock;
use crate::ledger::storage::Result;
use crate::metrics::{GateDecision, Metrics};

/// Most challenges handled per step.
const BATCH: i64 = 100;

/// What one step did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Challenges expired (their runs dead-lettered).
    pub expired: u64,
    /// Challenges escalated to a new challenge.
    pub escalated: u64,
    /// Browser sessions past their lifetime, deleted.
    pub sessions: u64,
}

/// Expires or escalates due challenges and deletes expired sessions.
#[derive(Debug, Clone)]
pub struct Sweeper {
    store: Arc<dyn ApprovalStore>,
    sessions: Arc<dyn SessionStore>,
    operations: Arc<[OperationConfig]>,
    every: Duration,
    clock: SharedClock,
    wake: Arc<Notify>,
    metrics: Arc<Metrics>,
}

impl Sweeper {
    /// A sweeper over `store` (and the `sessions` it purges) for these
    /// operations (their escalation policies), every
    /// `approvals.sweep_interval_ms`; `wake` tells the dispatcher about
    /// callbacks.
    pub fn new(
        store: Arc<dyn ApprovalStore>,
        sessions: Arc<dyn SessionStore>,
        operations: &[OperationConfig],
        config: &ApprovalsConfig,
        clock: SharedClock,
        wake: Arc<Notify>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            store,
            sessions,
            operations: operations.into(),
            every: Duration::from_millis(config.sweep_interval_ms),
            clock,
            wake,
            metrics,
        }
    }

    /// One pass over due challenges (tests drive this directly).
    ///
    /// # Errors
    /// The store failed; what was done before the failure stays done.
    pub async fn sweep_once(&self) -> Result<Swept> {
        let mut swept = Swept::default();
        for challenge in self.store.due_challenges(BATCH).await? {
            let escalation = self
                .operations
                .iter()
                .find(|op| op.name == challenge.new.operation)
                .map(|op| &op.approval)
                .filter(|policy| policy.escalates() && challenge.new.escalation == 0);
            if let Some(policy) = escalation {
                let next = escalation_of(&challenge, policy, self.clock.now_ms());
                if self
                    .store
                    .escalate_challenge(&challenge.new.id, &next)
                    .await?
                {
                    tracing::warn!(challenge = %challenge.new.id, escalated_to = %next.id,
                        "approval expired; escalated to the escalation group");
                    swept.escalated += 1;
                }
                continue;
            }
            let callback = challenge_callback(&challenge, "expired", "dead_lettered");
            if self
                .store
                .expire_challenge(&challenge.new.id, callback.as_ref())
                .await?
            {
                tracing::warn!(challenge = %challenge.new.id, operation = %challenge.new.operation,
                    "approval expired; the run is dead-lettered and nothing was sent");
                swept.expired += 1;
                let waited = self.clock.now_ms() - challenge.created_at;
                self.metrics
                    .gate_decided(&challenge.new.operation, GateDecision::Expired, waited);
                if callback.is_some() {
                    self.wake.notify_one();
                }
            }
        }
        swept.sessions = self.sessions.purge_sessions().await?;
        Ok(swept)
    }

    /// Sweeps every `approvals.sweep_interval_ms` until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(self.every) => {}
            }
            if let Err(err) = self.sweep_once().await {
                tracing::error!(error = %err, "approval sweep failed; retrying next interval");
            }
        }
    }
}
