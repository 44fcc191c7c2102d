//! Approval challenges: what a person is asked to decide, and every reason
//! a decision is refused (DESIGN.md §5).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::policy::ApproverAuth;
use crate::clock::Millis;
use crate::ledger::{IdempotencyKey, InvalidId, Namespace, Run};
use crate::outbox::{EffectSpec, NewEffect};

/// Where a challenge is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
    fn admits(&self, approver: &Approver) -> bool {
        (self.subjects.is_empty() && self.roles.is_empty())
            || self.subjects.contains(&approver.subject)
            || approver.roles.iter().any(|r| self.roles.contains(r))
    }
}

/// An effect staged on a challenge, stored as JSON until the approval is
/// consumed (bodies are JSON text, so they round-trip as strings).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StagedEffect {
    operation: String,
    effect_type: String,
    target: String,
    method: String,
    url: String,
    headers: BTreeMap<String, String>,
    body: Option<String>,
    idempotency_key: String,
    spec: EffectSpec,
    not_before: Option<Millis>,
}

impl From<&NewEffect> for StagedEffect {
    fn from(e: &NewEffect) -> Self {
        Self {
            operation: e.operation.clone(),
            effect_type: e.effect_type.clone(),
            target: e.target.clone(),
            method: e.method.clone(),
            url: e.url.clone(),
            headers: e.headers.clone(),
            body: e
                .body
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned()),
            idempotency_key: e.idempotency_key.clone(),
            spec: e.spec.clone(),
            not_before: e.not_before,
        }
    }
}

impl From<StagedEffect> for NewEffect {
    fn from(s: StagedEffect) -> Self {
        Self {
            operation: s.operation,
            effect_type: s.effect_type,
            target: s.target,
            method: s.method,
            url: s.url,
            headers: s.headers,
            body: s.body.map(String::into_bytes),
            idempotency_key: s.idempotency_key,
            spec: s.spec,
            not_before: s.not_before,
            role: crate::outbox::EffectRole::Act,
        }
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

/// How a person signed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// A session opened with an approver or operator token.
    Token,
    /// The trusted SSO header from a configured proxy.
    Sso,
}

impl AuthMethod {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Token => "token",
            Self::Sso => "sso",
        }
    }
}

/// A signed-in person who wants to decide.
#[derive(Debug, Clone)]
pub struct Approver {
    /// Subject (the actor in the audit log).
    pub subject: String,
    /// Roles.
    pub roles: Vec<String>,
    /// Holds the approver scope.
    pub may_approve: bool,
    /// How they signed in.
    pub auth: AuthMethod,
}

/// Why a decision is refused. Each sends nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No session.
    #[error("sign in as an approver first")]
    NotSignedIn,
    /// The link names no challenge.
    #[error("this approval link is not valid")]
    Invalid,
    /// Already decided (or escalated).
    #[error("this approval was already used: it is {0}")]
    Used(&'static str),
    /// Past its expiry.
    #[error("this approval expired; nothing was sent")]
    Expired,
    /// The decision is not one the challenge allows.
    #[error("that decision is not allowed for this approval")]
    WrongDecision,
    /// The session lacks the approver scope.
    #[error("your account may not approve (it lacks the approver scope)")]
    NotApprover,
    /// Outside the intended approvers.
    #[error("you are not among the intended approvers of this request")]
    NotInAudience,
    /// A required role is missing.
    #[error("you lack the required role {0:?}")]
    MissingRole(String),
    /// The operation needs SSO and the session came from a token.
    #[error("this operation requires single sign-on; a token session is not enough")]
    SsoRequired,
    /// Segregation of duties.
    #[error("you may not approve a run you {0}")]
    SelfApproval(&'static str),
    /// The form's CSRF token is missing or wrong.
    #[error("the form is stale or forged (CSRF check failed); reload the page")]
    BadCsrf,
}

impl Refusal {
    /// The problem type slug.
    pub fn slug(&self) -> &'static str {
        match self {
            Self::NotSignedIn => "approval-sign-in",
            Self::Invalid => "approval-invalid",
            Self::Used(_) => "approval-used",
            Self::Expired => "approval-expired",
            Self::WrongDecision => "approval-wrong-decision",
            Self::NotApprover => "approval-not-approver",
            Self::NotInAudience => "approval-not-in-audience",
            Self::MissingRole(_) => "approval-missing-role",
            Self::SsoRequired => "approval-sso-required",
            Self::SelfApproval(_) => "approval-self-approval",
            Self::BadCsrf => "approval-csrf",
        }
    }
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

    /// Whether `approver` may make `decision` now; the store's
    /// compare-and-set then makes it single-use.
    ///
    /// # Errors
    /// The first [`Refusal`] that applies, most basic first.
    pub fn check(
        &self,
        run: &Run,
        approver: &Approver,
        decision: Verdict,
        now: Millis,
    ) -> Result<(), Refusal> {
        if self.state != ChallengeState::Pending {
            return Err(Refusal::Used(self.state.as_str()));
        }
        if now >= self.new.expires_at {
            return Err(Refusal::Expired);
        }
        if !self.new.decisions.contains(&decision) {
            return Err(Refusal::WrongDecision);
        }
        self.check_person(run, approver)
    }

    /// The checks about the person alone (also used to decide whether to
    /// offer the form).
    ///
    /// # Errors
    /// The first [`Refusal`] about the person.
    pub fn check_person(&self, run: &Run, approver: &Approver) -> Result<(), Refusal> {
        if !approver.may_approve {
            return Err(Refusal::NotApprover);
        }
        if !self.new.audience.admits(approver) {
            return Err(Refusal::NotInAudience);
        }
        if let Some(role) = self
            .new
            .required_roles
            .iter()
            .find(|r| !approver.roles.contains(r))
        {
            return Err(Refusal::MissingRole(role.clone()));
        }
        if self.new.approver_auth == ApproverAuth::Sso && approver.auth != AuthMethod::Sso {
            return Err(Refusal::SsoRequired);
        }
        if run.metadata.requested_by.as_deref() == Some(approver.subject.as_str()) {
            return Err(Refusal::SelfApproval("requested"));
        }
        if run.claimed_by == approver.subject {
            return Err(Refusal::SelfApproval("claimed"));
        }
        Ok(())
    }
}
