//! What one dispatch tells the operator: its span, its log line, its counts.
//!
//! Kept apart from the dispatcher's control flow so that reads as the
//! steps it takes. The span carries the effect, its run (namespace, key,
//! fencing version), the run's correlation id and the target; nothing here
//! sees the effect's body or the target's credentials.

use super::{FailClass, Leased, Verdict};
use crate::metrics::Metrics;

/// The span every log line of one effect's dispatch carries.
pub(super) fn dispatch_span(leased: &Leased) -> tracing::Span {
    let effect = &leased.effect;
    tracing::info_span!(
        "dispatch",
        effect_id = %effect.id,
        namespace = %effect.namespace,
        key = %effect.key,
        version = leased.run_version,
        correlation_id = %leased.correlation_id,
        target = %effect.new.target,
    )
}

/// Counts a classified attempt and logs its verdict (call inside the span).
pub(super) fn count(metrics: &Metrics, target: &str, class: &str, verdict: &Verdict) {
    metrics.effect_attempted(target, class);
    let state = verdict.state();
    match verdict {
        Verdict::Completed { .. } => tracing::info!(class, state, "effect attempt recorded"),
        Verdict::Retry { .. } => tracing::info!(class, state, "effect attempt failed; will retry"),
        Verdict::Release => {}
        Verdict::Held { .. } => {
            tracing::info!(
                class,
                state,
                "target paused or disabled; effect held with its budget"
            );
        }
        Verdict::Failed {
            class: FailClass::RetryExhausted,
            ..
        } => {
            metrics.retry_exhausted(target);
            tracing::warn!(class, state, "retry budget spent; dead-lettering");
        }
        Verdict::Unknown { .. }
        | Verdict::Failed {
            class: FailClass::UnknownOutcome,
            ..
        } => {
            metrics.outcome_unknown(target);
            tracing::warn!(
                class,
                state,
                "effect outcome unknown; not resending blindly"
            );
        }
        Verdict::Failed { .. } => tracing::warn!(class, state, "effect failed for good"),
    }
}
