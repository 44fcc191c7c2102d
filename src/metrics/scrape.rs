//! The gauges read from the database at scrape time.
//!
//! Each is one cheap grouped query (see the store's `backlog`,
//! `switch_states`, `stale_processing`, `open_dead_letters` and
//! `target_health_states`), so the
//! numbers hold across every instance sharing the database and survive a
//! restart. A query that fails leaves its gauges at their last values and
//! logs a warning; `/readyz` reports the database itself.

use super::Metrics;
use crate::metrics::port::GaugeStore;

impl Metrics {
    /// Refreshes the scrape-time gauges from `store`, then renders every
    /// metric in the Prometheus text format.
    pub async fn scrape(&self, store: &dyn GaugeStore) -> String {
        let _one_at_a_time = self.scrape.lock().await;
        self.refresh_outbox(store).await;
        self.refresh_stale(store).await;
        self.refresh_dead_letters(store).await;
        self.refresh_targets(store).await;
        self.render()
    }

    /// The backlog by target and state, what the kill switch holds, and
    /// which scopes are enabled.
    async fn refresh_outbox(&self, store: &dyn GaugeStore) {
        let (Ok(backlog), Ok(switches)) = (store.backlog().await, store.switch_states().await)
        else {
            tracing::warn!("cannot read the outbox backlog for /metrics");
            return;
        };
        let held = |target: &str| {
            switches
                .iter()
                .any(|(scope, enabled)| !enabled && (scope == "*" || scope == target))
        };
        self.effects_outstanding.reset();
        self.effects_held.reset();
        for (target, state, count) in backlog {
            let label = self.bounds.targets.label(&target);
            self.effects_outstanding
                .with_label_values(&[label, &state])
                .add(count);
            if state == "pending" && held(&target) {
                self.effects_held.with_label_values(&[label]).add(count);
            }
        }
        self.actions_enabled.reset();
        // Never set means enabled.
        self.actions_enabled.with_label_values(&["*"]).set(1);
        for (scope, enabled) in &switches {
            let scope = self.bounds.targets.label(scope);
            self.actions_enabled
                .with_label_values(&[scope])
                .set(i64::from(*enabled));
        }
    }

    async fn refresh_stale(&self, store: &dyn GaugeStore) {
        let Ok(stale) = store.stale_processing().await else {
            tracing::warn!("cannot count stale processing runs for /metrics");
            return;
        };
        self.stale_processing.reset();
        for (namespace, count) in stale {
            let ns = self.bounds.namespaces.label(&namespace);
            self.stale_processing.with_label_values(&[ns]).add(count);
        }
    }

    async fn refresh_dead_letters(&self, store: &dyn GaugeStore) {
        let Ok(open) = store.open_dead_letters().await else {
            tracing::warn!("cannot read open dead letters for /metrics");
            return;
        };
        self.dead_letters_open.reset();
        self.dead_letter_age.reset();
        for group in open {
            let ns = self.bounds.namespaces.label(&group.namespace);
            self.dead_letters_open
                .with_label_values(&[ns])
                .add(group.count);
            // Namespaces folded into `other` keep the oldest of them.
            let age = self.dead_letter_age.with_label_values(&[ns]);
            let secs = group.oldest_age_ms.max(0) as f64 / 1000.0;
            if secs > age.get() {
                age.set(secs);
            }
        }
    }
}
