//! Replay after a fix (DESIGN.md §7), as use cases over the store: the
//! dry run of a correction, and the replay that sends it. The pure rules
//! (which effect, the patch, the key) are in [`super::correct`]; the
//! replay itself is [`super::replay::replay_one`], which writes the
//! corrected body in the same transaction that closes the record and
//! re-queues the run's effects.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::commands::{ActionOutcome, EffectCorrection, ReplayCommand};
use super::correct::{self, Corrected, Correction, Preview};
use super::port::ReplayStore;
use super::replay::{replay_one, ReplayContext, ReplayError};
use super::transform::TransformConfig;
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

/// A fix as a replay job stores it: the API's own shape (`body` or
/// `transform`, and `effect_id`).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FixRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    transform: Option<TransformName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    effect_id: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TransformName {
    name: String,
    version: u32,
}

impl Fix {
    /// The fix as stored with a replay job.
    pub fn to_record(&self) -> Value {
        let (body, transform) = match &self.correction {
            Correction::Body(body) => (Some(body.clone()), None),
            Correction::Transform { name, version } => (
                None,
                Some(TransformName {
                    name: name.clone(),
                    version: *version,
                }),
            ),
        };
        let record = FixRecord {
            body,
            transform,
            effect_id: self.effect_id.clone(),
        };
        // Strings, numbers and a JSON value: it always serialises.
        serde_json::to_value(record).unwrap_or_default()
    }

    /// A fix read back from [`Fix::to_record`].
    ///
    /// # Errors
    /// Why `record` is not a stored fix.
    pub fn from_record(record: &Value) -> Result<Self, String> {
        let r: FixRecord = serde_json::from_value(record.clone()).map_err(|e| e.to_string())?;
        let correction = match (r.body, r.transform) {
            (Some(body), None) => Correction::Body(body),
            (None, Some(t)) => Correction::Transform {
                name: t.name,
                version: t.version,
            },
            _ => return Err("a stored fix holds exactly one of body or transform".into()),
        };
        Ok(Self {
            correction,
            effect_id: r.effect_id,
        })
    }

    /// The fix as a job page shows it: the transform (`name@version`), or
    /// the hash of a whole corrected body (the replay's `hash_after`; the
    /// body itself is shown by the dead letter's dry run, redacted), and
    /// the effect it names.
    pub fn shown(&self) -> Value {
        let (transform, body_hash) = match &self.correction {
            Correction::Body(body) => (
                None,
                Some(crate::ledger::PayloadHash::of_bytes(body.to_string().as_bytes()).to_string()),
            ),
            Correction::Transform { name, version } => (Some(format!("{name}@{version}")), None),
        };
        serde_json::json!({ "transform": transform, "body_hash": body_hash, "effect_id": self.effect_id })
    }

    /// It corrects one named record only: a whole body, or a named effect.
    pub fn is_for_one(&self) -> bool {
        matches!(self.correction, Correction::Body(_)) || self.effect_id.is_some()
    }
}

/// The correction of dead letter `id` planned against its effect, with
/// the declared `transforms`; nothing is written.
///
/// # Errors
/// [`ReplayError`]: the record cannot be replayed, or the correction
/// cannot be made.
pub async fn plan_fix(
    store: &dyn ReplayStore,
    transforms: &[TransformConfig],
    id: &str,
    fix: &Fix,
) -> Result<(Effect, Corrected), ReplayError> {
    let Some(dl) = store.dead_letter(id).await? else {
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
    let effects = store.effects_of(&ns, &key).await?;
    let failed = dl
        .last_request
        .as_ref()
        .and_then(|r| r.get("effect_id"))
        .and_then(serde_json::Value::as_str);
    let effect = correct::pick(&effects, fix.effect_id.as_deref(), failed)?.clone();
    let attempts = store.attempts(&effect.id).await?;
    let corrected = correct::plan(&dl.id, &effect, &attempts, &fix.correction, transforms)?;
    Ok((effect, corrected))
}

/// The dry run: what the replay would send, its diff, hashes and key;
/// nothing is written.
///
/// # Errors
/// [`ReplayError`]: the record cannot be replayed, or the correction
/// cannot be made.
pub async fn preview(ctx: &ReplayContext, id: &str, fix: &Fix) -> Result<Preview, ReplayError> {
    let (effect, corrected) = plan_fix(ctx.store.as_ref(), &ctx.config.transforms, id, fix).await?;
    Ok(correct::preview(
        corrected,
        &effect,
        &effect.namespace,
        &ctx.redactor,
    ))
}

/// Replays dead letter `cmd.id` with its effect's body corrected; the
/// audit entry of the replay records the transform, the hashes before and
/// after and the keys beside the operator and the reason. A job's item
/// (`cmd.job_item`) is planned here, when the job reaches it, against the
/// body as it is then.
///
/// # Errors
/// [`ReplayError`]; a refusal of the store comes back as `Ok(Refused)`.
pub async fn replay_fixed(
    ctx: &ReplayContext,
    mut cmd: ReplayCommand,
    fix: &Fix,
) -> Result<ActionOutcome, ReplayError> {
    let transforms = &ctx.config.transforms;
    let (_, corrected) = plan_fix(ctx.store.as_ref(), transforms, &cmd.id, fix).await?;
    cmd.correction = Some(EffectCorrection {
        effect_id: corrected.effect_id.clone(),
        idempotency_key: corrected.key_after.clone(),
        audit: corrected.audit(),
        body: corrected.body,
    });
    replay_one(ctx, cmd).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_fix_round_trips_through_its_record() {
        let fixes = [
            Fix {
                correction: Correction::Transform {
                    name: "to_v2".into(),
                    version: 3,
                },
                effect_id: None,
            },
            Fix {
                correction: Correction::Body(json!({ "to": "b@example.com" })),
                effect_id: Some("e-1".into()),
            },
        ];
        for fix in fixes {
            assert_eq!(Fix::from_record(&fix.to_record()).unwrap(), fix);
        }
        assert!(
            !Fix::from_record(&json!({ "transform": { "name": "t", "version": 1 } }))
                .unwrap()
                .is_for_one()
        );
        assert!(Fix::from_record(&json!({})).is_err());
        assert!(Fix::from_record(
            &json!({ "body": {}, "transform": { "name": "t", "version": 1 } })
        )
        .is_err());
    }
}
