//! Replay after a fix (DESIGN.md §7): the failed effect's body corrected,
//! given whole or by a declared transform, with its diff, its hashes
//! before and after, and the key-keeping rule.
//!
//! The rule: the corrected effect keeps its idempotency key only while the
//! target provably never accepted a request under it, that is every
//! attempt under the key was refused with a 4xx (`permanent`). Otherwise
//! the target may hold a request under that key (a 5xx, a lost answer, a
//! business rejection of an accepted request), and a target that honours
//! keys would answer the corrected body with the old result: the
//! correction goes out under a new key, `<old key>:fix:<dead letter id>`,
//! recorded in the audit log with the old one. The new key is derived from
//! the record, so a second attempt at the same replay cannot mint another.

use serde::Serialize;
use serde_json::{json, Value};

use super::transform::{self, TransformConfig};
use crate::audit::Redactor;
use crate::ledger::PayloadHash;
use crate::outbox::{AttemptClass, AttemptOutcome, AttemptView, Effect, EffectState};

/// What the operator asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Correction {
    /// The whole new body.
    Body(Value),
    /// A declared transform, by name and version.
    Transform {
        /// Its name.
        name: String,
        /// Its version.
        version: u32,
    },
}

/// Why a correction cannot be made; nothing was changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CorrectionError {
    /// No transform has this name and version.
    #[error("no transform {name}@{version} is declared in [[dead_letters.transforms]]{}",
        if known.is_empty() { String::new() } else { format!(" (declared: {})", known.join(", ")) })]
    UnknownTransform {
        /// The name asked for.
        name: String,
        /// The version asked for.
        version: u32,
        /// The declared `name@version`s.
        known: Vec<String>,
    },
    /// The transform belongs to another operation or effect type.
    #[error("transform {transform} corrects {expected}, not this effect ({actual}); nothing was changed")]
    Mismatch {
        /// `name@version`.
        transform: String,
        /// What it is declared for.
        expected: String,
        /// The effect's operation and type.
        actual: String,
    },
    /// The patch does not apply to this body (a failed `test`, a missing path).
    #[error("transform {transform} does not apply to this body: {reason}; nothing was changed")]
    PatchFailed {
        /// `name@version`.
        transform: String,
        /// What failed.
        reason: String,
    },
    /// The effect's body is not JSON, so no patch can apply.
    #[error("effect {0}'s body is not JSON: give the whole corrected body instead")]
    BodyNotJson(String),
    /// No unfinished effect of the run matches.
    #[error("{0}")]
    NoEffect(String),
    /// The correction changes nothing: that is a plain replay.
    #[error("the corrected body is the same as the body that was sent: replay without a correction, or fix the correction")]
    Unchanged,
}

/// A correction planned against one effect: what goes out, and what the
/// audit log and the dry run show.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Corrected {
    /// The effect corrected.
    pub effect_id: String,
    /// The transform (`name@version`), or `null` for a whole body.
    pub transform: Option<String>,
    /// SHA-256 of the body sent before.
    pub hash_before: String,
    /// SHA-256 of the corrected body.
    pub hash_after: String,
    /// The key the failed requests went under.
    pub key_before: String,
    /// The key the corrected request goes under.
    pub key_after: String,
    /// Why the key is kept or changed.
    pub key_rule: String,
    /// The corrected body's bytes (never serialised: the dry run shows the
    /// redacted documents).
    #[serde(skip)]
    pub body: Vec<u8>,
}

impl Corrected {
    /// Whether the effect keeps its idempotency key.
    pub fn keeps_key(&self) -> bool {
        self.key_before == self.key_after
    }

    /// What the audit log records: transform, hashes, keys; never a body.
    pub fn audit(&self) -> Value {
        json!({
            "effect_id": self.effect_id,
            "transform": self.transform,
            "hash_before": self.hash_before,
            "hash_after": self.hash_after,
            "key_before": self.key_before,
            "key_after": self.key_after,
            "key_rule": self.key_rule,
        })
    }
}

/// The dry run: the correction, the bodies before and after as the
/// redaction rules let them be shown, and the RFC 6902 diff between those.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Preview {
    /// The planned correction.
    #[serde(flatten)]
    pub corrected: Corrected,
    /// The body sent before (redacted).
    #[schema(value_type = Object)]
    pub before: Value,
    /// The corrected body (redacted).
    #[schema(value_type = Object)]
    pub after: Value,
    /// The RFC 6902 operations that turn `before` into `after`.
    #[schema(value_type = Vec<Object>)]
    pub diff: Value,
}

/// Whether the target provably never accepted a request under the key:
/// it refused every attempt with a 4xx.
pub fn never_accepted(attempts: &[AttemptView]) -> bool {
    !attempts.is_empty()
        && attempts.iter().all(|a| {
            let AttemptOutcome { class, status, .. } = &a.outcome;
            *class == AttemptClass::Permanent && status.is_some_and(|s| (400..500).contains(&s))
        })
}

/// The effect a correction applies to: `effect_id` if given, else the
/// failed effect the record names, else the run's only unfinished effect.
///
/// # Errors
/// [`CorrectionError::NoEffect`] when none (or more than one) fits.
pub fn pick<'a>(
    effects: &'a [Effect],
    effect_id: Option<&str>,
    failed: Option<&str>,
) -> Result<&'a Effect, CorrectionError> {
    let open: Vec<&Effect> = effects
        .iter()
        .filter(|e| !matches!(e.state, EffectState::Completed | EffectState::Cancelled))
        .collect();
    let wanted = effect_id.or(failed);
    let found = match wanted {
        Some(id) => open.iter().find(|e| e.id == id).copied(),
        None if open.len() == 1 => Some(open[0]),
        None => None,
    };
    found.ok_or_else(|| {
        CorrectionError::NoEffect(match wanted {
            Some(id) => format!("effect {id} is not an unfinished effect of this run"),
            None => format!(
                "the run has {} unfinished effects: name the one to correct (effect_id)",
                open.len()
            ),
        })
    })
}

/// Plans `correction` of `effect` for dead letter `dead_letter_id`, given
/// the effect's attempts and the declared transforms.
///
/// # Errors
/// [`CorrectionError`]; nothing is changed.
pub fn plan(
    dead_letter_id: &str,
    effect: &Effect,
    attempts: &[AttemptView],
    correction: &Correction,
    transforms: &[TransformConfig],
) -> Result<Corrected, CorrectionError> {
    let old = effect.new.body.as_deref().unwrap_or_default();
    let (body, label) = match correction {
        Correction::Body(value) => (value.clone(), None),
        Correction::Transform { name, version } => {
            let t = transform::find(transforms, name, *version).ok_or_else(|| {
                CorrectionError::UnknownTransform {
                    name: name.clone(),
                    version: *version,
                    known: transforms.iter().map(TransformConfig::label).collect(),
                }
            })?;
            (apply(t, effect, old)?, Some(t.label()))
        }
    };
    let bytes = body.to_string().into_bytes();
    let unchanged = serde_json::from_slice::<Value>(old).is_ok_and(|v| v == body);
    if unchanged {
        return Err(CorrectionError::Unchanged);
    }
    let key_before = effect.new.idempotency_key.clone();
    let (key_after, key_rule) = if never_accepted(attempts) {
        (
            key_before.clone(),
            "kept: the target refused every request under it with a 4xx".to_owned(),
        )
    } else {
        (
            format!("{key_before}:fix:{dead_letter_id}"),
            "new: the target may hold a request under the old key (an answer other than a 4xx)"
                .to_owned(),
        )
    };
    Ok(Corrected {
        effect_id: effect.id.clone(),
        transform: label,
        hash_before: PayloadHash::of_bytes(old).to_string(),
        hash_after: PayloadHash::of_bytes(&bytes).to_string(),
        key_before,
        key_after,
        key_rule,
        body: bytes,
    })
}

/// `t` applied to `effect`'s body `old`.
fn apply(t: &TransformConfig, effect: &Effect, old: &[u8]) -> Result<Value, CorrectionError> {
    let types_match = t
        .effect_type
        .as_deref()
        .is_none_or(|ty| ty == effect.new.effect_type);
    if t.operation != effect.new.operation || !types_match {
        return Err(CorrectionError::Mismatch {
            transform: t.label(),
            expected: format!(
                "operation {}{}",
                t.operation,
                t.effect_type
                    .as_deref()
                    .map(|ty| format!(", effect type {ty}"))
                    .unwrap_or_default()
            ),
            actual: format!(
                "operation {}, effect type {}",
                effect.new.operation, effect.new.effect_type
            ),
        });
    }
    let patch = t.patch().map_err(|reason| CorrectionError::PatchFailed {
        transform: t.label(),
        reason,
    })?;
    let mut doc: Value =
        serde_json::from_slice(old).map_err(|_| CorrectionError::BodyNotJson(effect.id.clone()))?;
    json_patch::patch(&mut doc, &patch).map_err(|e| CorrectionError::PatchFailed {
        transform: t.label(),
        reason: e.to_string(),
    })?;
    Ok(doc)
}

/// The dry run of `corrected` against `effect`, redacted for `namespace`.
pub fn preview(
    corrected: Corrected,
    effect: &Effect,
    namespace: &str,
    redactor: &Redactor,
) -> Preview {
    let shown = |bytes: &[u8]| {
        let mut v = serde_json::from_slice::<Value>(bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()));
        redactor.value(namespace, &mut v);
        v
    };
    let before = shown(effect.new.body.as_deref().unwrap_or_default());
    let after = shown(&corrected.body);
    let diff = serde_json::to_value(json_patch::diff(&before, &after)).unwrap_or(Value::Null);
    Preview {
        corrected,
        before,
        after,
        diff,
    }
}

#[cfg(test)]
mod tests;
