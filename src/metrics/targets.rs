//! Target health's metrics (DESIGN.md §4): which targets are paused or
//! disabled and for how long (read from the database at scrape time, so
//! every instance shows the cluster's state), and the changes this
//! instance's dispatcher made.

use prometheus::{CounterVec, IntCounterVec, IntGaugeVec, Opts};

use super::port::GaugeStore;
use super::Metrics;

/// The target-health series.
#[derive(Debug, Clone)]
pub struct TargetMetrics {
    /// The configured targets: their series exist from the start, at 0.
    declared: Vec<String>,
    paused: IntGaugeVec,
    disabled: IntGaugeVec,
    paused_seconds: CounterVec,
    changes: IntCounterVec,
}

impl TargetMetrics {
    /// The series, registered through `register` (name, collector), each
    /// configured target's at 0.
    pub(super) fn new(
        declared: &[String],
        mut register: impl FnMut(&'static str, Box<dyn prometheus::core::Collector>),
    ) -> Self {
        let gauge = |name: &str, help: &str| {
            IntGaugeVec::new(Opts::new(name, help), &["target"]).expect("valid metric")
        };
        let this = Self {
            declared: declared.to_vec(),
            paused: gauge(
                "oncegate_target_paused",
                "1 while the target is paused (cooling down, or its half-open probe out) after repeated transient failures.",
            ),
            disabled: gauge(
                "oncegate_target_disabled",
                "1 while the target is disabled (it answered 410 Gone, or an operator disabled it) until an operator enables it.",
            ),
            paused_seconds: CounterVec::new(
                Opts::new(
                    "oncegate_target_paused_seconds_total",
                    "Seconds the target has spent paused or disabled.",
                ),
                &["target"],
            )
            .expect("valid metric"),
            changes: IntCounterVec::new(
                Opts::new(
                    "oncegate_target_health_changes_total",
                    "Target health changes this instance's dispatcher stored, by target and the state entered.",
                ),
                &["target", "state"],
            )
            .expect("valid metric"),
        };
        register("oncegate_target_paused", Box::new(this.paused.clone()));
        register("oncegate_target_disabled", Box::new(this.disabled.clone()));
        register(
            "oncegate_target_paused_seconds_total",
            Box::new(this.paused_seconds.clone()),
        );
        register(
            "oncegate_target_health_changes_total",
            Box::new(this.changes.clone()),
        );
        this.zero();
        for target in declared {
            this.paused_seconds.with_label_values(&[target]);
            for state in ["paused", "healthy", "disabled"] {
                this.changes.with_label_values(&[target, state]);
            }
        }
        this
    }

    /// Every configured target's gauges at 0 (the stored rows follow).
    fn zero(&self) {
        self.paused.reset();
        self.disabled.reset();
        for target in &self.declared {
            self.paused.with_label_values(&[target]).set(0);
            self.disabled.with_label_values(&[target]).set(0);
        }
    }
}

impl Metrics {
    /// This instance's dispatcher moved `target` into `state`.
    pub fn target_health_changed(&self, target: &str, state: &str) {
        let target = self.bounds.targets.label(target);
        self.targets
            .changes
            .with_label_values(&[target, state])
            .inc();
    }

    /// The targets' paused and disabled gauges and time paused, from the
    /// stored health.
    pub(super) async fn refresh_targets(&self, store: &dyn GaugeStore) {
        let Ok(rows) = store.target_health_states().await else {
            tracing::warn!("cannot read target health for /metrics");
            return;
        };
        let t = &self.targets;
        t.zero();
        for (target, state, paused_ms) in rows {
            let label = self.bounds.targets.label(&target);
            let paused = matches!(state.as_str(), "paused" | "probing");
            t.paused.with_label_values(&[label]).add(i64::from(paused));
            t.disabled
                .with_label_values(&[label])
                .add(i64::from(state == "disabled"));
            // The stored total only grows: the counter follows it.
            let counter = t.paused_seconds.with_label_values(&[label]);
            let secs = paused_ms.max(0) as f64 / 1000.0;
            if secs > counter.get() {
                counter.inc_by(secs - counter.get());
            }
        }
    }
}
