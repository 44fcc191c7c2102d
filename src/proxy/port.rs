//! The proxy's storage port: the answers it keeps beside its runs, and
//! the one move of its own (a forward whose outcome is unknown). Its
//! claims and its other moves are the ledger's.

use async_trait::async_trait;
use serde_json::Value;

use super::Answer;
use crate::clock::Millis;
use crate::ledger::storage::Result;
use crate::ledger::{IdempotencyKey, Moved, Namespace, OwnerCall, PayloadHash};

/// Storage calls of the proxy.
#[async_trait]
pub trait ProxyStore: Send + Sync + std::fmt::Debug {
    /// Completes the caller's run (its result: the answer's summary) and
    /// keeps `answer` beside it for `window_ms`, in one transaction.
    ///
    /// # Errors
    /// [`StoreError::LostOwnership`](crate::ledger::storage::StoreError::LostOwnership)
    /// when the lease no longer owns the run (nothing is written).
    async fn complete_with_answer(
        &self,
        call: &OwnerCall,
        answer: &Answer,
        window_ms: Millis,
    ) -> Result<Moved>;

    /// A replay in one read: the answer kept beside the run of a key that
    /// completed with `payload_hash`, while its window lasts. `None` for
    /// anything else (no run, another payload, not completed, no answer
    /// kept): the claim decides, as for a new key.
    ///
    /// # Errors
    /// On database failure.
    async fn replay(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
        payload_hash: &PayloadHash,
    ) -> Result<Option<Answer>>;

    /// The answer kept for a completed key, while its window lasts.
    ///
    /// # Errors
    /// On database failure.
    async fn stored_answer(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
    ) -> Result<Option<Answer>>;

    /// `processing → dead_lettered` by the lease owner: the request was
    /// sent and its outcome is unknown. Writes the audit entry and an
    /// `unknown_outcome` dead letter holding `evidence` in the same
    /// transaction.
    ///
    /// # Errors
    /// [`StoreError::LostOwnership`](crate::ledger::storage::StoreError::LostOwnership)
    /// when the lease no longer owns the run.
    async fn outcome_unknown(
        &self,
        call: &OwnerCall,
        reason: &str,
        evidence: &Value,
    ) -> Result<Moved>;

    /// Deletes up to `limit` answers whose window has passed; how many went.
    ///
    /// # Errors
    /// On database failure.
    async fn purge_answers(&self, limit: i64) -> Result<u64>;

    /// The id of the newest open dead letter of a run (an unknown key's).
    ///
    /// # Errors
    /// On database failure.
    async fn open_dead_letter(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
    ) -> Result<Option<String>>;
}
