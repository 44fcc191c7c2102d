//! Prometheus metrics, all named `oncegate_*`.
//!
//! Each app owns its own [`prometheus::Registry`] (no global recorder), so
//! tests running several apps in one process count separately. Labels hold
//! namespaces and outcome names only, never a key, token or payload value.

use prometheus::{Encoder, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};

/// The service's metrics.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    /// Claims by namespace and outcome (`claimed`, `duplicate`, `in_flight`,
    /// `finished`, `duplicate_of`, `conflict`).
    pub claims: IntCounterVec,
    /// Claims that took over a run whose lease had expired.
    pub lease_steals: IntCounterVec,
    /// Claims refused because the payload hash differed.
    pub payload_conflicts: IntCounterVec,
    /// Webhook deliveries whose signature was refused, by source.
    pub signature_failures: IntCounterVec,
    /// Webhook deliveries by source, event type and claim outcome.
    pub ingress_events: IntCounterVec,
    /// Effect attempts by target and outcome class.
    pub effect_outcomes: IntCounterVec,
    /// Effects whose retry budget ran out, by target.
    pub retry_exhaustions: IntCounterVec,
    /// Effects whose outcome became unknown, by target.
    pub unknown_outcomes: IntCounterVec,
    /// Outstanding effects by target and state, read at scrape time.
    pub effects_outstanding: IntGaugeVec,
    /// Pending effects whose target the kill switch holds, read at scrape time.
    pub effects_held: IntGaugeVec,
}

impl Metrics {
    /// Creates and registers every metric.
    ///
    /// # Panics
    /// Never in practice: the names below are valid and registered once.
    pub fn new() -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("registered once");
            c
        };
        Self {
            claims: counter(
                "oncegate_claims_total",
                "Claims by namespace and outcome.",
                &["namespace", "outcome"],
            ),
            lease_steals: counter(
                "oncegate_lease_steals_total",
                "Claims that took over a run whose owner's lease had expired.",
                &["namespace"],
            ),
            payload_conflicts: counter(
                "oncegate_payload_conflicts_total",
                "Claims refused because the same key came with a different payload.",
                &["namespace"],
            ),
            signature_failures: counter(
                "oncegate_signature_failures_total",
                "Webhook deliveries refused for their signature, by source.",
                &["source"],
            ),
            ingress_events: counter(
                "oncegate_ingress_events_total",
                "Verified webhook deliveries by source, event type and claim outcome.",
                &["source", "event_type", "outcome"],
            ),
            effect_outcomes: counter(
                "oncegate_effect_attempts_total",
                "Effect attempts by target and outcome class.",
                &["target", "class"],
            ),
            retry_exhaustions: counter(
                "oncegate_retry_exhaustions_total",
                "Effects whose retry budget ran out, by target.",
                &["target"],
            ),
            unknown_outcomes: counter(
                "oncegate_unknown_outcomes_total",
                "Effect attempts whose outcome is unknown (sent, answer lost), by target.",
                &["target"],
            ),
            effects_outstanding: gauge(
                &registry,
                "oncegate_effects_outstanding",
                "Effects not yet finished, by target and state (pending, sending, unknown).",
                &["target", "state"],
            ),
            effects_held: gauge(
                &registry,
                "oncegate_effects_held",
                "Pending effects held by the kill switch, by target.",
                &["target"],
            ),
            registry,
        }
    }

    /// The registry, for later parts to register their own metrics.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Renders every metric in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding gathered families into a Vec cannot fail.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

fn gauge(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry
        .register(Box::new(g.clone()))
        .expect("registered once");
    g
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counted_claims() {
        let metrics = Metrics::new();
        metrics
            .claims
            .with_label_values(&["stripe", "claimed"])
            .inc();
        let text = metrics.render();
        assert!(
            text.contains("oncegate_claims_total{namespace=\"stripe\",outcome=\"claimed\"} 1"),
            "{text}"
        );
    }
}
