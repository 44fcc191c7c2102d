//! Human approval gates (DESIGN.md §5).
//!
//! A gated run's owner calls `POST /v1/runs/gate`; by compare-and-set the
//! run moves to `awaiting_human`, its effects are staged on a
//! [`Challenge`] (not in the outbox), and the challenge is created in the
//! same transaction. The link holds a 256-bit [`Secret`] shown once; only
//! its SHA-256 is stored. `GET /approve/{token}` renders a confirmation page
//! and changes nothing; `POST` with the decision and a CSRF token bound to
//! the session and the challenge consumes the challenge, moves the run and
//! inserts the staged effects in one transaction, or does nothing at all.
//!
//! - [`policy`]: per-operation settings and `approve_by_exception` rules.
//! - [`gate`]: the owner's calls: model output recorded, the run gated.
//! - [`challenge`]: the challenge and its moves; [`staged`]: its effects.
//! - [`approver`]: who decides, and every refusal.
//! - [`people`]: who is signed in (session cookie or trusted SSO).
//! - [`oidc`]: sign-in with an OpenID provider (code flow, PKCE).
//! - [`decide`]: a person's decision, consumed once.
//! - [`card`]: a challenge as an approval card.
//! - [`session`]: browser sessions and trusted single sign-on.
//! - [`token`]: secrets and CSRF tokens.
//! - [`sweeper`]: expiry (dead letter) or escalation (a new challenge).
//! - [`pages`]: the sign-in, confirmation and refusal pages.

use serde_json::{json, Value};

pub mod approver;
pub mod card;
pub mod challenge;
pub mod decide;
pub mod effects;
pub mod gate;
pub mod identity;
pub mod oidc;
pub mod operation;
pub mod pages;
pub mod people;
pub mod policy;
pub mod port;
pub mod server_key;
pub mod session;
pub mod staged;
pub mod sweeper;
pub mod token;

pub use approver::{Approver, AuthMethod, Refusal};
pub use challenge::{Audience, Challenge, ChallengeMove, ChallengeState, NewChallenge, Verdict};
pub use operation::{GatePolicy, OperationConfig};
pub use policy::{
    ApprovalPolicy, ApproverAuth, Eligibility, EligibilityRule, ExceptionPolicy, OutputContract,
};
pub use session::{ApprovalsConfig, StoredSession};
pub use staged::StagedEffect;
pub use token::Secret;

use crate::clock::Millis;
use crate::outbox::{EffectSpec, NewEffect, TargetConfig};

/// The reserved operation of decision callbacks. Its effects are sent
/// whatever state the run is in, and never move the run.
pub const CALLBACK_OPERATION: &str = "approval.callback";

/// A new challenge for a gated run, with the link's secret (shown once).
pub fn first_challenge(
    op: &OperationConfig,
    effects: Vec<NewEffect>,
    callback: Option<Callback>,
    card: Value,
    now: Millis,
) -> (NewChallenge, Secret) {
    let secret = Secret::generate();
    let policy = &op.approval;
    let (callback_url, callback_target) = callback.map(|c| (c.url, c.target)).unzip();
    let mut card = card;
    if let Value::Object(fields) = &mut card {
        let digest = staged::effects_digest(&effects);
        fields.insert("effects_digest".into(), Value::String(digest));
    }
    let challenge = NewChallenge {
        id: uuid::Uuid::now_v7().to_string(),
        token_hash: Some(secret.digest()),
        operation: op.name.clone(),
        decisions: vec![Verdict::Approve, Verdict::Reject],
        audience: Audience {
            subjects: policy.subjects.clone(),
            roles: policy.roles.clone(),
        },
        required_roles: policy.required_roles.clone(),
        approver_auth: policy.auth,
        effects,
        callback_url,
        callback_target,
        card,
        escalation: 0,
        expires_at: now + secs_ms(policy.expiry_secs),
    };
    (challenge, secret)
}

/// The escalation of an expired challenge: the same decision for the
/// escalation group, reached from the approvals inbox (no link: a link
/// would have to be delivered, and only its hash may be stored).
pub fn escalation_of(expired: &Challenge, policy: &ApprovalPolicy, now: Millis) -> NewChallenge {
    NewChallenge {
        id: uuid::Uuid::now_v7().to_string(),
        token_hash: None,
        audience: Audience {
            subjects: policy.escalate_to_subjects.clone(),
            roles: policy.escalate_to_roles.clone(),
        },
        escalation: expired.new.escalation + 1,
        expires_at: now + secs_ms(policy.escalation_expiry_secs.unwrap_or(policy.expiry_secs)),
        ..expired.new.clone()
    }
}

/// Where a run's decision is reported: a URL inside a configured target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Callback {
    /// The URL (e.g. an n8n Wait node's resume URL).
    pub url: String,
    /// The configured target it lies in.
    pub target: String,
}

/// The effect that reports a decision to `callback`, sent through the
/// outbox like any effect. `tag` tells decisions of one run apart (the
/// challenge id, or `policy`).
pub fn callback_effect(
    namespace: &str,
    key: &str,
    tag: &str,
    callback: &Callback,
    decision: &str,
    run_state: &str,
) -> NewEffect {
    let effect_type = format!("approval_callback.{tag}");
    let body = json!({
        "namespace": namespace,
        "key": key,
        "challenge_id": (tag != "policy").then_some(tag),
        "decision": decision,
        "state": run_state,
    });
    NewEffect {
        operation: CALLBACK_OPERATION.into(),
        idempotency_key: crate::outbox::default_idempotency_key(namespace, key, &effect_type),
        effect_type,
        target: callback.target.clone(),
        method: "POST".into(),
        url: callback.url.clone(),
        headers: [("content-type".to_owned(), "application/json".to_owned())].into(),
        body: Some(body.to_string().into_bytes()),
        spec: EffectSpec::default(),
        not_before: None,
        role: crate::outbox::EffectRole::Notify,
        schema_version: None,
    }
}

/// The callback effect of a challenge's decision, when it has a callback.
pub fn challenge_callback(
    challenge: &Challenge,
    decision: &str,
    run_state: &str,
) -> Option<NewEffect> {
    let callback = Callback {
        url: challenge.new.callback_url.clone()?,
        target: challenge.new.callback_target.clone()?,
    };
    Some(callback_effect(
        &challenge.namespace,
        &challenge.key,
        &challenge.new.id,
        &callback,
        decision,
        run_state,
    ))
}

/// The callback for `url`, if it lies inside one of `targets`.
pub fn callback_for(targets: &[TargetConfig], url: &str) -> Option<Callback> {
    targets.iter().find(|t| t.allows(url)).map(|t| Callback {
        url: url.to_owned(),
        target: t.name.clone(),
    })
}

/// Seconds to milliseconds, saturating.
pub fn secs_ms(secs: u64) -> Millis {
    i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX)
}
