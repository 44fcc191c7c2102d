//! Replay after a fix (DESIGN.md §7), as use cases over the store: the
//! dry run of a correction, and the replay that sends it. The pure rules
//! (which effect, the patch, the key) are in [`super::correct`]; the
//! replay itself is [`super::replay::replay_one`], which writes the
//! corrected body in the same transaction that closes the record and
//! re-queues the run's effects.

use super::commands::{ActionOutcome, EffectCorrection, ReplayCommand};
use super::correct::{self, Corrected, Correction, Preview};
use super::replay::{replay_one, ReplayContext, ReplayError};
use super::Refusal;
use crate::ledger::storage::StoreError;
use crate::ledger::{IdempotencyKey, Namespace};
use crate::outbox::Effect;

/// A correction an operator asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Fix {
    /// The corrected body, whole or by transform.
    pub correction: Correction,
    /// The effect to correct; by default the one whose request failed.
    pub effect_id: Option<String>,
}

/// The correction of dead letter `id` planned against its effect.
async fn planned(
    ctx: &ReplayContext,
    id: &str,
    fix: &Fix,
) -> Result<(Effect, Corrected), ReplayError> {
    let Some(dl) = ctx.store.dead_letter(id).await? else {
        return Err(ReplayError::Refused(Refusal::NotFound));
    };
    if let Some(resolution) = dl.resolution {
        return Err(ReplayError::Refused(Refusal::AlreadyResolved(resolution)));
    }
    if !dl.class.stops_run() {
        return Err(ReplayError::Refused(Refusal::NothingToReplay));
    }
    let corrupt = |e: crate::ledger::InvalidId| StoreError::Corrupt(e.to_string());
    let ns = Namespace::parse(dl.namespace.clone()).map_err(corrupt)?;
    let key = IdempotencyKey::parse(dl.key.clone()).map_err(corrupt)?;
    let effects = ctx.store.effects_of(&ns, &key).await?;
    let failed = dl
        .last_request
        .as_ref()
        .and_then(|r| r.get("effect_id"))
        .and_then(serde_json::Value::as_str);
    let effect = correct::pick(&effects, fix.effect_id.as_deref(), failed)?.clone();
    let attempts = ctx.store.attempts(&effect.id).await?;
    let corrected = correct::plan(
        &dl.id,
        &effect,
        &attempts,
        &fix.correction,
        &ctx.config.transforms,
    )?;
    Ok((effect, corrected))
}

/// The dry run: what the replay would send, its diff, hashes and key;
/// nothing is written.
///
/// # Errors
/// [`ReplayError`]: the record cannot be replayed, or the correction
/// cannot be made.
pub async fn preview(ctx: &ReplayContext, id: &str, fix: &Fix) -> Result<Preview, ReplayError> {
    let (effect, corrected) = planned(ctx, id, fix).await?;
    Ok(correct::preview(
        corrected,
        &effect,
        &effect.namespace,
        &ctx.redactor,
    ))
}

/// Replays dead letter `cmd.id` with its effect's body corrected; the
/// audit entry of the replay records the transform, the hashes before and
/// after and the keys beside the operator and the reason.
///
/// # Errors
/// [`ReplayError`]; a refusal of the store comes back as `Ok(Refused)`.
pub async fn replay_fixed(
    ctx: &ReplayContext,
    mut cmd: ReplayCommand,
    fix: &Fix,
) -> Result<ActionOutcome, ReplayError> {
    let (_, corrected) = planned(ctx, &cmd.id, fix).await?;
    cmd.correction = Some(EffectCorrection {
        effect_id: corrected.effect_id.clone(),
        idempotency_key: corrected.key_after.clone(),
        audit: corrected.audit(),
        body: corrected.body,
    });
    replay_one(ctx, cmd).await
}
