//! A key's effects against the seals its chain recorded (issue 25 L7):
//! the move that queued an effect put the digests of its immutable fields
//! into its audit entry ([`crate::outbox::seal`]), so an effect row edited
//! in the database no longer matches and `audit verify` names it.

use std::collections::HashMap;

use super::verify::{Finding, VerifyReport};
use super::AuditRecord;
use crate::outbox::seal::Seal;

/// An effect as stored now, sealed again from its row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEffect {
    /// Its run's namespace.
    pub namespace: String,
    /// Its run's key.
    pub key: String,
    /// The effect's id.
    pub id: String,
    /// `target/effect_type`: where its seal is recorded.
    pub slot: String,
    /// The seal of the row as it is.
    pub seal: Seal,
    /// Retention replaced its body by the redacted form (`redacted_at`):
    /// the body cannot match its seal any more, and is not compared.
    pub body_redacted: bool,
}

/// Checks `effects` against the latest seal of their slot in `events`;
/// an effect without one (queued before seals existed) is counted as
/// unsealed.
pub(super) fn check_effects(
    namespace: &str,
    key: &str,
    events: &[AuditRecord],
    effects: &[StoredEffect],
    report: &mut VerifyReport,
) {
    if effects.is_empty() {
        return;
    }
    let mut seals: HashMap<&str, Seal> = HashMap::new();
    for event in events {
        let Some(recorded) = event.entry.detail.get("seals").and_then(|s| s.as_object()) else {
            continue;
        };
        for (slot, seal) in recorded {
            if let Ok(seal) = serde_json::from_value::<Seal>(seal.clone()) {
                seals.insert(slot.as_str(), seal);
            }
        }
    }
    for effect in effects {
        let Some(sealed) = seals.get(effect.slot.as_str()) else {
            report.unsealed_effects += 1;
            continue;
        };
        let fields = sealed.fields != effect.seal.fields;
        let body = !effect.body_redacted && sealed.body != effect.seal.body;
        let edited = match (fields, body) {
            (true, true) => "its fields and its body",
            (true, false) => "its method, URL, headers, target or key",
            (false, true) => "its body",
            (false, false) => continue,
        };
        report.push(Finding {
            table: "effects".into(),
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            row: None,
            problem: format!(
                "effect {} ({}) no longer matches the seal its run's audit chain recorded: {edited} changed",
                effect.id, effect.slot
            ),
        });
    }
}
