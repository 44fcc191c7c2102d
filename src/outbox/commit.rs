//! The owner's side of the outbox: a commit (effects queued with the run's
//! move to `approved`, or the run completed), a run's effects with their
//! attempts, and cancelling an effect still pending.

use tokio::sync::Notify;

use super::port::OutboxStore;
use super::{AttemptView, Effect, EffectState, NewEffect};
use crate::ledger::port::LedgerStore;
use crate::ledger::storage::StoreError;
use crate::ledger::{IdempotencyKey, Moved, Namespace, OwnerCall};
use crate::metrics::Metrics;
use crate::tokens::{Namespaces, Principal, Scope};

/// What the owner's outbox calls need.
#[derive(Debug, Clone, Copy)]
pub struct Outbox<'a> {
    /// Where effects are queued and read.
    pub store: &'a dyn OutboxStore,
    /// Where an effect's run is read (whose token claimed it).
    pub runs: &'a dyn LedgerStore,
    /// Run-move metrics.
    pub metrics: &'a Metrics,
    /// Wakes the dispatcher when effects are queued.
    pub wake: &'a Notify,
}

/// A commit's answer: the run after the move, and every effect it has.
#[derive(Debug, Clone)]
pub struct Committed {
    /// The run after the move.
    pub moved: Moved,
    /// The run's effects, including any queued earlier.
    pub effects: Vec<Effect>,
}

/// Why a cancel did nothing.
#[derive(Debug, thiserror::Error)]
pub enum CancelError {
    /// No effect has this id.
    #[error("no effect {0}")]
    NotFound(String),
    /// It is no longer pending.
    #[error("effect {id} is {state} and can no longer be cancelled")]
    NotPending {
        /// The effect.
        id: String,
        /// Its state now.
        state: EffectState,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Outbox<'_> {
    /// Commits the owner's decision: `effects` queued and the run
    /// `approved` (`completed` with none), in one transaction.
    ///
    /// # Errors
    /// [`StoreError::LostOwnership`] when the lease lost the run; nothing
    /// is queued then.
    pub async fn commit(
        &self,
        call: &OwnerCall,
        result: Option<&serde_json::Value>,
        effects: &[NewEffect],
    ) -> Result<Committed, StoreError> {
        let moved = self.store.commit(call, result, effects).await?;
        self.metrics.run_moved(&moved.run);
        if !effects.is_empty() {
            // Committed with its effects, not yet answered (chaos tests).
            crate::chaos::point("after_effect_insert");
            self.wake.notify_one();
        }
        let effects = self.store.effects_of(&call.namespace, &call.key).await?;
        Ok(Committed { moved, effects })
    }

    /// A run's effects, each with its attempts.
    ///
    /// # Errors
    /// The store failed.
    pub async fn effects(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
    ) -> Result<Vec<(Effect, Vec<AttemptView>)>, StoreError> {
        let mut out = Vec::new();
        for effect in self.store.effects_of(namespace, key).await? {
            let attempts = self.store.attempts(&effect.id).await?;
            out.push((effect, attempts));
        }
        Ok(out)
    }

    /// Cancels an effect still pending (its run completes when nothing
    /// else is outstanding), for `caller`: an operator cancels any effect
    /// its namespaces reach, any other token only an effect of a run it
    /// claimed; any other effect answers [`CancelError::NotFound`].
    ///
    /// # Errors
    /// [`CancelError`] when there is no such effect or it was already sent.
    pub async fn cancel(&self, id: &str, caller: &Principal) -> Result<Effect, CancelError> {
        let own = !caller.has(Scope::Operator);
        if own || caller.namespaces != Namespaces::All {
            // Another token's run answers as if the effect did not exist:
            // effect ids are not secret enough to be the only guard.
            let Some(effect) = self.store.effect(id).await? else {
                return Err(CancelError::NotFound(id.to_owned()));
            };
            if !caller.reaches(&effect.namespace)
                || (own && !self.claimed_by(&effect, &caller.subject).await?)
            {
                return Err(CancelError::NotFound(id.to_owned()));
            }
        }
        let actor = caller.subject.as_str();
        if let Some(effect) = self.store.cancel_effect(id, actor).await? {
            return Ok(effect);
        }
        match self.store.effect(id).await? {
            Some(effect) => Err(CancelError::NotPending {
                id: id.to_owned(),
                state: effect.state,
            }),
            None => Err(CancelError::NotFound(id.to_owned())),
        }
    }

    /// Whether `subject` claimed the run `effect` belongs to.
    async fn claimed_by(&self, effect: &Effect, subject: &str) -> Result<bool, StoreError> {
        let (Ok(namespace), Ok(key)) = (
            Namespace::parse(effect.namespace.as_str()),
            IdempotencyKey::parse(effect.key.as_str()),
        ) else {
            return Ok(false);
        };
        let run = self.runs.get_run(&namespace, &key).await?;
        Ok(run.is_some_and(|run| run.claimed_by == subject))
    }
}
