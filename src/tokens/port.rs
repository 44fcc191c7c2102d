//! The storage of the tokens the service makes itself (only digests): the
//! first-start admin token and the tokens made at run time.

use async_trait::async_trait;

use super::namespaces::NamespacePattern;
use crate::clock::Millis;
use crate::ledger::storage::Result;

/// An API token as stored: only its digest, never the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredToken {
    /// The public handle (the first 16 hex digits of the digest).
    pub id: String,
    /// `sha256:<hex>` of the token.
    pub digest: String,
    /// Who the token speaks for (the actor in the audit log).
    pub subject: String,
    /// Scope names (`workflow`, `operator`, `approver`, `proxy`, `admin`).
    pub scopes: Vec<String>,
    /// Role names, for approval policies.
    pub roles: Vec<String>,
    /// The namespaces it reaches; `None`, every namespace.
    pub namespaces: Option<Vec<NamespacePattern>>,
    /// The subject that made it; `None` for the first-start token.
    pub created_by: Option<String>,
    /// When it was stored.
    pub created_at: Millis,
    /// When it stops working; `None`, never.
    pub expires_at: Option<Millis>,
    /// When it was revoked; `None`, not yet.
    pub revoked_at: Option<Millis>,
}

/// Storage calls of stored API tokens.
#[async_trait]
pub trait TokenStore: Send + Sync + std::fmt::Debug {
    /// Every stored token, revoked and expired ones too, oldest first.
    ///
    /// # Errors
    /// On database failure.
    async fn stored_tokens(&self) -> Result<Vec<StoredToken>>;

    /// The stored token with this digest, whatever its state.
    ///
    /// # Errors
    /// On database failure.
    async fn token_by_digest(&self, digest: &str) -> Result<Option<StoredToken>>;

    /// Stores the first-start token's digest, at its `created_at` (no
    /// audit: nobody made it); a digest already stored is left alone.
    ///
    /// # Errors
    /// On database failure.
    async fn insert_token(&self, token: &StoredToken) -> Result<()>;

    /// Stores a token made at run time and appends `token_created` to the
    /// audit chain `oncegate / tokens:<id>` under `actor`, in one
    /// transaction. `created_at` is the store's clock.
    ///
    /// # Errors
    /// On database failure (a digest or id already stored included).
    async fn create_token(&self, token: &StoredToken, actor: &str) -> Result<()>;

    /// Revokes the unrevoked token `id` and appends `token_revoked` under
    /// `actor`, in one transaction; `None` when no unrevoked token has
    /// that id (nothing changes).
    ///
    /// # Errors
    /// On database failure.
    async fn revoke_token(&self, id: &str, actor: &str) -> Result<Option<StoredToken>>;

    /// Deletes the first-start token (once `[[tokens]]` is configured);
    /// returns how many rows went. Tokens made at run time stay.
    ///
    /// # Errors
    /// On database failure.
    async fn delete_stored_tokens(&self) -> Result<u64>;
}
