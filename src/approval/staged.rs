//! Effects staged on a challenge: stored as JSON until the approval is
//! consumed, then queued as they were proposed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use sha2::{Digest, Sha256};

use crate::clock::Millis;
use crate::outbox::{EffectSpec, NewEffect};

/// An effect staged on a challenge, stored as JSON until the approval is
/// consumed (bodies are JSON text, so they round-trip as strings).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StagedEffect {
    operation: String,
    effect_type: String,
    target: String,
    method: String,
    url: String,
    headers: BTreeMap<String, String>,
    body: Option<String>,
    idempotency_key: String,
    spec: EffectSpec,
    not_before: Option<Millis>,
    /// Absent when none was declared, so the digests of effects staged
    /// without one are what they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    schema_version: Option<String>,
}

impl From<&NewEffect> for StagedEffect {
    fn from(e: &NewEffect) -> Self {
        Self {
            operation: e.operation.clone(),
            effect_type: e.effect_type.clone(),
            target: e.target.clone(),
            method: e.method.clone(),
            url: e.url.clone(),
            headers: e.headers.clone(),
            body: e
                .body
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned()),
            idempotency_key: e.idempotency_key.clone(),
            spec: e.spec.clone(),
            not_before: e.not_before,
            schema_version: e.schema_version.clone(),
        }
    }
}

impl From<StagedEffect> for NewEffect {
    fn from(s: StagedEffect) -> Self {
        Self {
            operation: s.operation,
            effect_type: s.effect_type,
            target: s.target,
            method: s.method,
            url: s.url,
            headers: s.headers,
            body: s.body.map(String::into_bytes),
            idempotency_key: s.idempotency_key,
            spec: s.spec,
            not_before: s.not_before,
            role: crate::outbox::EffectRole::Act,
            schema_version: s.schema_version,
        }
    }
}

/// The digest an approval is bound to: SHA-256 over everything the staged
/// effects will send (method, URL, headers, body, key, outcome rules,
/// probe, `not_before`), as stored. Recorded on the card at the gate and
/// checked again when the approval is consumed.
pub fn effects_digest(effects: &[NewEffect]) -> String {
    let staged: Vec<StagedEffect> = effects.iter().map(StagedEffect::from).collect();
    let bytes = serde_json::to_vec(&staged).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(&bytes)))
}
