//! The outcome → verdict policy, in one place: what the dispatcher does
//! with a classified attempt (complete, retry within budget, reconcile,
//! fail) and with a reconciliation probe's answer. The dispatcher and the
//! Retry Lab both call it, so the lab demonstrates the real policy.

use rand::Rng;

use super::backoff::{near_budget, next_attempt_at};
use super::classify::{AttemptClass, Outcome};
use super::target::TargetConfig;
use super::{FailClass, Leased, Verdict};
use crate::clock::Millis;

/// A decided attempt: the verdict, and whether a retry it plans is the
/// last the budget allows (worth a metric).
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    /// What happens to the effect.
    pub verdict: Verdict,
    /// A retry is planned close to the end of the budget.
    pub near_budget: bool,
}

/// The verdict for a sent attempt's outcome, within the target's retry
/// budget. `reconcile` off (a Retry Lab strategy without reconciliation)
/// retries an ambiguous outcome blindly; the dispatcher always reconciles.
pub fn for_attempt(
    target: &TargetConfig,
    leased: &Leased,
    outcome: Outcome,
    started: Millis,
    now: Millis,
    reconcile: bool,
    rng: &mut impl Rng,
) -> Decided {
    let attempts = (leased.effect.attempts + 1) as u32;
    let first = leased.first_sent_at.unwrap_or(started);
    let again = |retry_after, rng: &mut _| retry(target, attempts, first, now, retry_after, rng);
    match outcome {
        Outcome::Success { external_ref } => decided(Verdict::Completed { external_ref }),
        Outcome::Rejected { reason } => decided(Verdict::Failed {
            class: FailClass::Rejected,
            reason,
        }),
        Outcome::Transient { retry_after } | Outcome::RetrySafe { retry_after } => {
            again(retry_after, rng)
        }
        // Only a target that honours keys may get the same key again.
        Outcome::Ambiguous { .. } if !reconcile || target.honours_keys() => again(None, rng),
        Outcome::Ambiguous { .. } if leased.effect.new.spec.probe_url.is_some() => decided(
            match next_attempt_at(&target.retry, attempts, first, now, None, rng) {
                Some(at) => Verdict::Unknown { at },
                None => undecidable("the outcome is unknown and the retry budget is spent"),
            },
        ),
        Outcome::Ambiguous { status: None } => decided(undecidable(
            "sent, but the answer was lost; no probe can tell whether it happened",
        )),
        Outcome::Ambiguous {
            status: Some(status),
        } => decided(undecidable(&format!(
            "the target answered {status}, which does not say whether it acted (it does not \
             honour idempotency keys), and no probe can tell; not resent blindly"
        ))),
        Outcome::Permanent => decided(Verdict::Failed {
            class: FailClass::Permanent,
            reason: "the target refused the request permanently".into(),
        }),
    }
}

/// The verdict of a reconciliation probe that answered `status` (`None`:
/// no answer): found → completed; proven absent → safe to send again;
/// anything else → still unknown, within the budget. Also the attempt's
/// class for the evidence.
pub fn for_probe(
    target: &TargetConfig,
    leased: &Leased,
    status: Option<u16>,
    now: Millis,
    rng: &mut impl Rng,
) -> (Verdict, AttemptClass) {
    match status {
        Some(200..=299) => (
            Verdict::Completed {
                external_ref: leased.effect.external_ref.clone(),
            },
            AttemptClass::ProbeFound,
        ),
        Some(404 | 410) => (Verdict::Retry { at: now }, AttemptClass::ProbeAbsent),
        _ => {
            let attempts = leased.effect.attempts.max(1) as u32;
            // Never recorded as sent (its dispatcher died mid-send): count
            // from the earliest moment it could have gone out, or the
            // budget would restart with every probe and never run out.
            let first = leased
                .first_sent_at
                .unwrap_or_else(|| earliest_send(leased));
            let verdict = match next_attempt_at(&target.retry, attempts, first, now, None, rng) {
                Some(at) => Verdict::Unknown { at },
                None => undecidable("the probe could not decide within the retry budget"),
            };
            (verdict, AttemptClass::ProbeUndecided)
        }
    }
}

/// The earliest moment an effect could have been sent: when it was
/// committed, or when its window opened.
pub fn earliest_send(leased: &Leased) -> Millis {
    let effect = &leased.effect;
    effect
        .new
        .not_before
        .map_or(effect.created_at, |at| at.max(effect.created_at))
}

/// The next attempt within the budget, or the budget spent.
fn retry(
    target: &TargetConfig,
    attempts: u32,
    first: Millis,
    now: Millis,
    retry_after: Option<std::time::Duration>,
    rng: &mut impl Rng,
) -> Decided {
    match next_attempt_at(&target.retry, attempts, first, now, retry_after, rng) {
        Some(at) => Decided {
            verdict: Verdict::Retry { at },
            near_budget: near_budget(&target.retry, attempts, first, at),
        },
        None => decided(Verdict::Failed {
            class: FailClass::RetryExhausted,
            reason: format!("retry budget spent after {attempts} attempts"),
        }),
    }
}

fn decided(verdict: Verdict) -> Decided {
    Decided {
        verdict,
        near_budget: false,
    }
}

/// A failure for an outcome nobody can decide: a person gets the run.
pub fn undecidable(reason: &str) -> Verdict {
    Verdict::Failed {
        class: FailClass::UnknownOutcome,
        reason: reason.into(),
    }
}
