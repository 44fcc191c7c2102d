//! The transactional outbox (DESIGN.md §4).
//!
//! An effect is an intended external HTTP write. It is inserted only inside
//! the transaction that permits it (the owner's move to `approved`, the
//! ingress accept, …), so a committed decision and its effects stand or fall
//! together; nothing is sent from inside a request handler. `(run,
//! effect_type, target)` is unique: the same intended effect twice is one
//! effect, and its downstream idempotency key stays the same on every
//! attempt and replay.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::clock::Millis;

pub mod backoff;
pub mod classify;
pub mod commit;
pub mod dispatch_types;
pub mod dispatcher;
pub mod dispatcher_config;
pub mod effect_check;
pub mod egress;
pub mod health;
pub mod killswitch;
pub mod moves;
// The dispatch span and counts.
mod observe;
pub mod port;
pub mod scrub;
pub mod seal;
pub mod sender;
pub mod signing;
pub mod target;
pub mod verdict;

pub use classify::AttemptClass;
pub use dispatch_types::{
    ActionSwitch, AttemptOutcome, AttemptRecord, AttemptView, ClusterLimits, Decision, FailClass,
    Leased, Recorded, TargetRoom, Verdict,
};
pub use dispatcher::{Dispatcher, StepReport};
pub use dispatcher_config::DispatcherConfig;
pub use killswitch::KillSwitch;
pub use moves::EffectMove;
pub use target::{RetryBudget, TargetConfig, TargetKind};

/// Where an effect is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectState {
    /// Waiting to be sent (or re-sent after a retryable outcome).
    Pending,
    /// Leased by a dispatcher that is sending it now.
    Sending,
    /// The target confirmed it.
    Completed,
    /// Sent, outcome unknown: reconciled, never blindly resent.
    Unknown,
    /// Failed for good (permanent, rejected, or out of budget).
    Failed,
    /// Cancelled while still pending.
    Cancelled,
}

impl EffectState {
    /// Every state.
    pub const ALL: [Self; 6] = [
        Self::Pending,
        Self::Sending,
        Self::Completed,
        Self::Unknown,
        Self::Failed,
        Self::Cancelled,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Sending => "sending",
            Self::Completed => "completed",
            Self::Unknown => "unknown",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for EffectState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EffectState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| format!("unknown effect state {s:?}"))
    }
}

/// What an effect is for, which decides whether it moves its run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectRole {
    /// A consequential write: the run completes when its last one does,
    /// and fails when one fails for good.
    #[default]
    Act,
    /// A notification about the run (an approval's decision callback):
    /// sent whatever the run's state, and it never moves the run.
    Notify,
}

impl EffectRole {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Act => "act",
            Self::Notify => "notify",
        }
    }
}

impl FromStr for EffectRole {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Self::Act, Self::Notify]
            .into_iter()
            .find(|role| role.as_str() == s)
            .ok_or_else(|| format!("unknown effect role {s:?}"))
    }
}

/// A 2xx whose body matches this rule is a business rejection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RejectRule {
    /// JSON pointer into the response body.
    pub pointer: String,
    /// The value that means "rejected".
    pub equals: serde_json::Value,
}

/// Where the target's id for the created thing is found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExternalIdAt {
    /// A response header.
    Header(String),
    /// A JSON pointer into the response body.
    Pointer(String),
}

/// How the dispatcher reads an effect's outcome.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EffectSpec {
    /// Business-rejection rule for 2xx answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reject: Option<RejectRule>,
    /// Where the external id is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<ExternalIdAt>,
    /// A GET URL template (`{external_ref}`, `{idempotency_key}`) that
    /// proves whether an unknown effect happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_url: Option<String>,
}

/// An effect to insert, already checked against its operation and target.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEffect {
    /// The declared operation it belongs to.
    pub operation: String,
    /// What kind of effect (`forward`, `send_email`, …); unique per run and target.
    pub effect_type: String,
    /// The configured target's name.
    pub target: String,
    /// HTTP method.
    pub method: String,
    /// The full URL, inside the target's base URL.
    pub url: String,
    /// Non-secret request headers.
    pub headers: BTreeMap<String, String>,
    /// The request body, byte for byte.
    pub body: Option<Vec<u8>>,
    /// The downstream idempotency key, stable across attempts and replays.
    pub idempotency_key: String,
    /// How to read the outcome.
    pub spec: EffectSpec,
    /// Not to be sent before this time.
    pub not_before: Option<Millis>,
    /// Whether it acts or only notifies.
    pub role: EffectRole,
    /// The schema version of the workflow that produced it, as the commit
    /// declared it (DESIGN.md §7): a dead letter names it, so a fix can be
    /// matched to the payload shape it corrects.
    pub schema_version: Option<String>,
}

/// The downstream key of an effect when its operation names none:
/// `<namespace>:<key>:<effect_type>`, with `%` and `:` percent-encoded in
/// the namespace.
///
/// Keys may hold `:` and namespaces could too, so written plainly
/// `crm:x`/`y` and `crm`/`x:y` would share a key. An effect type never
/// holds `:`, so once the namespace cannot either, the first `:` ends the
/// namespace and the last one starts the effect type: every key names one
/// run and effect. A namespace without `:` or `%` (nearly all) is written
/// as before, so its keys did not change.
pub fn default_idempotency_key(namespace: &str, key: &str, effect_type: &str) -> String {
    let namespace = namespace.replace('%', "%25").replace(':', "%3A");
    format!("{namespace}:{key}:{effect_type}")
}

/// An effect as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    /// Stable id (UUID v7).
    pub id: String,
    /// The run's namespace.
    pub namespace: String,
    /// The run's key.
    pub key: String,
    /// The effect as committed.
    pub new: NewEffect,
    /// Current state.
    pub state: EffectState,
    /// Attempts made.
    pub attempts: i64,
    /// When the next attempt is due.
    pub next_attempt_at: Millis,
    /// The target's id for what it created.
    pub external_ref: Option<String>,
    /// HTTP status of the last attempt.
    pub last_status: Option<i64>,
    /// Outcome class of the last attempt.
    pub last_class: Option<AttemptClass>,
    /// Last error, sanitised.
    pub last_error: Option<String>,
    /// When the first attempt was sent.
    pub first_sent_at: Option<Millis>,
    /// When it was committed.
    pub created_at: Millis,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip() {
        for state in EffectState::ALL {
            assert_eq!(state.as_str().parse::<EffectState>().unwrap(), state);
        }
        assert!("sent".parse::<EffectState>().is_err());
    }

    #[test]
    fn default_key_names_run_and_effect() {
        assert_eq!(
            default_idempotency_key("stripe", "evt_1", "forward"),
            "stripe:evt_1:forward"
        );
        assert_ne!(
            default_idempotency_key("crm:x", "y", "send"),
            default_idempotency_key("crm", "x:y", "send")
        );
        assert_eq!(
            default_idempotency_key("crm:x", "y", "send"),
            "crm%3Ax:y:send"
        );
        assert_eq!(
            default_idempotency_key("a%3A", "b", "t"),
            "a%253A:b:t",
            "a namespace that looks encoded stays apart from one that is"
        );
    }
}
