//! The dispatcher's cached view of target health: re-read at most every
//! second, and updated at once by the changes this dispatcher stores, so a
//! send leased before a pause is held instead of sent.
//!
//! The lease is the authority (it reads the table in its transaction);
//! this view only stops sends already leased. A view that cannot be read
//! keeps its last value.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::RwLock;

use super::{HealthState, TargetHealth};
use crate::outbox::port::OutboxStore;

/// Refresh period.
const REFRESH: Duration = Duration::from_secs(1);

/// When the table was last read, and each target's health with when this
/// view learnt it.
type Snapshot = (Option<Instant>, HashMap<String, (Instant, TargetHealth)>);

/// A cached view of every target's stored health.
#[derive(Debug, Clone)]
pub struct HealthView {
    store: Arc<dyn OutboxStore>,
    cached: Arc<RwLock<Snapshot>>,
}

impl HealthView {
    /// A view with nothing read yet (every target healthy until read).
    pub fn new(store: Arc<dyn OutboxStore>) -> Self {
        Self {
            store,
            cached: Arc::new(RwLock::new((None, HashMap::new()))),
        }
    }

    /// Re-reads the table when the cached value is over a second old.
    pub async fn refresh_if_due(&self) {
        let due = self
            .cached
            .read()
            .await
            .0
            .is_none_or(|at| at.elapsed() >= REFRESH);
        if !due {
            return;
        }
        // What the read returns is no older than its start.
        let read_at = Instant::now();
        match self.store.target_health().await {
            Ok(rows) => {
                let rows = rows
                    .into_iter()
                    .map(|h| (h.target.clone(), (read_at, h)))
                    .collect();
                *self.cached.write().await = (Some(read_at), rows);
            }
            Err(err) => tracing::warn!(error = %err, "cannot read target health"),
        }
    }

    /// Takes a change this dispatcher stored.
    pub async fn update(&self, health: TargetHealth) {
        self.cached
            .write()
            .await
            .1
            .insert(health.target.clone(), (Instant::now(), health));
    }

    /// The cached health of `target` (`None`: healthy, never failed).
    pub async fn get(&self, target: &str) -> Option<TargetHealth> {
        self.cached
            .read()
            .await
            .1
            .get(target)
            .map(|(_, h)| h.clone())
    }

    /// Whether a send to `target` leased at `leased_at` (not its half-open
    /// probe) waits: the target was seen paused or disabled after the
    /// lease. What was seen before it the lease itself has overruled (it
    /// reads the table), so an operator's enable on another instance is
    /// never held up by this view.
    pub async fn holds(&self, target: &str, leased_at: Instant) -> bool {
        self.refresh_if_due().await;
        self.cached
            .read()
            .await
            .1
            .get(target)
            .is_some_and(|(seen, h)| *seen > leased_at && h.state != HealthState::Healthy)
    }
}
