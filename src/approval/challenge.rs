//! Approval challenges: what a person is asked to decide, and every reason
//! a decision is refused (DESIGN.md §5).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::approver::Approver;
use super::policy::ApproverAuth;
use crate::clock::Millis;
use crate::ledger::{IdempotencyKey, InvalidId, Namespace};
use crate::outbox::NewEffect;

/// Where a challenge is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChallengeState {
    /// Waiting for a decision.
    Pending,
    /// Approved: its effects are in the outbox.
    Approved,
    /// Rejected: nothing was sent.
    Rejected,
    /// Nobody decided in time; the run was dead-lettered.
    Expired,
    /// Nobody decided in time; a new challenge went to the escalation group.
    Escalated,
}

/// A change of a challenge's state: each from `pending` only, once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeMove {
    /// An approver decides: approved or rejected.
    Decide,
    /// Nobody decided before the expiry.
    Expire,
    /// Nobody decided before the expiry; the escalation group gets a new one.
    Escalate,
}

impl ChallengeMove {
    /// The move's rule.
    pub fn rule(self) -> crate::lifecycle::Rule<ChallengeState> {
        use ChallengeState::{Approved, Escalated, Expired, Pending, Rejected};
        let to: &'static [ChallengeState] = match self {
            Self::Decide => &[Approved, Rejected],
            Self::Expire => &[Expired],
            Self::Escalate => &[Escalated],
        };
        crate::lifecycle::Rule {
            from: &[Pending],
            to,
        }
    }
}

impl crate::lifecycle::Stored for ChallengeState {
    fn stored(self) -> &'static str {
        self.as_str()
    }
}

impl ChallengeState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::Expired => "expired",
            Self::Escalated => "escalated",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Approved,
            Self::Rejected,
            Self::Expired,
            Self::Escalated,
        ]
        .into_iter()
        .find(|state| state.as_str() == s)
    }
}

/// A person's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Release the staged effects.
    Approve,
    /// Send nothing; the run fails for good.
    Reject,
}

impl Verdict {
    /// The form and stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Reject => "reject",
        }
    }

    /// Parses a form value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "approve" => Some(Self::Approve),
            "reject" => Some(Self::Reject),
            _ => None,
        }
    }
}

/// Who a challenge is meant for. Both lists empty: any approver.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Audience {
    /// By subject.
    pub subjects: Vec<String>,
    /// By role.
    pub roles: Vec<String>,
}

impl Audience {
    pub(super) fn admits(&self, approver: &Approver) -> bool {
        use super::identity::contains;
        (self.subjects.is_empty() && self.roles.is_empty())
            || contains(&self.subjects, &approver.subject)
            || approver.roles.iter().any(|r| contains(&self.roles, r))
    }
}

/// A challenge to create.
#[derive(Debug, Clone)]
pub struct NewChallenge {
    /// Stable id (UUID v7): the inbox's handle.
    pub id: String,
    /// SHA-256 of the link's token; `None` for inbox-only challenges.
    pub token_hash: Option<String>,
    /// The gated operation.
    pub operation: String,
    /// Allowed decisions.
    pub decisions: Vec<Verdict>,
    /// Intended approvers.
    pub audience: Audience,
    /// Roles the approver must hold.
    pub required_roles: Vec<String>,
    /// How the approver must have signed in.
    pub approver_auth: ApproverAuth,
    /// What approval releases.
    pub effects: Vec<NewEffect>,
    /// Called through the outbox when the decision is made.
    pub callback_url: Option<String>,
    /// The target `callback_url` lies in.
    pub callback_target: Option<String>,
    /// What the confirmation page shows besides the run (output, model,
    /// validation), as of the gate.
    pub card: Value,
    /// 0 for the first challenge, 1 for its escalation.
    pub escalation: i64,
    /// Absolute expiry.
    pub expires_at: Millis,
}

/// A stored challenge.
#[derive(Debug, Clone)]
pub struct Challenge {
    /// What was created.
    pub new: NewChallenge,
    /// The run's namespace.
    pub namespace: String,
    /// The run's key.
    pub key: String,
    /// Where it is.
    pub state: ChallengeState,
    /// When it was created.
    pub created_at: Millis,
    /// When it was decided (or expired).
    pub decided_at: Option<Millis>,
    /// Who decided.
    pub decided_by: Option<String>,
    /// `token` or `sso`.
    pub auth_method: Option<String>,
    /// The decision's reason or note.
    pub reason: Option<String>,
}

impl Challenge {
    /// The run's namespace, parsed.
    ///
    /// # Errors
    /// The stored value is not a namespace (a corrupt row).
    pub fn run_namespace(&self) -> Result<Namespace, InvalidId> {
        Namespace::parse(self.namespace.clone())
    }

    /// The run's key, parsed.
    ///
    /// # Errors
    /// The stored value is not a key (a corrupt row).
    pub fn run_key(&self) -> Result<IdempotencyKey, InvalidId> {
        IdempotencyKey::parse(self.key.clone())
    }
}
