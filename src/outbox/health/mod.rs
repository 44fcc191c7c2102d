//! Target health (DESIGN.md §4): a target that keeps failing transiently
//! is paused for every instance for a cool-down, then probed half-open by
//! one effect; a `410 Gone` disables it until an operator enables it.
//!
//! The state lives in the database (`target_health`), so every instance
//! sees the same pause; the lease skips a paused or disabled target and
//! hands out one probe when its cool-down ends. This module is the policy:
//! what an attempt says about its target ([`signal`]) and what that does to
//! the target's state ([`apply`]), pure so it is tested without a database.

mod operate;
mod view;

pub use operate::{overview, set_enabled, TargetChangeError};
pub use view::HealthView;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::classify::{Attempted, Outcome};
use crate::clock::Millis;

/// `[targets.health]`: when a target is paused, and for how long.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthConfig {
    /// Consecutive transient failures (request not sent, 429, 503, a
    /// status mapped transient) that pause the target for every instance;
    /// 0 never pauses.
    pub failure_threshold: u32,
    /// The first cool-down of a pause, in milliseconds; it doubles with
    /// each failed probe.
    pub cool_down_ms: u64,
    /// The longest cool-down, and the cap of an honoured `Retry-After`, in
    /// milliseconds.
    pub cool_down_cap_ms: u64,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            cool_down_ms: 30_000,
            cool_down_cap_ms: 600_000,
        }
    }
}

impl HealthConfig {
    /// The cool-down of the `pauses`-th consecutive pause (1-based): the
    /// base doubled per earlier pause, at least the target's `Retry-After`,
    /// at most the cap.
    pub fn cool_down(&self, pauses: i64, retry_after: Option<Duration>) -> u64 {
        let doublings = u32::try_from(pauses.saturating_sub(1).clamp(0, 30)).unwrap_or(30);
        let backoff = self.cool_down_ms.saturating_mul(1u64 << doublings);
        let asked = retry_after.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        backoff.max(asked).min(self.cool_down_cap_ms)
    }
}

/// Where a target stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthState {
    /// Effects go out.
    Healthy,
    /// Cooling down: its effects wait, spending no budget.
    Paused,
    /// One half-open probe effect is out; the rest wait.
    Probing,
    /// Gone (410) or disabled by an operator: nothing is sent until an
    /// operator enables it.
    Disabled,
}

impl HealthState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Paused => "paused",
            Self::Probing => "probing",
            Self::Disabled => "disabled",
        }
    }

    /// The state a stored name names.
    ///
    /// # Errors
    /// A message for an unknown name.
    pub fn parse(s: &str) -> Result<Self, String> {
        [Self::Healthy, Self::Paused, Self::Probing, Self::Disabled]
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| format!("unknown target health state {s:?}"))
    }
}

/// One target's health as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetHealth {
    /// The target's name.
    pub target: String,
    /// Where it stands.
    pub state: HealthState,
    /// Consecutive transient failures.
    pub failures: i64,
    /// Consecutive pauses (the cool-down doubles with each).
    pub pauses: i64,
    /// When the current pause or disable began.
    pub paused_at: Option<Millis>,
    /// When the current cool-down ends.
    pub paused_until: Option<Millis>,
    /// The dispatcher holding the half-open probe.
    pub probe_owner: Option<String>,
    /// Until when that probe is held.
    pub probe_expires_at: Option<Millis>,
    /// Milliseconds paused in pauses that have ended.
    pub paused_ms: i64,
    /// Why it left `healthy` last.
    pub cause: Option<String>,
    /// Who changed it last (a dispatcher, or an operator).
    pub changed_by: String,
    /// When.
    pub changed_at: Millis,
}

impl TargetHealth {
    /// A target that never failed.
    pub fn healthy(target: &str, now: Millis) -> Self {
        Self {
            target: target.to_owned(),
            state: HealthState::Healthy,
            failures: 0,
            pauses: 0,
            paused_at: None,
            paused_until: None,
            probe_owner: None,
            probe_expires_at: None,
            paused_ms: 0,
            cause: None,
            changed_by: "-".into(),
            changed_at: now,
        }
    }

    /// Total milliseconds paused or disabled, the current stretch included.
    pub fn paused_total_ms(&self, now: Millis) -> i64 {
        let current = match (self.state, self.paused_at) {
            (HealthState::Healthy, _) | (_, None) => 0,
            (_, Some(at)) => (now - at).max(0),
        };
        self.paused_ms + current
    }

    /// Whether a lease may take effects of this target now, and how:
    /// `None` not at all, `Some(false)` freely, `Some(true)` one half-open
    /// probe (claimed first).
    pub fn lease_gate(&self, now: Millis) -> Option<bool> {
        match self.state {
            HealthState::Healthy => Some(false),
            HealthState::Disabled => None,
            HealthState::Paused => (self.paused_until.unwrap_or(0) <= now).then_some(true),
            HealthState::Probing => (self.probe_expires_at.unwrap_or(0) <= now).then_some(true),
        }
    }

    /// Ends the current pause or disable: healthy again, counters reset.
    fn resume(mut self, now: Millis, actor: &str) -> Self {
        self.paused_ms = self.paused_total_ms(now);
        self.state = HealthState::Healthy;
        self.failures = 0;
        self.pauses = 0;
        self.paused_at = None;
        self.paused_until = None;
        self.probe_owner = None;
        self.probe_expires_at = None;
        self.stamp(now, actor)
    }

    /// Disabled (a 410, or an operator) until an operator enables it.
    fn disable(mut self, cause: String, now: Millis, actor: &str) -> Self {
        self.paused_at = Some(
            self.paused_at
                .filter(|_| self.state != HealthState::Healthy)
                .unwrap_or(now),
        );
        self.state = HealthState::Disabled;
        self.paused_until = None;
        self.probe_owner = None;
        self.probe_expires_at = None;
        self.cause = Some(cause);
        self.stamp(now, actor)
    }

    /// Paused (again) for the next cool-down.
    fn pause(
        mut self,
        policy: &HealthConfig,
        retry_after: Option<Duration>,
        cause: &str,
        now: Millis,
        actor: &str,
    ) -> Self {
        self.pauses += 1;
        let cool_down =
            i64::try_from(policy.cool_down(self.pauses, retry_after)).unwrap_or(i64::MAX);
        if self.state == HealthState::Healthy {
            self.paused_at = Some(now);
        }
        self.state = HealthState::Paused;
        self.paused_until = Some(now.saturating_add(cool_down));
        self.probe_owner = None;
        self.probe_expires_at = None;
        self.cause = Some(cause.to_owned());
        self.stamp(now, actor)
    }

    fn stamp(mut self, now: Millis, actor: &str) -> Self {
        self.changed_at = now;
        actor.clone_into(&mut self.changed_by);
        self
    }
}

/// What one attempt says about its target's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// A transient failure (not sent, 429, 503, mapped transient).
    Failure {
        /// The target's `Retry-After`, honoured up to the cap.
        retry_after: Option<Duration>,
        /// In words, for the audit.
        cause: String,
    },
    /// `410 Gone`: stop sending (Standard Webhooks).
    Gone,
    /// The target answered 2xx.
    Success,
}

/// The health signal of a sent attempt (never a reconciliation probe: its
/// 404 or 410 means "not there", not "go away"). `probe`: this was the
/// half-open probe, whose every answer but a 2xx counts as a failure.
pub fn signal(attempted: &Attempted, outcome: &Outcome, probe: bool) -> Option<Signal> {
    let status = match attempted {
        Attempted::Answered { status, .. } => Some(status.as_u16()),
        _ => None,
    };
    let retry_after = match outcome {
        Outcome::Transient { retry_after } | Outcome::RetrySafe { retry_after } => *retry_after,
        _ => None,
    };
    let failure = |cause: String| Some(Signal::Failure { retry_after, cause });
    match (outcome, status) {
        (Outcome::Permanent, Some(410)) => Some(Signal::Gone),
        (Outcome::Success { .. } | Outcome::Rejected { .. }, _) => Some(Signal::Success),
        (Outcome::Transient { .. }, None) => failure("the request could not be sent".into()),
        (Outcome::Transient { .. }, Some(s)) | (_, Some(s @ (429 | 503))) => {
            failure(format!("the target answered {s}"))
        }
        (_, Some(s)) if probe => failure(format!("the half-open probe got {s}")),
        _ if probe => failure("the half-open probe got no answer".into()),
        _ => None,
    }
}

/// A change of a target's health, to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The health after the change.
    pub health: TargetHealth,
    /// The audit event a state change writes (`None`: a counter only).
    pub event: Option<&'static str>,
}

/// What `signal` from an attempt does to `current` (`probe`: the attempt
/// was the half-open probe). `None`: nothing to store.
pub fn apply(
    current: TargetHealth,
    signal: &Signal,
    probe: bool,
    policy: &HealthConfig,
    now: Millis,
    actor: &str,
) -> Option<Change> {
    use HealthState::{Disabled, Healthy, Paused, Probing};
    let change = |health, event| Some(Change { health, event });
    match (signal, current.state) {
        (_, Disabled) => None,
        (Signal::Gone, _) => change(
            current.disable("the target answered 410 Gone".into(), now, actor),
            Some("target_disabled"),
        ),
        (Signal::Success, Probing) if probe => {
            change(current.resume(now, actor), Some("target_resumed"))
        }
        (Signal::Success, Healthy) if current.failures > 0 => {
            let mut health = current.stamp(now, actor);
            health.failures = 0;
            change(health, None)
        }
        (Signal::Failure { retry_after, cause }, Probing) if probe => change(
            current.pause(
                policy,
                *retry_after,
                &format!("{cause} (probe)"),
                now,
                actor,
            ),
            Some("target_paused"),
        ),
        (Signal::Failure { retry_after, cause }, Healthy) => {
            let failures = current.failures + 1;
            if policy.failure_threshold > 0 && failures >= i64::from(policy.failure_threshold) {
                let cause = format!("{cause}; {failures} transient failures in a row");
                let mut health = current.pause(policy, *retry_after, &cause, now, actor);
                health.failures = failures;
                change(health, Some("target_paused"))
            } else {
                let mut health = current.stamp(now, actor);
                health.failures = failures;
                change(health, None)
            }
        }
        // An answer to a send leased before the pause changes nothing.
        (_, Healthy | Paused | Probing) => None,
    }
}

/// An operator's enable (healthy again, counters reset) or disable.
pub fn operator(current: TargetHealth, enabled: bool, now: Millis, actor: &str) -> Change {
    if enabled {
        Change {
            health: current.resume(now, actor),
            event: Some("target_enabled"),
        }
    } else {
        Change {
            health: current.disable("disabled by an operator".into(), now, actor),
            event: Some("target_disabled"),
        }
    }
}

#[cfg(test)]
mod tests;
