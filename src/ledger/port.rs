//! The ledger's storage port: what the ledger needs from a database.
//!
//! The claim is one atomic statement per backend, every move a guarded
//! compare-and-set, and each writes its audit entry in the same
//! transaction (DESIGN.md §2). One conformance suite
//! (`tests/it/conformance.rs`) proves every backend behaves the same.

use async_trait::async_trait;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};

use super::{
    ClaimOutcome, ClaimRequest, IdempotencyKey, Moved, Namespace, OwnerCall, OwnerMove, Run,
    RunState,
};
use crate::clock::Millis;
use crate::ledger::storage::Result;

/// Storage calls of the ledger.
#[async_trait]
pub trait LedgerStore: Send + Sync + std::fmt::Debug {
    /// Claims `(namespace, key)` in one atomic statement (DESIGN.md §2).
    ///
    /// # Errors
    /// [`StoreError::Database`](crate::ledger::storage::StoreError::Database) on
    /// database failure; every business answer (duplicate, in flight,
    /// conflict, `duplicate_of`) is an `Ok`.
    async fn claim(&self, req: &ClaimRequest) -> Result<ClaimOutcome>;

    /// Extends the caller's lease by `lease_ms`, never past
    /// `max_life_ms` after the lease was first taken.
    ///
    /// # Errors
    /// [`StoreError::LostOwnership`](crate::ledger::storage::StoreError::LostOwnership)
    /// when the lease is not live and current.
    async fn renew(&self, call: &OwnerCall, lease_ms: i64, max_life_ms: i64) -> Result<Moved>;

    /// Moves the caller's run out of `processing`.
    ///
    /// # Errors
    /// [`StoreError::LostOwnership`](crate::ledger::storage::StoreError::LostOwnership)
    /// when the lease is not live and current.
    async fn finish(&self, call: &OwnerCall, mv: &OwnerMove) -> Result<Moved>;

    /// Reads one run.
    ///
    /// # Errors
    /// On database failure.
    async fn get_run(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Option<Run>>;

    /// One page of runs matching `search`, in [`RunSearch::order`].
    ///
    /// # Errors
    /// On database failure.
    async fn search_runs(&self, search: &RunSearch) -> Result<Vec<Run>>;
}

/// What the recovery sweeper looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryKind {
    /// `processing` runs whose lease expired `stranded_after` ago.
    Stranded,
    /// `failed_retryable` runs past their reclaim budget.
    BudgetExhausted,
}

/// Which runs one recovery query may pick: one namespace with its own
/// rules, or every other namespace with the `[ledger]` rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoverySelection {
    /// Only this namespace…
    pub only: Option<String>,
    /// …or every namespace but these.
    pub exclude: Vec<String>,
    /// The rules that apply to the selected runs.
    pub rules: super::Recovery,
    /// At most this many runs.
    pub limit: i64,
}

/// Storage calls of the recovery sweeper (DESIGN.md §2, "Nothing is
/// stranded"). Each move repeats its rule in its guard and writes its
/// audit entry and dead letter in the same transaction.
#[async_trait]
pub trait RecoveryStore: Send + Sync + std::fmt::Debug {
    /// The runs `kind` may move under `sel` now, oldest first.
    ///
    /// # Errors
    /// On database failure.
    async fn recovery_candidates(
        &self,
        sel: &RecoverySelection,
        kind: RecoveryKind,
    ) -> Result<Vec<Run>>;

    /// Dead-letters `run` as `stranded` by compare-and-set on the version
    /// read; `None` when it moved meanwhile (a reclaim or its owner won).
    ///
    /// # Errors
    /// On database failure.
    async fn strand(&self, run: &Run) -> Result<Option<Run>>;

    /// Dead-letters `run` as `reclaim_budget_exhausted` by compare-and-set
    /// on the version read; `None` when it moved meanwhile.
    ///
    /// # Errors
    /// On database failure.
    async fn exhaust(&self, run: &Run) -> Result<Option<Run>>;
}

/// A run search. Empty fields do not filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunSearch {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only keys starting with this text (a whole key finds itself).
    pub key_prefix: Option<String>,
    /// Only runs now in this state.
    pub state: Option<RunState>,
    /// Only runs holding this execution ref (e.g. an n8n execution id).
    pub execution_ref: Option<String>,
    /// The last run of the previous page.
    pub after: Option<RunCursor>,
    /// Page size.
    pub limit: i64,
}

/// How a search's results are ordered, chosen by its filters so that the
/// order is the order of the index the search walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchOrder {
    /// By (namespace, key): the primary key, or the execution-ref index.
    Identity,
    /// By (key, namespace): the `runs_key` index, for a key search.
    Key,
    /// Most recently changed first: the `(state, updated_at)` index, for a
    /// search by state alone.
    Recent,
}

impl RunSearch {
    /// The order (and so the index) this search uses.
    pub fn order(&self) -> SearchOrder {
        if self.execution_ref.is_some() {
            SearchOrder::Identity
        } else if self.key_prefix.is_some() {
            SearchOrder::Key
        } else if self.namespace.is_none() && self.state.is_some() {
            SearchOrder::Recent
        } else {
            SearchOrder::Identity
        }
    }
}

/// Where a page of runs ended: the last run's sort fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCursor {
    /// The run's `updated_at`.
    #[serde(rename = "u")]
    pub updated_at: Millis,
    /// Its namespace.
    #[serde(rename = "n")]
    pub namespace: String,
    /// Its key.
    #[serde(rename = "k")]
    pub key: String,
}

impl RunCursor {
    /// The cursor after `run`.
    pub fn after(run: &Run) -> Self {
        Self {
            updated_at: run.updated_at,
            namespace: run.namespace.to_string(),
            key: run.key.to_string(),
        }
    }

    /// An opaque, URL-safe text.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).unwrap_or_default())
    }

    /// Reads [`RunCursor::encode`]'s text back.
    ///
    /// # Errors
    /// A message when the text is not a cursor.
    pub fn decode(text: &str) -> std::result::Result<Self, String> {
        let bytes = URL_SAFE_NO_PAD
            .decode(text)
            .map_err(|_| "not a page cursor".to_owned())?;
        serde_json::from_slice(&bytes).map_err(|_| "not a page cursor".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_round_trips_and_rejects_junk() {
        let c = RunCursor {
            updated_at: 42,
            namespace: "crm".into(),
            key: "a/b?c#d".into(),
        };
        let text = c.encode();
        assert!(text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(RunCursor::decode(&text).unwrap(), c);
        assert!(RunCursor::decode("??").is_err());
        assert!(RunCursor::decode(&URL_SAFE_NO_PAD.encode(b"{}")).is_err());
    }

    #[test]
    fn the_filters_choose_the_index() {
        let mut s = RunSearch::default();
        assert_eq!(s.order(), SearchOrder::Identity);
        s.state = Some(RunState::DeadLettered);
        assert_eq!(s.order(), SearchOrder::Recent);
        s.namespace = Some("crm".into());
        assert_eq!(s.order(), SearchOrder::Identity);
        s.key_prefix = Some("ord".into());
        assert_eq!(s.order(), SearchOrder::Key);
        s.execution_ref = Some("e-1".into());
        assert_eq!(s.order(), SearchOrder::Identity);
    }
}
