//! The operators' use cases: every configured target's health, and
//! enabling or disabling one (audited with the actor).

use tokio::sync::Notify;

use super::TargetHealth;
use crate::clock::Millis;
use crate::ledger::storage::StoreError;
use crate::outbox::port::OutboxStore;
use crate::outbox::TargetConfig;

/// Why an operator's change was refused.
#[derive(Debug, thiserror::Error)]
pub enum TargetChangeError {
    /// No configured target has the name.
    #[error("no target is named {0:?}")]
    Unknown(String),
    /// The store failed: nothing changed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Every configured target's health, in configuration order (a target that
/// never failed is healthy), then any stored target no longer configured.
///
/// # Errors
/// The store failed.
pub async fn overview(
    store: &dyn OutboxStore,
    targets: &[TargetConfig],
    now: Millis,
) -> Result<Vec<TargetHealth>, StoreError> {
    let mut stored = store.target_health().await?;
    let mut all: Vec<TargetHealth> = targets
        .iter()
        .map(|t| match stored.iter().position(|h| h.target == t.name) {
            Some(i) => stored.swap_remove(i),
            None => TargetHealth::healthy(&t.name, now),
        })
        .collect();
    stored.sort_by(|a, b| a.target.cmp(&b.target));
    all.extend(stored);
    Ok(all)
}

/// Enables (its held effects go out, each once) or disables `target`,
/// audited with `actor`; wakes the dispatcher on enable.
///
/// # Errors
/// An unknown target, or the store failed.
pub async fn set_enabled(
    store: &dyn OutboxStore,
    targets: &[TargetConfig],
    target: &str,
    enabled: bool,
    actor: &str,
    wake: &Notify,
) -> Result<TargetHealth, TargetChangeError> {
    if !targets.iter().any(|t| t.name == target) {
        return Err(TargetChangeError::Unknown(target.to_owned()));
    }
    let health = store.set_target_enabled(target, enabled, actor).await?;
    tracing::warn!(target_name = %target, enabled, actor = %actor, "target enabled or disabled by an operator");
    if enabled {
        wake.notify_one();
    }
    Ok(health)
}
