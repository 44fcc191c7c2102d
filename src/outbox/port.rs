//! The outbox's storage port: effects committed with the move that
//! permits them, leased and recorded by the dispatcher, and the kill switch.

use async_trait::async_trait;
use serde_json::Value;

use super::health::{HealthConfig, Signal, TargetHealth};
use super::{ActionSwitch, AttemptView, Decision, Effect, Leased, NewEffect, Recorded, TargetRoom};
use crate::ledger::storage::Result;
use crate::ledger::{IdempotencyKey, Moved, Namespace, OwnerCall};

/// Storage calls of the outbox and its dispatcher.
#[async_trait]
pub trait OutboxStore: Send + Sync + std::fmt::Debug {
    /// The owner's decision: queues `effects` and moves the run to
    /// `approved` (or `completed` when there are none) with its result, by
    /// compare-and-set, in one transaction. An effect already queued for
    /// the same (run, effect type, target) is not queued twice.
    ///
    /// # Errors
    /// [`StoreError::LostOwnership`](crate::ledger::storage::StoreError::LostOwnership)
    /// when the lease is not live and current.
    async fn commit(
        &self,
        call: &OwnerCall,
        result: Option<&Value>,
        effects: &[NewEffect],
    ) -> Result<Moved>;

    /// Leases, in one transaction, up to `limit` due effects of approved
    /// runs on enabled targets: of each target in `rooms`, in turn, up to
    /// its own limit (each target's oldest due first). Targets not named
    /// are left alone.
    ///
    /// # Errors
    /// On database failure.
    async fn lease_effects(
        &self,
        owner: &str,
        lease_ms: i64,
        limit: i64,
        rooms: &[TargetRoom],
    ) -> Result<Vec<Leased>>;

    /// Records decisions in one transaction (one durable commit for a
    /// batch): each effect's verdict by compare-and-set on its lease, its
    /// attempt evidence and its run's resulting move. One [`Recorded`] per
    /// decision, in order: [`Recorded::Lost`] when its lease was lost
    /// (nothing written for it), else whether its run reached a final state.
    ///
    /// # Errors
    /// On database failure; nothing is written.
    async fn record_decisions(&self, decisions: &[Decision]) -> Result<Vec<Recorded>>;

    /// Marks `sending` effects whose lease expired as `unknown` (never back
    /// to `pending`: the dead dispatcher may have sent them).
    ///
    /// # Errors
    /// On database failure.
    async fn expire_sending(&self) -> Result<u64>;

    /// Cancels a pending effect; `None` when it is not pending.
    ///
    /// # Errors
    /// On database failure.
    async fn cancel_effect(&self, id: &str, actor: &str) -> Result<Option<Effect>>;

    /// One effect by id.
    ///
    /// # Errors
    /// On database failure.
    async fn effect(&self, id: &str) -> Result<Option<Effect>>;

    /// An effect's attempts, in order.
    ///
    /// # Errors
    /// On database failure.
    async fn attempts(&self, effect_id: &str) -> Result<Vec<AttemptView>>;

    /// A run's effects, oldest first.
    ///
    /// # Errors
    /// On database failure.
    async fn effects_of(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Vec<Effect>>;

    /// Sets the kill switch for `scope` (`*` or a target), audited with the actor.
    ///
    /// # Errors
    /// On database failure.
    async fn set_actions(&self, scope: &str, enabled: bool, actor: &str) -> Result<()>;

    /// Every kill-switch scope that was ever set.
    ///
    /// # Errors
    /// On database failure.
    async fn action_switches(&self) -> Result<Vec<ActionSwitch>>;

    /// Applies an attempt's health `signal` to `target` (`probe`: the
    /// attempt was its half-open probe) under `policy`, with the target's
    /// row locked so instances count together; a state change is audited
    /// with its cause and `actor`. The target's health after it.
    ///
    /// # Errors
    /// On database failure; nothing changed.
    async fn note_health(
        &self,
        target: &str,
        signal: &Signal,
        probe: bool,
        policy: &HealthConfig,
        actor: &str,
    ) -> Result<TargetHealth>;

    /// An operator enables (healthy again, its held effects go out) or
    /// disables `target`, audited with the actor. Its health after.
    ///
    /// # Errors
    /// On database failure; nothing changed.
    async fn set_target_enabled(
        &self,
        target: &str,
        enabled: bool,
        actor: &str,
    ) -> Result<TargetHealth>;

    /// Every target that ever left `healthy`, as stored.
    ///
    /// # Errors
    /// On database failure.
    async fn target_health(&self) -> Result<Vec<TargetHealth>>;
}
