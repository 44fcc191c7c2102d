//! The approval gate's storage ports: challenges and their decisions
//! ([`ApprovalStore`]); browser sessions ([`SessionStore`]).

use async_trait::async_trait;
use serde_json::Value;

use super::{Challenge, ChallengeState, NewChallenge, StoredSession, Verdict};
use crate::ledger::storage::Result;
use crate::ledger::{Moved, OwnerCall, Run};
use crate::outbox::NewEffect;

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

/// Storage calls of approval gates.
#[async_trait]
pub trait ApprovalStore: Send + Sync + std::fmt::Debug {
    /// The owner gates its run: `processing → awaiting_human` by
    /// compare-and-set, with the challenge (its effects staged), in one
    /// transaction.
    ///
    /// # Errors
    /// [`StoreError::LostOwnership`](crate::ledger::storage::StoreError::LostOwnership) when the lease is not live and current.
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
    /// [`StoreError::LostOwnership`](crate::ledger::storage::StoreError::LostOwnership) when the lease is not live and current.
    async fn approve_by_policy(
        &self,
        call: &OwnerCall,
        effects: &[NewEffect],
        detail: Value,
    ) -> Result<Moved>;

    /// A challenge by the SHA-256 of its link's token.
    ///
    /// # Errors
    /// On database failure.
    async fn challenge_by_token(&self, token_hash: &str) -> Result<Option<Challenge>>;

    /// A challenge by id.
    ///
    /// # Errors
    /// On database failure.
    async fn challenge(&self, id: &str) -> Result<Option<Challenge>>;

    /// Challenges, newest first, optionally in one state.
    ///
    /// # Errors
    /// On database failure.
    async fn challenges(&self, state: Option<ChallengeState>, limit: i64)
        -> Result<Vec<Challenge>>;

    /// Consumes a pending, unexpired challenge, moves its run
    /// (`awaiting_human → approved` or `→ failed_terminal`) and inserts
    /// `effects`, in one transaction. `None` when the challenge was no
    /// longer pending or had expired: nothing was written.
    ///
    /// # Errors
    /// On database failure; nothing is written.
    async fn decide(&self, decided: &Decided) -> Result<Option<Run>>;

    /// Pending challenges past their expiry.
    ///
    /// # Errors
    /// On database failure.
    async fn due_challenges(&self, limit: i64) -> Result<Vec<Challenge>>;

    /// Expires a due challenge: its run `awaiting_human → dead_lettered`
    /// with a dead letter of class `approval_expired`, and the callback.
    /// `false` when it was decided meanwhile.
    ///
    /// # Errors
    /// On database failure.
    async fn expire_challenge(&self, id: &str, callback: Option<&NewEffect>) -> Result<bool>;

    /// Replaces a due challenge by its escalation; the run keeps waiting.
    /// `false` when it was decided meanwhile.
    ///
    /// # Errors
    /// On database failure.
    async fn escalate_challenge(&self, id: &str, next: &NewChallenge) -> Result<bool>;

    /// The server secret stored as `name`, storing `candidate` first when
    /// there is none (the first start); every instance reads the same one.
    ///
    /// # Errors
    /// On database failure.
    async fn server_secret(&self, name: &str, candidate: &str) -> Result<String>;
}

/// Storage calls of browser sessions and stored API tokens.
#[async_trait]
pub trait SessionStore: Send + Sync + std::fmt::Debug {
    /// Stores a browser session (a session already stored under its id
    /// stays as it is: single sign-on derives the same one again).
    ///
    /// # Errors
    /// On database failure.
    async fn insert_session(&self, session: &StoredSession) -> Result<()>;

    /// An unexpired session by the digest of its cookie.
    ///
    /// # Errors
    /// On database failure.
    async fn session(&self, id_hash: &str) -> Result<Option<StoredSession>>;

    /// Ends a session.
    ///
    /// # Errors
    /// On database failure.
    async fn delete_session(&self, id_hash: &str) -> Result<()>;

    /// Deletes expired sessions; returns how many.
    ///
    /// # Errors
    /// On database failure.
    async fn purge_sessions(&self) -> Result<u64>;
}
