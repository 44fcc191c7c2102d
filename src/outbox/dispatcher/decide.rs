//! One effect's attempt: sent (or reconciled by its probe) outside any
//! transaction, classified, and decided by the outbox's policy
//! ([`crate::outbox::verdict`]).

use std::time::{Duration, Instant};

use rand::SeedableRng;

use super::Dispatcher;
use crate::outbox::classify::{classify, AttemptClass, Attempted, Outcome};
use crate::outbox::egress::{EgressRefused, EgressUrl};
use crate::outbox::health;
use crate::outbox::observe;
use crate::outbox::sender::evidence;
use crate::outbox::{
    verdict, AttemptOutcome, AttemptRecord, Decision, FailClass, Leased, TargetConfig, Verdict,
};

impl Dispatcher {
    /// Sends (or reconciles, or holds) one leased effect and decides what
    /// to record. Touches the network, never the database.
    pub(super) async fn decide(&self, leased: Leased, leased_at: Instant) -> Decision {
        let hold = |leased: Leased| Decision {
            leased,
            verdict: Verdict::Release,
            attempt: None,
        };
        let Some(target) = self.targets.get(&leased.effect.new.target).cloned() else {
            let reason = format!("target {:?} is not configured", leased.effect.new.target);
            let verdict = Verdict::Failed {
                class: FailClass::Permanent,
                reason,
            };
            return Decision {
                leased,
                verdict,
                attempt: None,
            };
        };
        let _slot = target.slots.acquire().await;
        target.pace().await;
        // A lease half spent waiting for a slot goes back unsent rather
        // than risk expiring mid-send (which would make it unknown).
        if leased_at.elapsed() > Duration::from_millis(self.config.lease_ms as u64 / 2) {
            return hold(leased);
        }
        // Re-checked right before the send, from a value at most 2 s old.
        if !self.switch.allows(&target.config.name).await {
            return hold(leased);
        }
        // A target paused since the lease waits, unless this is its probe.
        if !leased.probe && self.health.holds(&target.config.name, leased_at).await {
            return hold(leased);
        }
        let probing = leased.reconciling() && !target.config.honours_keys();
        let url = match egress_url(&target.config, &leased, probing) {
            Some(Ok(url)) => url,
            Some(Err(refused)) => return refused_decision(leased, probing, &refused),
            None => {
                let verdict = verdict::undecidable(
                    "no probe is configured and the target does not honour keys",
                );
                return Decision {
                    leased,
                    verdict,
                    attempt: None,
                };
            }
        };
        let started = self.clock.now_ms();
        let attempted = if probing {
            target.probe(&url).await
        } else {
            target.send(&leased, &url).await
        };
        let finished = self.clock.now_ms();
        let (verdict, class) = if probing {
            self.probe_verdict(&target.config, &leased, &attempted, finished)
        } else {
            let outcome = classify(&target.config, &leased.effect.new.spec, &attempted);
            let class = outcome.class();
            let signal = health::signal(&attempted, &outcome, leased.probe);
            let verdict = self.verdict(&target.config, &leased, outcome, started, finished);
            let verdict = self
                .after_health(&target.config, &leased, signal, verdict, finished)
                .await;
            (verdict, class)
        };
        observe::count(&self.metrics, &target.config.name, class.as_str(), &verdict);
        let attempt = AttemptRecord {
            outcome: AttemptOutcome {
                started_at: started,
                finished_at: finished,
                class,
                status: match &attempted {
                    Attempted::Answered { status, .. } => Some(i64::from(status.as_u16())),
                    _ => None,
                },
                error: match &attempted {
                    Attempted::NotSent(e) | Attempted::LostAfterSend(e) => Some(e.clone()),
                    Attempted::Answered { .. } => None,
                },
                evidence: evidence(&attempted),
            },
            sent: !probing && !matches!(attempted, Attempted::NotSent(_)),
        };
        Decision {
            leased,
            verdict,
            attempt: Some(attempt),
        }
    }

    /// The verdict for a sent attempt's outcome, within the retry budget
    /// ([`verdict::for_attempt`]).
    pub(super) fn verdict(
        &self,
        target: &TargetConfig,
        leased: &Leased,
        outcome: Outcome,
        started: i64,
        now: i64,
    ) -> Verdict {
        let mut rng = rand::rngs::StdRng::from_entropy();
        let decided = verdict::for_attempt(target, leased, outcome, started, now, true, &mut rng);
        if decided.near_budget {
            self.metrics.retry_near_budget(&target.name);
        }
        decided.verdict
    }

    /// The verdict of a reconciliation probe ([`verdict::for_probe`]).
    pub(super) fn probe_verdict(
        &self,
        target: &TargetConfig,
        leased: &Leased,
        attempted: &Attempted,
        now: i64,
    ) -> (Verdict, AttemptClass) {
        let status = match attempted {
            Attempted::Answered { status, .. } => Some(status.as_u16()),
            _ => None,
        };
        let mut rng = rand::rngs::StdRng::from_entropy();
        verdict::for_probe(target, leased, status, now, &mut rng)
    }
}

/// Where this attempt goes, checked against the target's allow-list here,
/// after any placeholder is filled, whatever was checked at commit (the
/// row may have been edited since): the effect's URL, or its probe URL
/// with `{idempotency_key}` and `{external_ref}` filled in (`None`: no
/// probe is configured).
fn egress_url(
    target: &TargetConfig,
    leased: &Leased,
    probing: bool,
) -> Option<Result<EgressUrl, EgressRefused>> {
    if !probing {
        return Some(target.check_egress(&leased.effect.new.url));
    }
    let template = leased.effect.new.spec.probe_url.as_deref()?;
    let values = [
        leased.effect.new.idempotency_key.as_str(),
        leased.effect.external_ref.as_deref().unwrap_or(""),
    ];
    Some(target.probe_egress(template, values))
}

/// A URL refused at send time: nothing is sent. An effect never sent
/// before fails for good; one sent before (a probe, or a retry) keeps its
/// unknown outcome; either way its run goes to a dead letter that gives
/// the reason.
fn refused_decision(leased: Leased, probing: bool, refused: &EgressRefused) -> Decision {
    tracing::error!(
        effect_id = %leased.effect.id,
        target = %refused.target,
        probing,
        "{refused}"
    );
    let class = if probing || leased.first_sent_at.is_some() {
        FailClass::UnknownOutcome
    } else {
        FailClass::Permanent
    };
    let what = if probing { "probe" } else { "send" };
    Decision {
        leased,
        verdict: Verdict::Failed {
            class,
            reason: format!("{what} {refused}"),
        },
        attempt: None,
    }
}
