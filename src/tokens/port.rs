//! The storage of the tokens the service creates itself (only digests).

use async_trait::async_trait;

use crate::ledger::storage::Result;

/// An API token as stored: only its digest, never the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredToken {
    /// `sha256:<hex>` of the token.
    pub digest: String,
    /// Who the token speaks for (the actor in the audit log).
    pub subject: String,
    /// Scope names (`workflow`, `operator`, `approver`, `admin`).
    pub scopes: Vec<String>,
    /// Role names, for approval policies.
    pub roles: Vec<String>,
}

/// Storage calls of stored API tokens.
#[async_trait]
pub trait TokenStore: Send + Sync + std::fmt::Debug {
    /// API tokens created by the service itself (the first-start admin token).
    ///
    /// # Errors
    /// On database failure.
    async fn stored_tokens(&self) -> Result<Vec<StoredToken>>;

    /// Stores a token digest.
    ///
    /// # Errors
    /// On database failure.
    async fn insert_token(&self, token: &StoredToken) -> Result<()>;

    /// Deletes every stored token; returns how many there were.
    ///
    /// # Errors
    /// On database failure.
    async fn delete_stored_tokens(&self) -> Result<u64>;
}
