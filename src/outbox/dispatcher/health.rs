//! What an attempt does to its target's health, and what the target's
//! health does to the attempt's verdict: a transient failure that finds
//! the target paused (or pauses it), or a 410 that disables it, holds the
//! effect with its whole retry budget instead of spending it.

use super::Dispatcher;
use crate::clock::Millis;
use crate::outbox::health::{HealthState, Signal};
use crate::outbox::{FailClass, Leased, TargetConfig, Verdict};

impl Dispatcher {
    /// Stores the attempt's health `signal` (a success only when the
    /// target has failures to forget, or is probing) and turns `verdict`
    /// into [`Verdict::Held`] when the target is now paused or disabled
    /// and the attempt was a retry or a 410. A store failure keeps the
    /// verdict: health is a brake, never a reason to lose an outcome.
    pub(super) async fn after_health(
        &self,
        target: &TargetConfig,
        leased: &Leased,
        signal: Option<Signal>,
        verdict: Verdict,
        now: Millis,
    ) -> Verdict {
        let Some(signal) = signal else {
            return verdict;
        };
        let cached = self.health.get(&target.name).await;
        if signal == Signal::Success
            && !leased.probe
            && cached.as_ref().is_none_or(|h| h.failures == 0)
        {
            return verdict;
        }
        let health = match self
            .store
            .note_health(
                &target.name,
                &signal,
                leased.probe,
                &target.health,
                &self.owner,
            )
            .await
        {
            Ok(health) => health,
            Err(err) => {
                tracing::warn!(error = %err, target_name = %target.name, "recording target health failed");
                return verdict;
            }
        };
        let state = health.state;
        let at = health.paused_until.unwrap_or(now).max(now);
        if cached.as_ref().is_none_or(|c| c.state != state) {
            self.metrics
                .target_health_changed(&target.name, state.as_str());
        }
        self.health.update(health).await;
        let holdable = match &verdict {
            Verdict::Retry { .. } => state != HealthState::Healthy,
            Verdict::Failed {
                class: FailClass::Permanent,
                ..
            } => signal == Signal::Gone && state == HealthState::Disabled,
            _ => false,
        };
        if holdable {
            Verdict::Held { at }
        } else {
            verdict
        }
    }
}
