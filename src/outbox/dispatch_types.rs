//! What the dispatcher and the store exchange about one send.

use serde_json::Value;

use super::classify::AttemptClass;
use super::Effect;
use crate::clock::Millis;

/// How many of one target's due effects a lease may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetRoom {
    /// The target's name.
    pub target: String,
    /// Most of its effects to lease.
    pub limit: i64,
    /// The target's limits for every instance together (PostgreSQL; a
    /// single SQLite node keeps them in process).
    pub cluster: ClusterLimits,
}

/// A target's rate and concurrency, held across every instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterLimits {
    /// Most leases per second (0 = unlimited).
    pub rate_per_second: u32,
    /// Most effects in flight (`sending`) at once (0 = unlimited).
    pub concurrency: u32,
}

impl ClusterLimits {
    /// The limits `target` configures.
    pub fn of(target: &super::TargetConfig) -> Self {
        Self {
            rate_per_second: target.rate_per_second,
            concurrency: target.concurrency,
        }
    }

    /// Whether anything is limited.
    pub fn any(self) -> bool {
        self.rate_per_second > 0 || self.concurrency > 0
    }
}

/// An effect leased for sending, with what the send needs from its run.
#[derive(Debug, Clone)]
pub struct Leased {
    /// The effect as leased (state `sending`).
    pub effect: Effect,
    /// The dispatcher that holds the lease.
    pub owner: String,
    /// The run's fencing version, sent as `X-Oncegate-Version`.
    pub run_version: i64,
    /// The run's correlation id.
    pub correlation_id: String,
    /// When the first attempt was sent, if one was.
    pub first_sent_at: Option<Millis>,
    /// This effect is its paused target's one half-open probe.
    pub probe: bool,
}

impl Leased {
    /// Whether the last outcome was unknown (sent, answer lost; or a probe
    /// that could not decide), so this lease must reconcile rather than
    /// blindly resend.
    pub fn reconciling(&self) -> bool {
        // `probe_undecided` too: the effect is still unknown after such a
        // probe, and resending it to a target that ignores keys could apply
        // it twice (found by the Retry Lab, docs/lab.md).
        self.effect
            .last_class
            .is_some_and(AttemptClass::left_unknown)
    }
}

/// Why an effect failed for good; decides where its run goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailClass {
    /// A 2xx with a business rejection: the run ends `failed_terminal`.
    Rejected,
    /// 3xx or 4xx: the run is dead-lettered.
    Permanent,
    /// The retry budget is spent: dead-lettered.
    RetryExhausted,
    /// The outcome stays unknown and cannot be reconciled: dead-lettered.
    UnknownOutcome,
}

impl FailClass {
    /// The dead-letter class name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rejected => "business_rejection",
            Self::Permanent => "permanent",
            Self::RetryExhausted => "retry_exhausted",
            Self::UnknownOutcome => "unknown_outcome",
        }
    }
}

/// What to record for a leased effect.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Done; the run completes when its last effect is done.
    Completed {
        /// The target's id for it.
        external_ref: Option<String>,
    },
    /// Back to `pending`, due at this time.
    Retry {
        /// Next attempt.
        at: Millis,
    },
    /// Outcome unknown; reconcile at this time.
    Unknown {
        /// Next reconciliation.
        at: Millis,
    },
    /// Failed for good.
    Failed {
        /// Why; decides the run's fate.
        class: FailClass,
        /// In words, for operators.
        reason: String,
    },
    /// Not sent (the kill switch was engaged): back to `pending` unchanged.
    Release,
    /// Its target is paused or disabled: back to `pending`, due at `at`,
    /// and the attempt (if one was made: the transient failure that
    /// tripped the pause, or the 410) spends none of the retry budget.
    Held {
        /// When it is due again (the lease waits for the target anyway).
        at: Millis,
    },
}

impl Verdict {
    /// The effect state this verdict stores. An outcome that cannot be
    /// reconciled stays `unknown` (its run goes to a human).
    pub fn state(&self) -> &'static str {
        match self {
            Self::Completed { .. } => "completed",
            Self::Retry { .. } | Self::Release | Self::Held { .. } => "pending",
            Self::Unknown { .. }
            | Self::Failed {
                class: FailClass::UnknownOutcome,
                ..
            } => "unknown",
            Self::Failed { .. } => "failed",
        }
    }
}

/// What the dispatcher decided for one leased effect, to be recorded.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The effect as leased.
    pub leased: Leased,
    /// What to record.
    pub verdict: Verdict,
    /// The attempt's evidence, when a request was made.
    pub attempt: Option<AttemptRecord>,
}

/// What recording one [`Decision`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// The lease was lost before recording: nothing was written.
    Lost,
    /// Written. `ended` is the run as it reached a final state
    /// (`completed`, `failed_terminal`, `dead_lettered`) by this decision.
    Written {
        /// The run after its final move, if this decision ended it.
        ended: Option<Box<crate::ledger::Run>>,
    },
}

/// What one attempt came to: when, its class and the target's answer.
/// The dispatcher records it ([`AttemptRecord`]) and the store reads it
/// back ([`AttemptView`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AttemptOutcome {
    /// When it started.
    pub started_at: Millis,
    /// When it ended.
    pub finished_at: Millis,
    /// Its class.
    pub class: AttemptClass,
    /// HTTP status, if the target answered.
    pub status: Option<i64>,
    /// Transport error or rejection reason.
    pub error: Option<String>,
    /// Selected response headers and a truncated body.
    pub evidence: Value,
}

/// One attempt's evidence, kept for operators and dead letters.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    /// What it came to.
    pub outcome: AttemptOutcome,
    /// Whether the effect itself was sent (a probe is not a send).
    pub sent: bool,
}

/// One scope of the kill switch.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ActionSwitch {
    /// `*` (every target) or a target name.
    pub scope: String,
    /// False: effects to this scope are held.
    pub enabled: bool,
    /// Who changed it last.
    pub changed_by: String,
    /// When.
    pub changed_at: Millis,
}

/// One attempt as stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AttemptView {
    /// 1-based attempt number.
    pub attempt: i64,
    /// The dispatcher that made it.
    pub dispatcher: String,
    /// What it came to (its evidence as stored: redacted).
    #[serde(flatten)]
    pub outcome: AttemptOutcome,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::outbox::{EffectSpec, EffectState, NewEffect};

    fn leased(last_class: Option<&str>) -> Leased {
        let new = NewEffect {
            operation: "op".into(),
            effect_type: "send".into(),
            target: "t".into(),
            method: "POST".into(),
            url: "http://127.0.0.1:1/x".into(),
            headers: BTreeMap::new(),
            body: None,
            idempotency_key: "ns:k:send".into(),
            spec: EffectSpec::default(),
            not_before: None,
            role: crate::outbox::EffectRole::Act,
            schema_version: None,
        };
        Leased {
            effect: Effect {
                id: "e".into(),
                namespace: "ns".into(),
                key: "k".into(),
                new,
                state: EffectState::Sending,
                attempts: 1,
                next_attempt_at: 0,
                external_ref: None,
                last_status: None,
                last_class: last_class.map(|c| c.parse().expect("a class")),
                last_error: None,
                first_sent_at: Some(0),
                created_at: 0,
            },
            owner: "d".into(),
            run_version: 2,
            correlation_id: "c".into(),
            first_sent_at: Some(0),
            probe: false,
        }
    }

    #[test]
    fn every_unknown_outcome_is_reconciled_and_nothing_else() {
        for class in ["ambiguous", "lost", "probe_undecided"] {
            assert!(leased(Some(class)).reconciling(), "{class}");
        }
        for class in [
            None,
            Some("transient"),
            Some("retry_safe"),
            Some("probe_absent"),
        ] {
            assert!(!leased(class).reconciling(), "{class:?}");
        }
    }
}
