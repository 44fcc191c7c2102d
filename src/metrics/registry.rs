//! The registry: every metric of one app, and the `[metrics]` section.
//!
//! Each app owns its own [`prometheus::Registry`] (no global recorder), so
//! tests running several apps in one process count separately. Counters and
//! histograms are recorded through the typed calls in [`super::record`];
//! the gauges that describe the database (backlog, stale leases, dead
//! letters, kill switch) are read at scrape time (`metrics/scrape.rs`).
//!
//! Labels hold namespaces, configured names, outcome classes, provider
//! event types and route templates only: never a key, token or payload
//! value. Every label a caller can influence passes a [`LabelBound`].

use prometheus::core::Collector;
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};
use serde::{Deserialize, Serialize};

use super::labels::LabelBound;
use crate::ledger::Namespace;

/// `[metrics]`: how many label values a caller may create.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Distinct values each label family (namespace, event type, operation,
    /// target) learns beyond the configured ones; later values are counted
    /// under `other`.
    pub max_label_values: usize,
    /// Namespaces that always get their own series, however many others
    /// come first (source names always do).
    pub namespaces: Vec<String>,
    /// When set, `/metrics` is served on this address alone (a private
    /// listener for the scraper) and the main listener answers 404 there.
    pub listen: Option<std::net::SocketAddr>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            max_label_values: 100,
            namespaces: Vec::new(),
            listen: None,
        }
    }
}

impl MetricsConfig {
    /// Checks the section.
    ///
    /// # Errors
    /// `(field, message)` for the first bad field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.max_label_values > 10_000 {
            return Err((
                "metrics.max_label_values".into(),
                "must be at most 10000 (each value is a time series per metric)".into(),
            ));
        }
        for (i, ns) in self.namespaces.iter().enumerate() {
            Namespace::parse(ns.clone())
                .map_err(|e| (format!("metrics.namespaces[{i}]"), e.to_string()))?;
        }
        Ok(())
    }
}

/// Buckets of the run latencies, in seconds: a workflow step takes from a
/// few milliseconds to an hour (the longest lease life).
const RUN_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0,
    86400.0,
];

/// Buckets of a human's decision time, in seconds: a minute to three days.
const GATE_BUCKETS: &[f64] = &[
    5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 86400.0,
    259200.0,
];

/// Buckets of HTTP request duration, in seconds.
const HTTP_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The label families a caller can influence, each bounded.
#[derive(Debug)]
pub(super) struct Bounds {
    pub(super) namespaces: LabelBound,
    pub(super) event_types: LabelBound,
    pub(super) operations: LabelBound,
    pub(super) targets: LabelBound,
}

/// The service's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    names: Vec<&'static str>,
    pub(super) bounds: Bounds,
    pub(super) claims: IntCounterVec,
    pub(super) ledger_calls: IntCounterVec,
    pub(super) lease_steals: IntCounterVec,
    pub(super) recovered: IntCounterVec,
    pub(super) payload_conflicts: IntCounterVec,
    pub(super) signature_failures: IntCounterVec,
    pub(super) ingress_events: IntCounterVec,
    pub(super) deliveries: IntCounterVec,
    pub(super) effect_attempts: IntCounterVec,
    pub(super) retry_exhaustions: IntCounterVec,
    pub(super) retries_near_budget: IntCounterVec,
    pub(super) unknown_outcomes: IntCounterVec,
    pub(super) gate_decisions: IntCounterVec,
    pub(super) gate_wait: HistogramVec,
    pub(super) validation_failures: IntCounterVec,
    pub(super) valid_outputs: IntCounterVec,
    pub(super) processing_seconds: HistogramVec,
    pub(super) completion_seconds: HistogramVec,
    pub(super) http_duration: HistogramVec,
    pub(super) effects_outstanding: IntGaugeVec,
    pub(super) effects_held: IntGaugeVec,
    pub(super) stale_processing: IntGaugeVec,
    pub(super) dead_letters_open: IntGaugeVec,
    pub(super) dead_letter_age: GaugeVec,
    pub(super) actions_enabled: IntGaugeVec,
    pub(super) targets: super::targets::TargetMetrics,
    /// Scrapes reset and refill the gauges; one at a time.
    pub(super) scrape: tokio::sync::Mutex<()>,
}

/// Registers metrics and remembers their names.
struct Builder {
    registry: Registry,
    names: Vec<&'static str>,
}

impl Builder {
    fn register<C: Collector + Clone + 'static>(&mut self, name: &'static str, c: C) -> C {
        self.registry
            .register(Box::new(c.clone()))
            .expect("each metric is registered once");
        self.names.push(name);
        c
    }

    fn counter(&mut self, name: &'static str, help: &str, labels: &[&str]) -> IntCounterVec {
        let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
        self.register(name, c)
    }

    fn gauge(&mut self, name: &'static str, help: &str, labels: &[&str]) -> IntGaugeVec {
        let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
        self.register(name, g)
    }

    fn histogram(
        &mut self,
        name: &'static str,
        help: &str,
        labels: &[&str],
        buckets: &[f64],
    ) -> HistogramVec {
        let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
        let h = HistogramVec::new(opts, labels).expect("valid metric");
        self.register(name, h)
    }
}

/// The names the configuration declares elsewhere (`[[sources]]`,
/// `[[targets]]`, `[[operations]]`): each always gets its own series.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeclaredNames {
    /// Source names (each is its runs' namespace).
    pub sources: Vec<String>,
    /// Target names.
    pub targets: Vec<String>,
    /// Operation names.
    pub operations: Vec<String>,
}

impl Metrics {
    /// Metrics with the default bounds and no configured names.
    pub fn new() -> Self {
        Self::from_config(&MetricsConfig::default(), DeclaredNames::default())
    }

    /// Metrics whose label bounds admit the declared namespaces (sources
    /// and `metrics.namespaces`), targets and operations.
    ///
    /// # Panics
    /// Never in practice: the names below are valid and registered once.
    pub fn from_config(config: &MetricsConfig, declared: DeclaredNames) -> Self {
        let max = config.max_label_values;
        let zeroed = declared.clone();
        let namespaces = declared
            .sources
            .into_iter()
            .chain(config.namespaces.iter().cloned())
            .chain(["oncegate".to_owned()]);
        let targets = declared.targets.into_iter().chain(["*".to_owned()]);
        let operations = declared.operations.into_iter();
        let bounds = Bounds {
            namespaces: LabelBound::new(namespaces, max),
            event_types: LabelBound::new([], max),
            operations: LabelBound::new(operations, max),
            targets: LabelBound::new(targets, max),
        };
        let mut b = Builder {
            registry: Registry::new(),
            names: Vec::new(),
        };
        let metrics = Self {
            claims: b.counter(
                "oncegate_claims_total",
                "Claims by namespace and outcome (claimed, duplicate, in_flight, finished, duplicate_of, conflict).",
                &["namespace", "outcome"],
            ),
            ledger_calls: b.counter(
                "oncegate_ledger_calls_total",
                "Calls of the ledger's store (claim, renew, finish, read) by tier (sql, redis) and result (ok, unavailable, error).",
                &["tier", "result"],
            ),
            lease_steals: b.counter(
                "oncegate_lease_steals_total",
                "Claims that took over a run whose owner's lease had expired.",
                &["namespace"],
            ),
            recovered: b.counter(
                "oncegate_recovered_runs_total",
                "Runs the recovery rules dead-lettered, by namespace and class (stranded, reclaim_budget_exhausted).",
                &["namespace", "class"],
            ),
            payload_conflicts: b.counter(
                "oncegate_payload_conflicts_total",
                "Claims refused because the same key came with a different payload.",
                &["namespace"],
            ),
            signature_failures: b.counter(
                "oncegate_signature_failures_total",
                "Webhook deliveries refused for their signature, by source.",
                &["source"],
            ),
            ingress_events: b.counter(
                "oncegate_ingress_events_total",
                "Verified webhook deliveries by source, event type and claim outcome.",
                &["source", "event_type", "outcome"],
            ),
            deliveries: b.counter(
                "oncegate_deliveries_total",
                "Requests to /hooks by source and deliveries-log outcome (refused ones included).",
                &["source", "outcome"],
            ),
            effect_attempts: b.counter(
                "oncegate_effect_attempts_total",
                "Effect attempts by target and outcome class.",
                &["target", "class"],
            ),
            retry_exhaustions: b.counter(
                "oncegate_retry_exhaustions_total",
                "Effects whose retry budget ran out (dead-lettered), by target.",
                &["target"],
            ),
            retries_near_budget: b.counter(
                "oncegate_retries_near_budget_total",
                "Retries scheduled with one attempt or under a fifth of the time budget left, by target.",
                &["target"],
            ),
            unknown_outcomes: b.counter(
                "oncegate_unknown_outcomes_total",
                "Effect attempts whose outcome is unknown (sent, answer lost), by target.",
                &["target"],
            ),
            gate_decisions: b.counter(
                "oncegate_gate_decisions_total",
                "Gated runs by operation and how they were cleared (auto_acted, approved, rejected, expired).",
                &["operation", "decision"],
            ),
            gate_wait: b.histogram(
                "oncegate_gate_wait_seconds",
                "Time from an approval challenge to a person's decision (or its expiry), by operation and decision.",
                &["operation", "decision"],
                GATE_BUCKETS,
            ),
            validation_failures: b.counter(
                "oncegate_validation_failures_total",
                "Model outputs that failed their schema, by operation and outcome (invalid, repairs_exhausted).",
                &["operation", "outcome"],
            ),
            valid_outputs: b.counter(
                "oncegate_valid_outputs_total",
                "Model outputs that satisfied their schema, by operation: the denominator of the validation failure rate.",
                &["operation"],
            ),
            processing_seconds: b.histogram(
                "oncegate_run_processing_seconds",
                "Time a run spent in processing under its owner's lease, observed when it moves out, by namespace and the state it moved to.",
                &["namespace", "to"],
                RUN_BUCKETS,
            ),
            completion_seconds: b.histogram(
                "oncegate_run_completion_seconds",
                "Time from a run's first claim to its final state (completed, failed_terminal, dead_lettered), by namespace and that state.",
                &["namespace", "state"],
                RUN_BUCKETS,
            ),
            http_duration: b.histogram(
                "oncegate_http_request_duration_seconds",
                "HTTP request duration by route template, method and status class.",
                &["route", "method", "status"],
                HTTP_BUCKETS,
            ),
            effects_outstanding: b.gauge(
                "oncegate_effects_outstanding",
                "Effects not yet finished, by target and state (pending, sending, unknown).",
                &["target", "state"],
            ),
            effects_held: b.gauge(
                "oncegate_effects_held",
                "Pending effects held by the kill switch, by target.",
                &["target"],
            ),
            stale_processing: b.gauge(
                "oncegate_stale_processing_runs",
                "Runs in processing whose lease expired and that nobody reclaimed yet, by namespace.",
                &["namespace"],
            ),
            dead_letters_open: b.gauge(
                "oncegate_dead_letters_open",
                "Unresolved dead letters, by namespace.",
                &["namespace"],
            ),
            dead_letter_age: {
                let name = "oncegate_dead_letter_oldest_age_seconds";
                let opts = Opts::new(name, "Age of the oldest unresolved dead letter, by namespace.");
                b.register(name, GaugeVec::new(opts, &["namespace"]).expect("valid metric"))
            },
            actions_enabled: b.gauge(
                "oncegate_actions_enabled",
                "1 while actions are enabled for the scope (* or a target), 0 while the kill switch holds it.",
                &["scope"],
            ),
            targets: super::targets::TargetMetrics::new(&zeroed.targets, |name, c| {
                b.registry.register(c).expect("each metric is registered once");
                b.names.push(name);
            }),
            scrape: tokio::sync::Mutex::new(()),
            bounds,
            registry: b.registry,
            names: b.names,
        };
        metrics.start_at_zero(&zeroed, &config.namespaces);
        metrics
    }

    /// The registry, for later parts to register their own metrics.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The name of every metric registered here (without the `_bucket`,
    /// `_sum` and `_count` series a histogram adds).
    pub fn names(&self) -> &[&'static str] {
        &self.names
    }

    /// Renders every metric in the Prometheus text format (without
    /// refreshing the scrape-time gauges: see [`Metrics::scrape`]).
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding gathered families into a Vec cannot fail.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests;
