//! Who decides: the signed-in approver, and every reason a decision is
//! refused (DESIGN.md §5, segregation of duties included).

use super::challenge::{Challenge, ChallengeState, Verdict};
use super::identity;
use super::policy::ApproverAuth;
use crate::clock::Millis;
use crate::ledger::Run;

/// How a person signed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// A session opened with an approver or operator token.
    Token,
    /// Single sign-on: the trusted header from a configured proxy, or an
    /// OpenID Connect sign-in.
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
    /// The staged effects are not the ones the approval was bound to.
    #[error("the proposed effects changed after this approval was shown; nothing was sent. Reload the page to see what would be sent now")]
    EffectsChanged,
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
            Self::EffectsChanged => "approval-effects-changed",
        }
    }
}

impl Challenge {
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
            .find(|r| !identity::contains(&approver.roles, r))
        {
            return Err(Refusal::MissingRole(role.clone()));
        }
        if self.new.approver_auth == ApproverAuth::Sso && approver.auth != AuthMethod::Sso {
            return Err(Refusal::SsoRequired);
        }
        let requested_by = run.metadata.requested_by.as_deref();
        if requested_by.is_some_and(|r| identity::same(r, &approver.subject)) {
            return Err(Refusal::SelfApproval("requested"));
        }
        if identity::same(&run.claimed_by, &approver.subject) {
            return Err(Refusal::SelfApproval("claimed"));
        }
        Ok(())
    }

    /// The digest the approval was bound to at the gate.
    pub fn bound_digest(&self) -> Option<&str> {
        self.new.card.get("effects_digest").and_then(|d| d.as_str())
    }

    /// Whether the staged effects are still those the approval was bound
    /// to (and, when the form carries it, those the person was shown).
    ///
    /// # Errors
    /// [`Refusal::EffectsChanged`].
    pub fn check_effects(&self, shown: Option<&str>) -> Result<(), Refusal> {
        let now = super::staged::effects_digest(&self.new.effects);
        let bound = self.bound_digest();
        if bound.is_some_and(|d| d != now) || shown.is_some_and(|d| d != now) {
            return Err(Refusal::EffectsChanged);
        }
        Ok(())
    }
}
