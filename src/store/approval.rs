//! The approval gate's storage calls ([`ApprovalStore`], a part of every
//! [`super::Store`]): challenges, sessions and recorded model output.

use async_trait::async_trait;
use serde_json::Value;

use super::Result;
use crate::approval::{Challenge, ChallengeState, NewChallenge, StoredSession, Verdict};
use crate::clock::Millis;
use crate::ledger::{IdempotencyKey, Moved, Namespace, OwnerCall, Run};
use crate::outbox::NewEffect;
use crate::validate::Violation;

/// A decision to record.
#[derive(Debug, Clone)]
pub struct Decided {
    /// The challenge decided.
    pub challenge_id: String,
    /// Approve or reject.
    pub verdict: Verdict,
    /// The approver's subject.
    pub approver: String,
    /// `token` or `sso`.
    pub auth_method: String,
    /// The approver's reason or note.
    pub reason: Option<String>,
    /// What enters the outbox with the decision: the staged effects on
    /// approval, and the callback either way.
    pub effects: Vec<NewEffect>,
}

/// A model output to record.
#[derive(Debug, Clone)]
pub struct NewOutput {
    /// The operation whose schema judged it.
    pub operation: String,
    /// The output as posted.
    pub output: Value,
    /// Its violations (empty: valid).
    pub violations: Vec<Violation>,
    /// Model provider class (`hosted`, `self_hosted`, …).
    pub provider_class: String,
    /// Model name.
    pub model: String,
    /// Model revision.
    pub revision: String,
}

/// A recorded model output.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredOutput {
    /// 1 for the first posted output of the run.
    pub attempt: i64,
    /// The operation.
    pub operation: String,
    /// Whether it satisfied the schema.
    pub valid: bool,
    /// The output.
    pub output: Value,
    /// Its violations.
    pub violations: Value,
    /// Model provider class.
    pub provider_class: String,
    /// Model name.
    pub model: String,
    /// Model revision.
    pub revision: String,
    /// When it was posted.
    pub created_at: Millis,
}

/// What recording an output did.
#[derive(Debug, Clone)]
pub struct OutputRecorded {
    /// Which attempt this was.
    pub attempt: i64,
    /// The run afterwards (`failed_terminal` when the repairs ran out).
    pub moved: Moved,
    /// The repair bound was passed and the run failed for good.
    pub exhausted: bool,
}

/// Storage calls of approval gates.
#[async_trait]
pub trait ApprovalStore: Send + Sync {
    /// The owner gates its run: `processing → awaiting_human` by
    /// compare-and-set, with the challenge (its effects staged), in one
    /// transaction.
    ///
    /// # Errors
    /// [`super::StoreError::LostOwnership`] when the lease is not live and current.
    async fn gate(
        &self,
        call: &OwnerCall,
        challenge: &NewChallenge,
        detail: Value,
    ) -> Result<Moved>;

    /// The owner's run is cleared by policy (`approve_by_exception` rules
    /// or `act_with_window`): effects queued, run `approved`, the decision
    /// in the audit `detail`.
    ///
    /// # Errors
    /// [`super::StoreError::LostOwnership`] when the lease is not live and current.
    async fn approve_by_policy(
        &self,
        call: &OwnerCall,
        effects: &[NewEffect],
        detail: Value,
    ) -> Result<Moved>;

    /// A challenge by the SHA-256 of its link's token.
    ///
    /// # Errors
    /// [`super::StoreError::Database`] on database failure.
    async fn challenge_by_token(&self, token_hash: &str) -> Result<Option<Challenge>>;

    /// A challenge by id.
    ///
    /// # Errors
    /// [`super::StoreError::Database`] on database failure.
    async fn challenge(&self, id: &str) -> Result<Option<Challenge>>;

    /// Challenges, newest first, optionally in one state.
    ///
    /// # Errors
    /// [`super::StoreError::Database`] on database failure.
    async fn challenges(&self, state: Option<ChallengeState>, limit: i64)
        -> Result<Vec<Challenge>>;

    /// Consumes a pending, unexpired challenge, moves its run
    /// (`awaiting_human → approved` or `→ failed_terminal`) and inserts
    /// `effects`, in one transaction. `None` when the challenge was no
    /// longer pending or had expired: nothing was written.
    ///
    /// # Errors
    /// [`super::StoreError::Database`] on database failure; nothing is written.
    async fn decide(&self, decided: &Decided) -> Result<Option<Run>>;

    /// Pending challenges past their expiry.
    ///
    /// # Errors
    /// [`super::StoreError::Database`] on database failure.
    async fn due_challenges(&self, limit: i64) -> Result<Vec<Challenge>>;

    /// Expires a due challenge: its run `awaiting_human → dead_lettered`
    /// with a dead letter of class `approval_expired`, and the callback.
    /// `false` when it was decided meanwhile.
    ///
    /// # Errors
    /// [`super::StoreError::Database`] on database failure.
    async fn expire_challenge(&self, id: &str, callback: Option<&NewEffect>) -> Result<bool>;

    /// Replaces a due challenge by its escalation; the run keeps waiting.
    /// `false` when it was decided meanwhile.
    ///
    /// # Errors
    /// [`super::StoreError::Database`] on database failure.
    async fn escalate_challenge(&self, id: &str, next: &NewChallenge) -> Result<bool>;

    /// Stores a browser session.
    ///
    /// # Errors
    /// [`super::StoreError::Database`] on database failure.
    async fn insert_session(&self, session: &StoredSession) -> Result<()>;

    /// An unexpired session by the digest of its cookie.
    ///
    /// # Errors
    /// [`super::StoreError::Database`] on database failure.
    async fn session(&self, id_hash: &str) -> Result<Option<StoredSession>>;

    /// Ends a session.
    ///
    /// # Errors
    /// [`super::StoreError::Database`] on database failure.
    async fn delete_session(&self, id_hash: &str) -> Result<()>;

    /// Deletes expired sessions; returns how many.
    ///
    /// # Errors
    /// [`super::StoreError::Database`] on database failure.
    async fn purge_sessions(&self) -> Result<u64>;

    /// Records a model output under the owner's lease. An invalid one
    /// when no repair is left (the first output plus `max_repairs`
    /// repairs all failed) moves the run to `failed_terminal` in the same
    /// transaction.
    ///
    /// # Errors
    /// [`super::StoreError::LostOwnership`] when the lease is not live and current.
    async fn record_output(
        &self,
        call: &OwnerCall,
        output: &NewOutput,
        max_repairs: u32,
    ) -> Result<OutputRecorded>;

    /// The run's most recent model output.
    ///
    /// # Errors
    /// [`super::StoreError::Database`] on database failure.
    async fn latest_output(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
    ) -> Result<Option<StoredOutput>>;
}
