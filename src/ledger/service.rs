//! The ledger's use cases over its port: a claim answered with its
//! metrics and the wait a duplicate in flight is told, and the owner's
//! moves (renew within the lease bounds, complete, fail).

use super::port::LedgerStore;
use super::storage::StoreError;
use super::{
    ClaimOutcome, ClaimRequest, IdempotencyKey, LeaseMs, LedgerConfig, Moved, Namespace, OwnerCall,
    OwnerMove, Run, RunState,
};
use crate::clock::Clock;

/// What the ledger reports as it answers (the metrics implement it, so
/// the ledger does not depend on them).
pub trait LedgerEvents: Send + Sync + std::fmt::Debug {
    /// A claim was answered with the outcome labelled `label` (one of
    /// [`ClaimOutcome::LABELS`]).
    fn claim_answered(&self, namespace: &str, label: &'static str);
    /// A lease expired and another claimer took the run over.
    fn lease_stolen(&self, namespace: &str);
    /// A key came again with another payload.
    fn payload_conflict(&self, namespace: &str);
    /// A run moved.
    fn run_moved(&self, run: &Run);
    /// The recovery rules dead-lettered a run (`class`: `stranded` or
    /// `reclaim_budget_exhausted`).
    fn run_recovered(&self, namespace: &str, class: &str);
}

/// What the ledger's calls need.
#[derive(Debug, Clone, Copy)]
pub struct Ledger<'a> {
    /// The runs.
    pub store: &'a dyn LedgerStore,
    /// Where claims and moves are reported (the metrics).
    pub events: &'a dyn LedgerEvents,
    /// The injected clock (how long a live lease has left).
    pub clock: &'a dyn Clock,
    /// The lease bounds.
    pub config: &'a LedgerConfig,
}

/// A claim's answer, with the seconds a caller in flight should wait.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// What the claim found.
    pub outcome: ClaimOutcome,
    /// For a run in flight: when to try again, in whole seconds.
    pub retry_after_secs: Option<i64>,
}

/// Why a claim or move was refused.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The same key was claimed with another payload: never the same event.
    #[error("key {} in namespace {} was first claimed with a different payload", .run.key, .run.namespace)]
    PayloadConflict {
        /// The run that holds the key.
        run: Box<Run>,
        /// The payload hash offered now.
        offered_hash: String,
    },
    /// The store failed, or the lease lost the run.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Ledger<'_> {
    /// Claims `req` (DESIGN.md §2): the outcome as the store decided it,
    /// counted; a lease expired and taken over is counted as a steal, a
    /// payload conflict refused.
    ///
    /// # Errors
    /// [`LedgerError::PayloadConflict`], or the store failed.
    pub async fn claim(&self, req: &ClaimRequest) -> Result<Claimed, LedgerError> {
        let outcome = self.store.claim(req).await?;
        if matches!(outcome, ClaimOutcome::Claimed { .. }) {
            // Committed, not yet answered (the chaos tests die here).
            crate::chaos::point("after_claim");
        }
        let ns = req.namespace.as_str();
        self.events.claim_answered(ns, outcome.label());
        let mut retry_after_secs = None;
        match &outcome {
            ClaimOutcome::Claimed {
                run,
                reclaimed_from: Some(RunState::Processing),
                ..
            } => {
                self.events.lease_stolen(ns);
                tracing::warn!(
                    namespace = ns,
                    version = run.version.get(),
                    "lease expired; run reclaimed"
                );
            }
            ClaimOutcome::InFlight(run) => {
                let wait_ms = match (run.state, run.lease_expires_at) {
                    (RunState::Processing, Some(at)) => (at - self.clock.now_ms()).max(0),
                    _ => self.config.in_flight_retry_after_ms,
                };
                retry_after_secs = Some((wait_ms + 999) / 1000);
            }
            ClaimOutcome::Exhausted(run) => {
                self.events
                    .run_recovered(ns, crate::ledger::reclaim::BUDGET_EXHAUSTED);
                tracing::warn!(
                    namespace = ns,
                    reclaims = run.reclaims,
                    "reclaim budget exhausted; the run is dead-lettered for an operator"
                );
            }
            ClaimOutcome::Conflict(run) => {
                self.events.payload_conflict(ns);
                tracing::warn!(
                    namespace = ns,
                    "payload conflict: same key, different payload hash"
                );
                return Err(LedgerError::PayloadConflict {
                    run: Box::new(run.clone()),
                    offered_hash: req.payload_hash.to_string(),
                });
            }
            _ => {}
        }
        Ok(Claimed {
            outcome,
            retry_after_secs,
        })
    }

    /// Counts a completed key answered by a read of the caller's own (the
    /// proxy's kept answer) as the duplicate claim it stands for, as
    /// [`Ledger::claim`] counts the claims the store answers.
    pub fn replayed(&self, namespace: &Namespace) {
        self.events
            .claim_answered(namespace.as_str(), ClaimOutcome::DUPLICATE);
    }

    /// The lease a caller asked for (the default when `None`), within the
    /// bounds.
    ///
    /// # Errors
    /// [`super::InvalidId`] (field `lease_ms`) outside them.
    pub fn lease(&self, requested: Option<i64>) -> Result<LeaseMs, super::InvalidId> {
        LeaseMs::within(
            requested,
            self.config.default_lease_ms,
            self.config.max_lease_ms,
        )
    }

    /// Renews the caller's lease for `lease`, never past the longest total
    /// life.
    ///
    /// # Errors
    /// [`StoreError::LostOwnership`] when the lease lost the run.
    pub async fn renew(&self, call: &OwnerCall, lease: LeaseMs) -> Result<Moved, StoreError> {
        self.store
            .renew(call, lease.get(), self.config.max_lease_life_ms)
            .await
    }

    /// Moves the caller's run out of `processing` (complete or fail), counted.
    ///
    /// # Errors
    /// [`StoreError::LostOwnership`] when the lease lost the run.
    pub async fn finish(&self, call: &OwnerCall, mv: &OwnerMove) -> Result<Moved, StoreError> {
        let moved = self.store.finish(call, mv).await?;
        self.events.run_moved(&moved.run);
        Ok(moved)
    }

    /// One run.
    ///
    /// # Errors
    /// The store failed.
    pub async fn run(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
    ) -> Result<Option<Run>, StoreError> {
        self.store.get_run(namespace, key).await
    }
}

/// Keeps an error message safe to store and show: bounded, one line.
pub fn sanitise_error(error: &str) -> String {
    const MAX: usize = 2_000;
    let mut clean: String = error
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.len() > MAX {
        let mut cut = MAX;
        while !clean.is_char_boundary(cut) {
            cut -= 1;
        }
        clean.truncate(cut);
        clean.push('…');
    }
    clean
}
