//! The kill switch as the dispatcher sees it: deny by default.
//!
//! The persisted switches are re-read at least every second and on change
//! notification; a value older than two seconds, or one that cannot be
//! read, counts as disabled, so a dispatcher cut off from the database
//! never sends on a stale "enabled".

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, RwLock};

use super::port::OutboxStore;
use super::ActionSwitch;

/// Refresh period.
const REFRESH: Duration = Duration::from_secs(1);
/// Oldest value still trusted.
const MAX_AGE: Duration = Duration::from_secs(2);

/// The switches as last read, and when.
type Snapshot = Option<(Instant, Vec<ActionSwitch>)>;

/// A cached view of the persisted switches.
#[derive(Debug, Clone)]
pub struct KillSwitch {
    store: Arc<dyn OutboxStore>,
    cached: Arc<RwLock<Snapshot>>,
    /// One refresh at a time: the sends that find the value due wait for
    /// it instead of each reading the table.
    refreshing: Arc<Mutex<()>>,
}

impl KillSwitch {
    /// A switch view with nothing read yet (everything denied until read).
    pub fn new(store: Arc<dyn OutboxStore>) -> Self {
        Self {
            store,
            cached: Arc::new(RwLock::new(None)),
            refreshing: Arc::new(Mutex::new(())),
        }
    }

    /// Engages (`enabled` false) or releases the switch for `scope` (`*` or
    /// a target), audited with `actor`; re-reads it at once and, when
    /// released, wakes the dispatcher. Every switch after the change.
    ///
    /// # Errors
    /// The store failed: nothing changed.
    pub async fn set(
        &self,
        scope: &str,
        enabled: bool,
        actor: &str,
        wake: &tokio::sync::Notify,
    ) -> Result<Vec<ActionSwitch>, crate::ledger::storage::StoreError> {
        self.store.set_actions(scope, enabled, actor).await?;
        tracing::warn!(scope = %scope, enabled, actor = %actor, "kill switch changed");
        self.refresh().await;
        if enabled {
            wake.notify_one();
        }
        self.store.action_switches().await
    }

    /// The switches as stored now.
    ///
    /// # Errors
    /// The store failed.
    pub async fn switches(&self) -> Result<Vec<ActionSwitch>, crate::ledger::storage::StoreError> {
        self.store.action_switches().await
    }

    /// Re-reads the switches now (after a change, or when stale).
    pub async fn refresh(&self) {
        match self.store.action_switches().await {
            Ok(switches) => *self.cached.write().await = Some((Instant::now(), switches)),
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the kill switch; actions count as disabled")
            }
        }
    }

    /// Refreshes when the cached value is over a second old.
    pub async fn refresh_if_due(&self) {
        if !self.due().await {
            return;
        }
        let _refreshing = self.refreshing.lock().await;
        // Another caller may have refreshed while this one waited.
        if self.due().await {
            self.refresh().await;
        }
    }

    async fn due(&self) -> bool {
        self.cached
            .read()
            .await
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() >= REFRESH)
    }

    /// Whether actions to `target` are enabled right now.
    pub async fn allows(&self, target: &str) -> bool {
        self.refresh_if_due().await;
        let cached = self.cached.read().await;
        let Some((at, switches)) = cached.as_ref() else {
            return false;
        };
        if at.elapsed() > MAX_AGE {
            return false;
        }
        !switches
            .iter()
            .any(|s| !s.enabled && (s.scope == "*" || s.scope == target))
    }
}

/// The switch scope for `target` (`*` when none): a configured target's
/// name.
///
/// # Errors
/// A message when no target has that name.
pub fn scope_for(target: Option<&str>, targets: &[super::TargetConfig]) -> Result<String, String> {
    match target {
        Some(t) if !targets.iter().any(|c| c.name == t) => Err(format!("no target is named {t:?}")),
        Some(t) => Ok(t.to_owned()),
        None => Ok("*".into()),
    }
}
