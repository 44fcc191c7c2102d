//! Replay and replacement as one operator command, shared by the API and
//! the bulk job runner: the gate check (a gated operation goes through
//! [`replay_gated`]), the re-keying of a replacement's effects, and the
//! store call that does the rest in one transaction.

use std::sync::Arc;

use tokio::sync::Notify;

use super::commands::{ActionOutcome, ReplaceCommand, ReplayCommand};
use super::four_eyes::{self, FourEyes};
use super::port::ReplayStore;
use super::record::DeadLetter;
use super::{DeadLetterClass, DeadLetterConfig, Refusal};
use crate::approval::{GatePolicy, OperationConfig};
use crate::audit::Redactor;
use crate::clock::Millis;
use crate::ingress::{RawEvent, RawStatus, FORWARD_OPERATION};
use crate::ledger::storage::StoreError;
use crate::ledger::{IdempotencyKey, Namespace, RunMetadata};
use crate::outbox::{default_idempotency_key, Effect, NewEffect};

/// What a replay needs besides the command.
#[derive(Debug, Clone)]
pub struct ReplayContext {
    /// The records, runs, effects and deliveries a replay reads and moves.
    pub store: Arc<dyn ReplayStore>,
    /// The declared operations: their gates and key templates.
    pub operations: Arc<[OperationConfig]>,
    /// How long a closed dead letter is kept (`dead_letters.retention_days`).
    pub retain_ms: Millis,
    /// Wakes the dispatcher when effects are re-queued.
    pub wake: Arc<Notify>,
    /// The declared body transforms and the four-eyes operations.
    pub config: Arc<DeadLetterConfig>,
    /// The redaction rules a dry run shows bodies through.
    pub redactor: Arc<Redactor>,
}

impl ReplayContext {
    /// The context over `store` for these operations and dead-letter
    /// settings; `wake` tells the dispatcher about re-queued effects.
    pub fn new(
        store: Arc<dyn ReplayStore>,
        operations: &[OperationConfig],
        dead_letters: &DeadLetterConfig,
        wake: Arc<Notify>,
        redactor: Arc<Redactor>,
    ) -> Self {
        Self {
            store,
            operations: operations.into(),
            retain_ms: dead_letters.retain_ms(),
            wake,
            config: Arc::new(dead_letters.clone()),
            redactor,
        }
    }

    /// The declared operation with this name.
    fn operation(&self, name: &str) -> Option<&OperationConfig> {
        operation(&self.operations, name)
    }
}

/// The operation with this name among `operations`.
fn operation<'a>(operations: &'a [OperationConfig], name: &str) -> Option<&'a OperationConfig> {
    operations.iter().find(|o| o.name == name)
}

/// A replacement of a gated operation's dead letter: the corrected event
/// must come from upstream under its new key and pass the gate there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "operation {operation:?} is gated ({gate}): a replacement of dead letter {dead_letter_id} \
     must come from upstream under its new key and pass the gate there (or replay it, which asks \
     for a new approval); nothing was changed"
)]
pub struct ReplayRequiresApproval {
    /// The dead letter.
    pub dead_letter_id: String,
    /// The gated operation.
    pub operation: String,
    /// Its gate policy.
    pub gate: &'static str,
}

/// Why a replay or replacement did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The store refused it (not found, already resolved, run moved on…).
    #[error("{}", .0.describe())]
    Refused(Refusal),
    /// The operation is gated: a new approval is needed.
    #[error(transparent)]
    RequiresApproval(#[from] ReplayRequiresApproval),
    /// The run or its effects name an operation the config no longer declares.
    #[error("operation {0:?} is no longer declared in the config; declare it or resolve the dead letter")]
    UndeclaredOperation(String),
    /// The corrected body cannot be made (unknown transform, one for another
    /// operation, a patch that does not apply…).
    #[error(transparent)]
    Correction(#[from] super::correct::CorrectionError),
    /// The operation needs a second operator to start its replay.
    #[error(transparent)]
    FourEyes(#[from] FourEyes),
    /// A replacement needs effects to carry over, and the run has none.
    #[error("the run queued no effect, so there is nothing to replace: replay it so the workflow re-runs under the same key, or resolve it")]
    NothingToReplace,
    /// The store failed.
    #[error("store failure")]
    Store(#[from] StoreError),
}

/// The gated branch of a replay (DESIGN.md §7: "goes through the gate
/// again when the operation is gated"): in one transaction the record is
/// closed as replayed, the run moves `dead_lettered → awaiting_human`, and
/// a new challenge stages the run's unfinished effects; approving it
/// re-queues them under the same keys. The new challenge has no link (a
/// link would have to be stored to be delivered): approvers find it in the
/// approvals inbox. A corrected effect is staged with its corrected body
/// and key, so the approver decides on what will be sent.
///
/// # Errors
/// [`ReplayError`]; a refusal of the store comes back as `Ok(Refused)`.
pub async fn replay_gated(
    ctx: &ReplayContext,
    dead_letter: &DeadLetter,
    gate: (&str, GatePolicy),
    replay: &ReplayCommand,
) -> Result<ActionOutcome, ReplayError> {
    let (actor, reason) = (&replay.actor, &replay.reason);
    let Some(op) = ctx.operation(gate.0) else {
        return Err(ReplayError::UndeclaredOperation(gate.0.to_owned()));
    };
    let corrupt = |e: crate::ledger::InvalidId| StoreError::Corrupt(e.to_string());
    let ns = Namespace::parse(dead_letter.namespace.clone()).map_err(corrupt)?;
    let key = IdempotencyKey::parse(dead_letter.key.clone()).map_err(corrupt)?;
    let staged: Vec<NewEffect> = ctx
        .store
        .effects_of(&ns, &key)
        .await?
        .into_iter()
        .filter(|e| {
            !matches!(
                e.state,
                crate::outbox::EffectState::Completed | crate::outbox::EffectState::Cancelled
            )
        })
        .map(|e| match &replay.correction {
            Some(c) if c.effect_id == e.id => NewEffect {
                body: Some(c.body.clone()),
                idempotency_key: c.idempotency_key.clone(),
                ..e.new
            },
            _ => e.new,
        })
        .collect();
    let card = serde_json::json!({
        "summary": format!("Replay of dead letter {} ({})", dead_letter.id, dead_letter.class.as_str()),
        "reason": format!("operator {actor} replayed it: {reason}"),
        "policy": gate.1.as_str(),
    });
    let now = chrono::Utc::now().timestamp_millis();
    let (mut challenge, _link) = crate::approval::first_challenge(op, staged, None, card, now);
    challenge.token_hash = None;
    let cmd = ReplayCommand {
        id: dead_letter.id.clone(),
        retain_ms: ctx.retain_ms,
        challenge: Some(challenge),
        release: false,
        ..replay.clone()
    };
    Ok(ctx.store.replay_dead_letter(&cmd).await?)
}

/// The gated operation among the run's and its effects', if any.
///
/// # Errors
/// [`ReplayError::UndeclaredOperation`] for an effect whose operation is gone.
pub fn gate_of(
    operations: &[OperationConfig],
    dl: &DeadLetter,
    effects: &[Effect],
) -> Result<Option<(String, GatePolicy)>, ReplayError> {
    let gated = |name: &str| {
        operation(operations, name)
            .and_then(|op| op.gate())
            .filter(|g| *g != GatePolicy::None)
    };
    if dl.class == DeadLetterClass::ApprovalExpired {
        let op = dl.operation.clone().unwrap_or_else(|| "unknown".into());
        let gate = gated(&op).unwrap_or(GatePolicy::ApproveBeforeAct);
        return Ok(Some((op, gate)));
    }
    for effect in effects {
        let op = &effect.new.operation;
        if op == FORWARD_OPERATION {
            continue;
        }
        if operation(operations, op).is_none() {
            return Err(ReplayError::UndeclaredOperation(op.clone()));
        }
        if let Some(gate) = gated(op) {
            return Ok(Some((op.clone(), gate)));
        }
    }
    let run_gate = dl
        .operation
        .as_deref()
        .and_then(|op| gated(op).map(|g| (op.to_owned(), g)));
    Ok(run_gate)
}

async fn open_record(ctx: &ReplayContext, id: &str) -> Result<Option<DeadLetter>, ReplayError> {
    Ok(ctx.store.dead_letter(id).await?.filter(DeadLetter::is_open))
}

/// Replays one dead letter: the gate decides between [`replay_gated`] and
/// the store's ungated replay (same effects, same keys). Outside a job, a
/// four-eyes operation is refused ([`FourEyes::JobRequired`]): a job's
/// items passed the second operator when it was started.
///
/// # Errors
/// [`ReplayError`]; a refusal of the store comes back as `Ok(Refused)`.
pub async fn replay_one(
    ctx: &ReplayContext,
    cmd: ReplayCommand,
) -> Result<ActionOutcome, ReplayError> {
    if let Some(dl) = open_record(ctx, &cmd.id).await? {
        let (ns, key) = (
            Namespace::parse(dl.namespace.clone()),
            IdempotencyKey::parse(dl.key.clone()),
        );
        // A release never passes a gate: the run goes back to the
        // workflow, whose own writes are gated where they are made.
        if let (Ok(ns), Ok(key), true) = (ns, key, dl.class.stops_run() && !cmd.release) {
            let effects = ctx.store.effects_of(&ns, &key).await?;
            let ops = dl
                .operation
                .iter()
                .map(String::as_str)
                .chain(effects.iter().map(|e| e.new.operation.as_str()));
            if let (None, Some(op)) = (&cmd.job_item, four_eyes::guarded(&ctx.config, ops)) {
                return Err(FourEyes::JobRequired(op.to_owned()).into());
            }
            if let Some((op, gate)) = gate_of(&ctx.operations, &dl, &effects)? {
                return replay_gated(ctx, &dl, (&op, gate), &cmd).await;
            }
        }
    }
    let outcome = ctx.store.replay_dead_letter(&cmd).await?;
    if matches!(outcome, ActionOutcome::Done { effects, .. } if effects > 0) {
        ctx.wake.notify_one();
    }
    Ok(outcome)
}

/// Replaces one dead letter with a new event under `new_key` (supplied by
/// the operator from the upstream system; never derived here): the same
/// intended effects, keyed for the new key by their operations' templates,
/// and for an ingress event the stored delivery (the quarantined body, for
/// a payload conflict) under the new event id.
///
/// # Errors
/// [`ReplayError`]; a refusal of the store comes back as `Ok(Refused)`.
pub async fn replace_one(
    ctx: &ReplayContext,
    id: &str,
    new_key: IdempotencyKey,
    actor: &str,
    reason: &str,
) -> Result<ActionOutcome, ReplayError> {
    let Some(dl) = ctx.store.dead_letter(id).await? else {
        return Err(ReplayError::Refused(Refusal::NotFound));
    };
    if let Some(resolution) = dl.resolution {
        return Err(ReplayError::Refused(Refusal::AlreadyResolved(resolution)));
    }
    let corrupt = |e: crate::ledger::InvalidId| StoreError::Corrupt(e.to_string());
    let ns = Namespace::parse(dl.namespace.clone()).map_err(corrupt)?;
    let key = IdempotencyKey::parse(dl.key.clone()).map_err(corrupt)?;
    let run = ctx.store.get_run(&ns, &key).await?;
    let effects = ctx.store.effects_of(&ns, &key).await?;
    if effects.is_empty() {
        return Err(ReplayError::NothingToReplace);
    }
    let raw = match &dl.raw_event_id {
        Some(raw_id) => ctx.store.raw_event(raw_id).await?,
        None => None,
    };
    let now = chrono::Utc::now().timestamp_millis();
    let new_effects = effects
        .iter()
        .map(|e| {
            rekey(
                &ctx.operations,
                e,
                &dl.namespace,
                new_key.as_str(),
                raw.as_ref(),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let payload_hash = match (&raw, &run) {
        (Some(raw), _) => raw.payload_hash.clone(),
        (None, Some(run)) => run.payload_hash.clone(),
        (None, None) => return Err(ReplayError::Refused(Refusal::RunNotDeadLettered(None))),
    };
    let metadata = run.as_ref().map(|r| RunMetadata {
        correlation_id: None,
        execution_ref: None,
        ..r.metadata.clone()
    });
    let raw_event = raw.map(|raw| RawEvent {
        id: uuid::Uuid::now_v7().to_string(),
        event_id: new_key.to_string(),
        status: RawStatus::Accepted,
        received_at: now,
        ..raw
    });
    let cmd = ReplaceCommand {
        id: dl.id.clone(),
        actor: actor.to_owned(),
        reason: reason.to_owned(),
        retain_ms: ctx.retain_ms,
        new_key,
        payload_hash,
        metadata: metadata.unwrap_or_default(),
        effects: new_effects,
        raw_event,
    };
    // A gated replacement is refused: the corrected event should come from
    // upstream under its new key and pass the gate there.
    if let Some((op, gate)) = gate_of(&ctx.operations, &dl, &effects)? {
        return Err(ReplayRequiresApproval {
            dead_letter_id: dl.id.clone(),
            operation: op,
            gate: gate.as_str(),
        }
        .into());
    }
    let outcome = ctx.store.replace_dead_letter(&cmd).await?;
    if matches!(outcome, ActionOutcome::Done { .. }) {
        ctx.wake.notify_one();
    }
    Ok(outcome)
}

/// The replacement of one effect: same target, method, URL and body, the
/// key its operation gives the new run key; an ingress forward carries the
/// stored delivery's body and the new event id.
fn rekey(
    operations: &[OperationConfig],
    effect: &Effect,
    namespace: &str,
    new_key: &str,
    raw: Option<&RawEvent>,
) -> Result<NewEffect, ReplayError> {
    let mut new = effect.new.clone();
    new.not_before = None;
    if new.operation == FORWARD_OPERATION {
        new.idempotency_key = default_idempotency_key(namespace, new_key, &new.effect_type);
        new.headers
            .insert("x-oncegate-event-id".into(), new_key.to_owned());
        if let Some(raw) = raw {
            new.body = Some(raw.body.clone());
        }
    } else {
        let op = operation(operations, &new.operation)
            .ok_or_else(|| ReplayError::UndeclaredOperation(new.operation.clone()))?;
        new.idempotency_key = op.key_for(namespace, new_key, &new.effect_type);
    }
    Ok(new)
}
