//! The operator's forwards of a stored delivery (DESIGN.md §3):
//! **forward anyway** a `duplicate_of` event (once: it becomes the run of
//! its own event id, never again), and **redeliver** an event that reached
//! its workflow (each time a new run, `<event id>~redelivery-<n>`). Both
//! are audited on the new run and noted on the run they link to; the API
//! and the console call [`DeliveryActions::forward`] and map
//! [`ForwardError`].

use serde_json::{json, Value};
use tokio::sync::Notify;

use super::delivery::forward_effect;
use super::log::{DeliveryEntry, DeliveryOutcome};
use super::logbook::Logbook;
use super::port::{DeliveryStore, IngressStore};
use super::prepared::Sources;
use super::{RawEvent, FORWARD_OPERATION};
use crate::ledger::storage::StoreError;
use crate::ledger::{ClaimRequest, IdempotencyKey, Namespace, PayloadHash, Run, RunMetadata};
use crate::outbox::{default_idempotency_key, NewEffect};

/// Which forward an operator asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardAsk {
    /// Forward a `duplicate_of` delivery anyway, once.
    Anyway,
    /// Send an event that reached its workflow again, as a new run.
    Redeliver,
}

/// What an operator's forward made: the new run, and the entry after it.
#[derive(Debug, Clone)]
pub struct ForwardDone {
    /// The new run (approved, its forward queued).
    pub run: Run,
    /// The log entry after the forward.
    pub entry: DeliveryEntry,
}

/// Which forward the store makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardKind {
    /// A `duplicate_of` delivery forwarded as the run of its own event id.
    Anyway,
    /// A stored event forwarded again under a new key; `n` is this
    /// redelivery's number (the entry's count before it, plus one).
    Redeliver {
        /// The redelivery's number.
        n: i64,
    },
}

/// What the store does for an operator's forward.
#[derive(Debug, Clone)]
pub struct ForwardCommand {
    /// The log entry.
    pub delivery_id: String,
    /// Forward anyway, or the how-manieth redelivery.
    pub kind: ForwardKind,
    /// The operator (the actor in the audit log).
    pub actor: String,
    /// The new run's claim.
    pub claim: ClaimRequest,
    /// Its forward effect.
    pub effect: NewEffect,
    /// The run the forward links to (the holder, or the event's own run).
    pub linked: Option<(String, String)>,
    /// The audit detail linking them (delivery, raw event, reason).
    pub link: Value,
}

/// What the store's forward came to.
#[derive(Debug, Clone)]
pub enum ForwardOutcome {
    /// Claimed, approved, forward queued.
    Done(Box<Run>),
    /// The entry was forwarded already (its run's key).
    AlreadyForwarded(String),
    /// The entry changed meanwhile (another redelivery): nothing done.
    Changed,
    /// A run holds the key already: nothing done.
    KeyTaken(Box<Run>),
}

/// Why an operator's forward was refused; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// No such entry in the log.
    #[error("no delivery {0:?} in the log")]
    NotFound(String),
    /// Forward anyway is for `duplicate_of` deliveries only.
    #[error("delivery {id} is {outcome}; only a duplicate_of delivery is forwarded anyway")]
    NotDuplicateOf {
        /// The entry.
        id: String,
        /// Its outcome.
        outcome: DeliveryOutcome,
    },
    /// Forward anyway happens once.
    #[error("delivery {id} was forwarded already, as run {key}")]
    AlreadyForwarded {
        /// The entry.
        id: String,
        /// The run it was forwarded as.
        key: String,
    },
    /// Redelivery is for events that reached their workflow.
    #[error("delivery {id} is {outcome}: only an accepted event, or a duplicate_of one forwarded anyway, is redelivered")]
    NotRedeliverable {
        /// The entry.
        id: String,
        /// Its outcome.
        outcome: DeliveryOutcome,
    },
    /// The stored body is not the one that arrived (redaction rules), or
    /// the raw event is gone (retention).
    #[error("{0}")]
    BodyUnavailable(String),
    /// The source is no longer configured.
    #[error("source {0:?} is no longer configured")]
    SourceGone(String),
    /// A run holds the key already.
    #[error("run {key} exists already ({state}); nothing was forwarded")]
    KeyTaken {
        /// The key.
        key: String,
        /// Its run's state.
        state: String,
    },
    /// The entry changed meanwhile; read it again.
    #[error(
        "delivery {0} changed meanwhile (another redelivery); nothing was forwarded, try again"
    )]
    Changed(String),
    /// The new run's key would be unusable.
    #[error("{0}")]
    Unusable(String),
    /// The store failed; nothing was changed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What an operator's forward needs: the prepared sources, the log's
/// buffer and storage, the dispatcher's wake-up, and the lease new runs
/// are claimed with.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryActions<'a> {
    /// The configured sources (the forward's target and path).
    pub sources: &'a Sources,
    /// The log's buffer, flushed first so the entry is there to read.
    pub logbook: &'a Logbook,
    /// The log.
    pub deliveries: &'a dyn DeliveryStore,
    /// The raw events.
    pub events: &'a dyn IngressStore,
    /// Wakes the dispatcher when a forward is queued.
    pub wake: &'a Notify,
    /// The lease a new run is claimed with.
    pub lease_ms: i64,
}

impl DeliveryActions<'_> {
    /// The operator `actor`'s forward of entry `id` for `reason`, once
    /// `reach` (the caller's say over the entry's source) lets it through.
    ///
    /// # Errors
    /// What `reach` refuses with, or a [`ForwardError`]; nothing changed.
    pub async fn forward<E: From<ForwardError>>(
        &self,
        id: &str,
        ask: ForwardAsk,
        actor: &str,
        reason: &str,
        reach: impl FnOnce(&DeliveryEntry) -> Result<(), E>,
    ) -> Result<ForwardDone, E> {
        self.logbook.flush().await;
        let entry = self.entry(id).await?;
        reach(&entry)?;
        let run = match ask {
            ForwardAsk::Anyway => self.forward_anyway(entry, actor, reason).await,
            ForwardAsk::Redeliver => self.redeliver(entry, actor, reason).await,
        }?;
        let entry = self.entry(id).await?;
        Ok(ForwardDone { run, entry })
    }

    /// Forwards a `duplicate_of` delivery as the run of its own event id.
    async fn forward_anyway(
        &self,
        entry: DeliveryEntry,
        actor: &str,
        reason: &str,
    ) -> Result<Run, ForwardError> {
        if entry.outcome != DeliveryOutcome::DuplicateOf {
            return Err(ForwardError::NotDuplicateOf {
                id: entry.id,
                outcome: entry.outcome,
            });
        }
        if let Some(f) = entry.forwarded {
            return Err(ForwardError::AlreadyForwarded {
                id: entry.id,
                key: f.key,
            });
        }
        let raw = self.stored(&entry).await?;
        let key = raw.event_id.clone();
        let effect = self.effect(&raw, &key, None)?;
        let link = json!({ "forward_anyway": { "delivery_id": entry.id, "raw_event_id": raw.id,
            "duplicate_of": linked_json(entry.run.as_ref()) }, "reason": reason });
        let cmd = self.command(&entry, &raw, ForwardKind::Anyway, key, effect, actor, link)?;
        self.run(cmd).await
    }

    /// Forwards a stored event to its workflow again, as a new run.
    async fn redeliver(
        &self,
        entry: DeliveryEntry,
        actor: &str,
        reason: &str,
    ) -> Result<Run, ForwardError> {
        let reached = match entry.outcome {
            DeliveryOutcome::Accepted => true,
            DeliveryOutcome::DuplicateOf => entry.forwarded.is_some(),
            _ => false,
        };
        if !reached {
            return Err(ForwardError::NotRedeliverable {
                id: entry.id,
                outcome: entry.outcome,
            });
        }
        let raw = self.stored(&entry).await?;
        let n = entry.redeliveries + 1;
        let key = format!("{}~redelivery-{n}", raw.event_id);
        let effect = self.effect(&raw, &key, Some(n))?;
        let original = match &entry.forwarded {
            Some(f) => Some((raw.source.clone(), f.key.clone())),
            None => entry.run.clone(),
        };
        let link = json!({ "redelivers": { "delivery_id": entry.id, "raw_event_id": raw.id,
            "n": n, "original": linked_json(original.as_ref()) }, "reason": reason });
        let mut cmd = self.command(
            &entry,
            &raw,
            ForwardKind::Redeliver { n },
            key,
            effect,
            actor,
            link,
        )?;
        cmd.linked = original;
        self.run(cmd).await
    }

    async fn entry(&self, id: &str) -> Result<DeliveryEntry, ForwardError> {
        self.deliveries
            .delivery(id)
            .await?
            .ok_or_else(|| ForwardError::NotFound(id.to_owned()))
    }

    /// The entry's raw event, with the body exactly as it arrived.
    async fn stored(&self, entry: &DeliveryEntry) -> Result<RawEvent, ForwardError> {
        let gone = || {
            ForwardError::BodyUnavailable(format!(
                "delivery {} has no stored body (retention removed it)",
                entry.id
            ))
        };
        let raw_id = entry.raw_event_id.as_deref().ok_or_else(gone)?;
        let raw = self.events.raw_event(raw_id).await?.ok_or_else(gone)?;
        if PayloadHash::of_bytes(&raw.body) != raw.payload_hash {
            return Err(ForwardError::BodyUnavailable(format!(
                "the stored body of delivery {} was redacted before storage; it cannot be forwarded as it arrived",
                entry.id
            )));
        }
        Ok(raw)
    }

    /// The forward of `raw` under `key`.
    fn effect(&self, raw: &RawEvent, key: &str, n: Option<i64>) -> Result<NewEffect, ForwardError> {
        let source = self
            .sources
            .get(&raw.source)
            .ok_or_else(|| ForwardError::SourceGone(raw.source.clone()))?;
        let mut effect = forward_effect(source, raw);
        effect.idempotency_key = default_idempotency_key(&raw.source, key, "forward");
        if let Some(n) = n {
            effect
                .headers
                .insert("x-oncegate-redelivery".into(), n.to_string());
        }
        Ok(effect)
    }

    #[allow(clippy::too_many_arguments)]
    fn command(
        &self,
        entry: &DeliveryEntry,
        raw: &RawEvent,
        kind: ForwardKind,
        key: String,
        effect: NewEffect,
        actor: &str,
        link: Value,
    ) -> Result<ForwardCommand, ForwardError> {
        let unusable =
            |e: crate::ledger::InvalidId| ForwardError::Unusable(format!("the new run's {e}"));
        let claim = ClaimRequest {
            namespace: Namespace::parse(raw.source.clone()).map_err(unusable)?,
            key: IdempotencyKey::parse(key).map_err(unusable)?,
            business_key: None,
            payload_hash: raw.payload_hash.clone(),
            lease_ms: self.lease_ms,
            metadata: RunMetadata {
                operation: Some(FORWARD_OPERATION.into()),
                requested_by: Some(actor.to_owned()),
                ..RunMetadata::default()
            },
            claimed_by: actor.to_owned(),
        };
        Ok(ForwardCommand {
            delivery_id: entry.id.clone(),
            kind,
            actor: actor.to_owned(),
            claim,
            effect,
            linked: entry.run.clone(),
            link,
        })
    }

    async fn run(&self, cmd: ForwardCommand) -> Result<Run, ForwardError> {
        match self.deliveries.forward_delivery(&cmd).await? {
            ForwardOutcome::Done(run) => {
                self.wake.notify_one();
                Ok(*run)
            }
            ForwardOutcome::AlreadyForwarded(key) => Err(ForwardError::AlreadyForwarded {
                id: cmd.delivery_id,
                key,
            }),
            ForwardOutcome::Changed => Err(ForwardError::Changed(cmd.delivery_id)),
            ForwardOutcome::KeyTaken(run) => Err(ForwardError::KeyTaken {
                key: run.key.to_string(),
                state: run.state.to_string(),
            }),
        }
    }
}

fn linked_json(run: Option<&(String, String)>) -> Value {
    run.map_or(
        Value::Null,
        |(namespace, key)| json!({ "namespace": namespace, "key": key }),
    )
}
