//! A person's decision on a challenge: what the confirmation page shows
//! (and whether it offers the form), and the decision itself, consumed
//! once: the challenge, the run's move and the released effects commit in
//! one transaction, or nothing happens.

use tokio::sync::Notify;

use super::approver::Refusal;
use super::challenge::{Challenge, ChallengeState, Verdict};
use super::challenge_callback;
use super::people::Person;
use super::port::{ApprovalStore, Decided};
use super::token::Secret;
use crate::clock::Clock;
use crate::ledger::port::LedgerStore;
use crate::ledger::storage::StoreError;
use crate::ledger::InvalidId;
use crate::metrics::{GateDecision, Metrics};

/// Which challenge a page is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handle {
    /// The link's token (`/approve/{token}`).
    Token(String),
    /// The challenge id (`/approvals/{id}`, from the inbox).
    Id(String),
}

/// What a decision needs.
#[derive(Debug, Clone, Copy)]
pub struct Decisions<'a> {
    /// Challenges and their consumption.
    pub approvals: &'a dyn ApprovalStore,
    /// The gated runs (segregation of duties).
    pub runs: &'a dyn LedgerStore,
    /// Gate and run metrics.
    pub metrics: &'a Metrics,
    /// Expiry.
    pub clock: &'a dyn Clock,
    /// Wakes the dispatcher when effects are released.
    pub wake: &'a Notify,
}

/// Why a decision could not be looked at or made, besides a [`Refusal`].
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// A stored challenge names a run that is no valid run id.
    #[error(transparent)]
    Corrupt(#[from] InvalidId),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The confirmation page's view of a challenge for one person.
#[derive(Debug, Clone)]
pub struct Viewed {
    /// The challenge.
    pub challenge: Challenge,
    /// Why this person may not decide now, if so (no form then).
    pub barred: Option<Refusal>,
}

/// A decision form as submitted.
#[derive(Debug, Clone, Default)]
pub struct DecisionForm {
    /// `approve` or `reject`.
    pub decision: Option<String>,
    /// The CSRF token bound to the session and the challenge.
    pub csrf: Option<String>,
    /// The approver's reason or note.
    pub reason: Option<String>,
    /// The digest of the effects the page showed.
    pub effects_digest: Option<String>,
}

/// A decision made, or the refusal that sent nothing.
pub type Decision = Result<(Verdict, Challenge), Refusal>;

impl Decisions<'_> {
    /// The challenge `handle` names, if any.
    ///
    /// # Errors
    /// The store failed.
    pub async fn find(&self, handle: &Handle) -> Result<Option<Challenge>, StoreError> {
        Ok(match handle {
            Handle::Token(t) => match Secret::parse(t) {
                Some(secret) => self.approvals.challenge_by_token(&secret.digest()).await?,
                None => None,
            },
            Handle::Id(id) if id.len() <= 64 => self.approvals.challenge(id).await?,
            Handle::Id(_) => None,
        })
    }

    /// The challenge for `person`'s confirmation page, with the reason
    /// they may not decide, if any; `None` when `handle` names none.
    ///
    /// # Errors
    /// [`DecideError`].
    pub async fn view(
        &self,
        handle: &Handle,
        person: &Person,
    ) -> Result<Option<Viewed>, DecideError> {
        let Some(challenge) = self.find(handle).await? else {
            return Ok(None);
        };
        let run = self
            .runs
            .get_run(&challenge.run_namespace()?, &challenge.run_key()?)
            .await?;
        let barred = match run {
            Some(run) => challenge.check_person(&run, &person.approver()).err(),
            None => Some(Refusal::Invalid),
        };
        let expired = challenge.new.expires_at <= self.clock.now_ms();
        let barred = barred
            .or(expired.then_some(Refusal::Expired))
            .or(challenge.check_effects(None).err());
        Ok(Some(Viewed { challenge, barred }))
    }

    /// `person`'s decision on the challenge `handle` names: checked (CSRF,
    /// decision, the person, expiry), then consumed once with the run's
    /// move and its effects (approve) or none (reject).
    ///
    /// # Errors
    /// [`DecideError`]; every refusal comes back as `Ok(Err(_))`.
    pub async fn decide(
        &self,
        handle: &Handle,
        person: Option<&Person>,
        form: DecisionForm,
    ) -> Result<Decision, DecideError> {
        let Some(person) = person else {
            return Ok(Err(Refusal::NotSignedIn));
        };
        let Some(challenge) = self.find(handle).await? else {
            return Ok(Err(Refusal::Invalid));
        };
        let csrf_ok = form
            .csrf
            .as_deref()
            .is_some_and(|t| person.secret.csrf_matches(&challenge.new.id, t));
        if !csrf_ok {
            return Ok(Err(Refusal::BadCsrf));
        }
        let Some(verdict) = form.decision.as_deref().and_then(Verdict::parse) else {
            return Ok(Err(Refusal::WrongDecision));
        };
        let ns = challenge.run_namespace()?;
        let Some(run) = self.runs.get_run(&ns, &challenge.run_key()?).await? else {
            return Ok(Err(Refusal::Invalid));
        };
        let approver = person.approver();
        if let Err(refusal) = challenge.check(&run, &approver, verdict, self.clock.now_ms()) {
            return Ok(Err(refusal));
        }
        if verdict == Verdict::Approve {
            if let Err(refusal) = challenge.check_effects(form.effects_digest.as_deref()) {
                return Ok(Err(refusal));
            }
        }
        let decided = decided(&challenge, verdict, &approver, form.reason);
        let Some(run) = self.approvals.decide(&decided).await? else {
            // Someone else decided first, or it expired meanwhile.
            let now = self.find(handle).await?;
            return Ok(Err(match now {
                Some(c) if c.state != ChallengeState::Pending => Refusal::Used(c.state.as_str()),
                _ => Refusal::Expired,
            }));
        };
        let outcome = match verdict {
            Verdict::Approve => GateDecision::Approved,
            Verdict::Reject => GateDecision::Rejected,
        };
        let waited = run.updated_at - challenge.created_at;
        self.metrics
            .gate_decided(&challenge.new.operation, outcome, waited);
        self.metrics.run_moved(&run);
        self.wake.notify_one();
        Ok(Ok((verdict, challenge)))
    }
}

/// The consumption to store: the staged effects (approve) or none
/// (reject), and the callback either way.
fn decided(
    challenge: &Challenge,
    verdict: Verdict,
    approver: &super::Approver,
    reason: Option<String>,
) -> Decided {
    let reason = reason
        .map(|r| r.trim().chars().take(1000).collect::<String>())
        .filter(|r| !r.is_empty());
    let (decision, state) = match verdict {
        Verdict::Approve => ("approved", "approved"),
        Verdict::Reject => ("rejected", "failed_terminal"),
    };
    let mut effects = match verdict {
        Verdict::Approve => challenge.new.effects.clone(),
        Verdict::Reject => Vec::new(),
    };
    effects.extend(challenge_callback(challenge, decision, state));
    Decided {
        challenge_id: challenge.new.id.clone(),
        verdict,
        approver: approver.subject.clone(),
        auth_method: approver.auth.as_str().into(),
        reason,
        effects,
    }
}
