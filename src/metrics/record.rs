//! The typed calls that record counters and histograms.
//!
//! Callers never touch a metric vector directly: each call here names the
//! event, bounds the labels a request can influence (see
//! [`super::labels`]), and takes only namespaces, configured names, outcome
//! enums and durations, so no key, token or payload value can reach a label.

use std::time::Duration;

use axum::http::{Method, StatusCode};

use super::labels::OTHER;
use super::{DeclaredNames, Metrics};
use crate::ledger::{reclaim, ClaimOutcome, Run, RunState};

/// How a person's approval gate ended (see [`Metrics::gate_decided`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateDecision {
    /// An approver approved: the effects were enqueued.
    Approved,
    /// An approver rejected: the run failed for good.
    Rejected,
    /// Nobody decided before the challenge expired.
    Expired,
}

impl GateDecision {
    /// The `decision` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::Expired => "expired",
        }
    }
}

/// How a model output failed its schema (see [`Metrics::validation_failed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValidationFailure {
    /// One output failed; a repair attempt may follow.
    Invalid,
    /// The last allowed repair failed too: the run ends `failed_terminal`.
    RepairsExhausted,
}

impl ValidationFailure {
    /// The `outcome` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Invalid => "invalid",
            Self::RepairsExhausted => "repairs_exhausted",
        }
    }
}

/// Longest provider event type kept as a label value.
const MAX_EVENT_TYPE: usize = 64;

fn seconds(ms: i64) -> f64 {
    ms.max(0) as f64 / 1000.0
}

/// Every `decision` label of `oncegate_gate_decisions_total`.
const GATE_DECISIONS: [&str; 4] = ["auto_acted", "approved", "rejected", "expired"];

impl Metrics {
    /// Creates, at zero, every counter series the configuration names (its
    /// sources, `metrics.namespaces`, targets and operations). A series
    /// that first appears at 1 has no earlier sample, so `increase()`
    /// over it reads 0 and an alert on the first payload conflict or
    /// signature failure of a namespace would never fire.
    pub(super) fn start_at_zero(&self, declared: &DeclaredNames, namespaces: &[String]) {
        for ns in declared.sources.iter().chain(namespaces) {
            for outcome in ClaimOutcome::LABELS {
                self.claims.with_label_values(&[ns, outcome]);
            }
            self.lease_steals.with_label_values(&[ns]);
            self.payload_conflicts.with_label_values(&[ns]);
            for class in [reclaim::STRANDED, reclaim::BUDGET_EXHAUSTED] {
                self.recovered.with_label_values(&[ns, class]);
            }
        }
        for source in &declared.sources {
            self.signature_failures.with_label_values(&[source]);
        }
        for target in &declared.targets {
            self.retry_exhaustions.with_label_values(&[target]);
            self.retries_near_budget.with_label_values(&[target]);
            self.unknown_outcomes.with_label_values(&[target]);
        }
        for op in &declared.operations {
            for decision in GATE_DECISIONS {
                self.gate_decisions.with_label_values(&[op, decision]);
            }
            for failure in [
                ValidationFailure::Invalid,
                ValidationFailure::RepairsExhausted,
            ] {
                self.validation_failures
                    .with_label_values(&[op, failure.as_str()]);
            }
            self.valid_outputs.with_label_values(&[op]);
        }
    }

    /// A claim (API or ingress) got its answer.
    pub fn claim_answered(&self, namespace: &str, outcome: &ClaimOutcome) {
        crate::ledger::service::LedgerEvents::claim_answered(self, namespace, outcome.label());
    }

    /// A claim took over a run whose owner's lease had expired.
    pub fn lease_stolen(&self, namespace: &str) {
        let ns = self.bounds.namespaces.label(namespace);
        self.lease_steals.with_label_values(&[ns]).inc();
    }

    /// The recovery rules dead-lettered a run (`class`: `stranded` or
    /// `reclaim_budget_exhausted`).
    pub fn run_recovered(&self, namespace: &str, class: &str) {
        let ns = self.bounds.namespaces.label(namespace);
        self.recovered.with_label_values(&[ns, class]).inc();
    }

    /// The same key came with a different payload.
    pub fn payload_conflict(&self, namespace: &str) {
        let ns = self.bounds.namespaces.label(namespace);
        self.payload_conflicts.with_label_values(&[ns]).inc();
    }

    /// A delivery to a configured source failed its signature check.
    pub fn signature_failed(&self, source: &str) {
        let source = self.bounds.namespaces.label(source);
        self.signature_failures.with_label_values(&[source]).inc();
    }

    /// A request to a configured source's `/hooks` came to `outcome` (a
    /// deliveries-log outcome name).
    pub fn delivery(&self, source: &str, outcome: &'static str) {
        let source = self.bounds.namespaces.label(source);
        self.deliveries.with_label_values(&[source, outcome]).inc();
    }

    /// A verified delivery was claimed. `event_type` is the provider's
    /// (signed) type; overlong or unprintable ones count as `invalid`.
    pub fn ingress_event(&self, source: &str, event_type: Option<&str>, outcome: &ClaimOutcome) {
        let source = self.bounds.namespaces.label(source);
        let kind = match event_type {
            None => "none",
            Some(t) if t.len() > MAX_EVENT_TYPE || !t.bytes().all(|b| b.is_ascii_graphic()) => {
                "invalid"
            }
            // Bounded per (source, type) pair, so one source cannot use up
            // every other source's room.
            Some(t) if self.bounds.event_types.admit(&format!("{source}\u{0}{t}")) => t,
            Some(_) => OTHER,
        };
        self.ingress_events
            .with_label_values(&[source, kind, outcome.label()])
            .inc();
    }

    /// The dispatcher classified an attempt (`class` is an outcome class
    /// name such as `success`, `transient`, `ambiguous`, `probe_found`).
    pub fn effect_attempted(&self, target: &str, class: &str) {
        let target = self.bounds.targets.label(target);
        self.effect_attempts
            .with_label_values(&[target, class])
            .inc();
    }

    /// An effect's retry budget ran out.
    pub fn retry_exhausted(&self, target: &str) {
        let target = self.bounds.targets.label(target);
        self.retry_exhaustions.with_label_values(&[target]).inc();
    }

    /// A retry was scheduled close to the end of its budget.
    pub fn retry_near_budget(&self, target: &str) {
        let target = self.bounds.targets.label(target);
        self.retries_near_budget.with_label_values(&[target]).inc();
    }

    /// An attempt's outcome is unknown (sent, answer lost).
    pub fn outcome_unknown(&self, target: &str) {
        let target = self.bounds.targets.label(target);
        self.unknown_outcomes.with_label_values(&[target]).inc();
    }

    /// A run moved: call with the run as the move returned it. Observes
    /// the time in processing when it left `processing`, and the time from
    /// its first claim when it reached a final state.
    pub fn run_moved(&self, run: &Run) {
        let ns = self.bounds.namespaces.label(run.namespace.as_str());
        let state = run.state.as_str();
        if run.prev_state == Some(RunState::Processing) && run.state != RunState::Processing {
            if let Some(started) = run.lease_started_at {
                self.processing_seconds
                    .with_label_values(&[ns, state])
                    .observe(seconds(run.updated_at - started));
            }
        }
        if matches!(
            run.state,
            RunState::Completed | RunState::FailedTerminal | RunState::DeadLettered
        ) {
            self.completion_seconds
                .with_label_values(&[ns, state])
                .observe(seconds(run.updated_at - run.created_at));
        }
    }

    /// A gated operation acted without a person (`approve_by_exception`
    /// eligibility held, `act_with_window` ran out, or policy `none`).
    pub fn gate_auto_acted(&self, operation: &str) {
        let op = self.bounds.operations.label(operation);
        self.gate_decisions
            .with_label_values(&[op, "auto_acted"])
            .inc();
    }

    /// A person's gate ended: `wait_ms` runs from the challenge's creation
    /// to the decision (or to the expiry).
    pub fn gate_decided(&self, operation: &str, decision: GateDecision, wait_ms: i64) {
        let op = self.bounds.operations.label(operation);
        let labels = [op, decision.as_str()];
        self.gate_decisions.with_label_values(&labels).inc();
        self.gate_wait
            .with_label_values(&labels)
            .observe(seconds(wait_ms));
    }

    /// A model output satisfied its schema.
    pub fn output_valid(&self, operation: &str) {
        let op = self.bounds.operations.label(operation);
        self.valid_outputs.with_label_values(&[op]).inc();
    }

    /// A model output failed its schema.
    pub fn validation_failed(&self, operation: &str, failure: ValidationFailure) {
        let op = self.bounds.operations.label(operation);
        self.validation_failures
            .with_label_values(&[op, failure.as_str()])
            .inc();
    }

    /// An HTTP request finished. `route` must be the matched route
    /// template (or `unmatched`), never the raw path.
    pub fn http_request(&self, route: &str, method: &Method, status: StatusCode, took: Duration) {
        let method = match *method {
            Method::GET => "GET",
            Method::POST => "POST",
            Method::PUT => "PUT",
            Method::PATCH => "PATCH",
            Method::DELETE => "DELETE",
            Method::HEAD => "HEAD",
            Method::OPTIONS => "OPTIONS",
            _ => OTHER,
        };
        let class = match status.as_u16() {
            100..=199 => "1xx",
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        self.http_duration
            .with_label_values(&[route, method, class])
            .observe(took.as_secs_f64());
    }
}

impl crate::ledger::tier::TierEvents for Metrics {
    fn ledger_call(&self, tier: crate::ledger::Tier, result: &'static str) {
        self.ledger_calls
            .with_label_values(&[tier.as_str(), result])
            .inc();
    }
}

impl crate::ledger::service::LedgerEvents for Metrics {
    fn claim_answered(&self, namespace: &str, label: &'static str) {
        let ns = self.bounds.namespaces.label(namespace);
        self.claims.with_label_values(&[ns, label]).inc();
    }

    fn lease_stolen(&self, namespace: &str) {
        Metrics::lease_stolen(self, namespace);
    }

    fn payload_conflict(&self, namespace: &str) {
        Metrics::payload_conflict(self, namespace);
    }

    fn run_moved(&self, run: &Run) {
        Metrics::run_moved(self, run);
    }

    fn run_recovered(&self, namespace: &str, class: &str) {
        Metrics::run_recovered(self, namespace, class);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{DeclaredNames, MetricsConfig};

    #[test]
    fn gate_calls_count_decisions_and_time_only_human_waits() {
        let metrics = Metrics::new();
        metrics.gate_auto_acted("refund");
        metrics.gate_decided("refund", GateDecision::Approved, 90_000);
        metrics.gate_decided("refund", GateDecision::Expired, 3_600_000);
        metrics.validation_failed("refund", ValidationFailure::Invalid);
        let text = metrics.render();
        for line in [
            "oncegate_gate_decisions_total{decision=\"auto_acted\",operation=\"refund\"} 1",
            "oncegate_gate_decisions_total{decision=\"approved\",operation=\"refund\"} 1",
            "oncegate_gate_wait_seconds_sum{decision=\"approved\",operation=\"refund\"} 90",
            "oncegate_gate_wait_seconds_count{decision=\"expired\",operation=\"refund\"} 1",
            "oncegate_validation_failures_total{operation=\"refund\",outcome=\"invalid\"} 1",
        ] {
            assert!(text.contains(line), "missing {line}\n{text}");
        }
        assert!(!text.contains("oncegate_gate_wait_seconds_count{decision=\"auto_acted\""));
    }

    #[test]
    fn configured_names_start_at_zero() {
        let declared = DeclaredNames {
            sources: vec!["stripe".into()],
            targets: vec!["crm-api".into()],
            operations: vec!["refund".into()],
        };
        let config = MetricsConfig {
            namespaces: vec!["crm".into()],
            ..MetricsConfig::default()
        };
        let text = Metrics::from_config(&config, declared).render();
        for line in [
            "oncegate_claims_total{namespace=\"crm\",outcome=\"conflict\"} 0",
            "oncegate_claims_total{namespace=\"stripe\",outcome=\"duplicate_of\"} 0",
            "oncegate_payload_conflicts_total{namespace=\"crm\"} 0",
            "oncegate_lease_steals_total{namespace=\"stripe\"} 0",
            "oncegate_recovered_runs_total{class=\"stranded\",namespace=\"crm\"} 0",
            "oncegate_signature_failures_total{source=\"stripe\"} 0",
            "oncegate_unknown_outcomes_total{target=\"crm-api\"} 0",
            "oncegate_retries_near_budget_total{target=\"crm-api\"} 0",
            "oncegate_retry_exhaustions_total{target=\"crm-api\"} 0",
            "oncegate_gate_decisions_total{decision=\"expired\",operation=\"refund\"} 0",
            "oncegate_validation_failures_total{operation=\"refund\",outcome=\"repairs_exhausted\"} 0",
        ] {
            assert!(text.contains(line), "missing {line}\n{text}");
        }
        assert!(
            !text.contains("source=\"crm\""),
            "only sources are sources: {text}"
        );
    }

    #[test]
    fn namespaces_past_the_bound_count_as_other() {
        let config = MetricsConfig {
            max_label_values: 1,
            namespaces: vec!["crm".into()],
            listen: None,
        };
        let metrics = Metrics::from_config(&config, DeclaredNames::default());
        for ns in ["a", "b", "c", "crm"] {
            metrics.payload_conflict(ns);
        }
        let text = metrics.render();
        assert!(text.contains("{namespace=\"a\"} 1"), "{text}");
        assert!(text.contains("{namespace=\"crm\"} 1"), "{text}");
        assert!(text.contains("{namespace=\"other\"} 2"), "{text}");
        assert!(!text.contains("namespace=\"b\""), "{text}");
    }

    #[test]
    fn http_labels_hold_classes_not_codes() {
        let metrics = Metrics::new();
        let method = Method::from_bytes(b"BREW").unwrap();
        metrics.http_request(
            "/v1/claims",
            &method,
            StatusCode::IM_A_TEAPOT,
            Duration::from_millis(3),
        );
        let text = metrics.render();
        assert!(
            text.contains(
                "oncegate_http_request_duration_seconds_count{method=\"other\",route=\"/v1/claims\",status=\"4xx\"} 1"
            ),
            "{text}"
        );
    }
}
