//! Storage: one [`Store`] trait, two first-class backends.
//!
//! - [`sqlite::SqliteStore`]: the embedded default for one node. WAL mode and
//!   `synchronous=FULL` on every connection, so an acknowledged write
//!   survives a crash or a power loss; writes go through one connection,
//!   group-committed ([`group_commit`]): one durable transaction for every
//!   write that arrived while the previous one was syncing.
//! - [`postgres::PgStore`]: many oncegate processes against one database;
//!   lease times are compared with the database's clock.
//!
//! Both run the same SQL (see [`sql`]): the claim is one
//! `INSERT … ON CONFLICT … DO UPDATE … WHERE <reclaimable> RETURNING`, every
//! move a guarded `UPDATE … WHERE state IN (…) AND lease_owner = … AND
//! version = … AND lease_expires_at > now RETURNING`, and each writes its
//! audit entry in the same transaction. One conformance suite
//! (`tests/it/conformance.rs`) proves the backends behave the same.

use std::sync::Arc;

use async_trait::async_trait;

use crate::audit::AuditRecord;
use crate::clock::SharedClock;
use crate::ingress::RawEvent;
use crate::ledger::{
    ClaimOutcome, ClaimRequest, IdempotencyKey, Moved, Namespace, OwnerCall, OwnerMove, Run,
};
use crate::outbox::{ActionSwitch, AttemptView, Decision, Effect, Leased, NewEffect};
use serde_json::Value;

pub mod group_commit;
mod outbox_ops;
pub mod outbox_sql;
mod pg_claim;
pub mod postgres;
mod row;
pub mod sql;
pub mod sqlite;

/// Errors of the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused or failed a statement.
    #[error("database error")]
    Database(#[from] sqlx::Error),
    /// A migration could not be applied.
    #[error("database migration failed")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The caller's lease is not the run's current live lease.
    #[error("the lease is no longer the run's owner")]
    LostOwnership {
        /// The run as it is now, if it exists.
        current: Option<Box<Run>>,
        /// Why ownership is gone, in words for the caller.
        why: String,
    },
    /// A stored row could not be read back as a domain value.
    #[error("stored row is corrupt: {0}")]
    Corrupt(String),
    /// The database URL names no supported backend.
    #[error("unsupported database URL {0:?}: use sqlite://PATH or postgres://…")]
    UnsupportedUrl(String),
}

/// `Result` of the storage layer.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

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

/// Everything the service keeps. Both backends implement every call with
/// the same observable behaviour.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// `"sqlite"` or `"postgres"`.
    fn backend(&self) -> &'static str;

    /// Applies pending migrations.
    ///
    /// # Errors
    /// [`StoreError::Migrate`] when a migration fails or the database holds
    /// migrations this binary does not know.
    async fn migrate(&self) -> Result<()>;

    /// Checks that the database answers.
    ///
    /// # Errors
    /// [`StoreError::Database`] when it does not.
    async fn ping(&self) -> Result<()>;

    /// Claims `(namespace, key)` in one atomic statement (DESIGN.md §2).
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure; every business answer
    /// (duplicate, in flight, conflict, `duplicate_of`) is an `Ok`.
    async fn claim(&self, req: &ClaimRequest) -> Result<ClaimOutcome>;

    /// Extends the caller's lease by `lease_ms`, never past
    /// `max_life_ms` after the lease was first taken.
    ///
    /// # Errors
    /// [`StoreError::LostOwnership`] when the lease is not live and current.
    async fn renew(&self, call: &OwnerCall, lease_ms: i64, max_life_ms: i64) -> Result<Moved>;

    /// Moves the caller's run out of `processing`.
    ///
    /// # Errors
    /// [`StoreError::LostOwnership`] when the lease is not live and current.
    async fn finish(&self, call: &OwnerCall, mv: &OwnerMove) -> Result<Moved>;

    /// Accepts a webhook delivery: claims its ingress run and, in the same
    /// transaction, moves it to `approved`, stores the raw event and
    /// inserts the forward effect. A claim that does not win changes
    /// nothing and returns its answer as [`Store::claim`] would.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn accept_event(
        &self,
        req: &ClaimRequest,
        event: &RawEvent,
        forward: &NewEffect,
    ) -> Result<ClaimOutcome>;

    /// Stores a delivery whose body conflicts with the run's payload as
    /// evidence (never forwarded) and records a `payload_conflict` dead letter.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn quarantine_event(&self, event: &RawEvent, run: &Run) -> Result<()>;

    /// The owner's decision: queues `effects` and moves the run to
    /// `approved` (or `completed` when there are none) with its result, by
    /// compare-and-set, in one transaction. An effect already queued for
    /// the same (run, effect type, target) is not queued twice.
    ///
    /// # Errors
    /// [`StoreError::LostOwnership`] when the lease is not live and current.
    async fn commit(
        &self,
        call: &OwnerCall,
        result: Option<&Value>,
        effects: &[NewEffect],
    ) -> Result<Moved>;

    /// Leases up to `limit` due effects of approved runs on enabled targets.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn lease_effects(&self, owner: &str, lease_ms: i64, limit: i64) -> Result<Vec<Leased>>;

    /// Records decisions in one transaction (one durable commit for a
    /// batch): each effect's verdict by compare-and-set on its lease, its
    /// attempt evidence and its run's resulting move. `false` marks a
    /// decision whose lease was lost (nothing written for it).
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure; nothing is written.
    async fn record_decisions(&self, decisions: &[Decision]) -> Result<Vec<bool>>;

    /// Marks `sending` effects whose lease expired as `unknown` (never back
    /// to `pending`: the dead dispatcher may have sent them).
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn expire_sending(&self) -> Result<u64>;

    /// Cancels a pending effect; `None` when it is not pending.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn cancel_effect(&self, id: &str, actor: &str) -> Result<Option<Effect>>;

    /// One effect by id.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn effect(&self, id: &str) -> Result<Option<Effect>>;

    /// An effect's attempts, in order.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn attempts(&self, effect_id: &str) -> Result<Vec<AttemptView>>;

    /// Sets the kill switch for `scope` (`*` or a target), audited with the actor.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn set_actions(&self, scope: &str, enabled: bool, actor: &str) -> Result<()>;

    /// Every kill-switch scope that was ever set.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn action_switches(&self) -> Result<Vec<ActionSwitch>>;

    /// Outstanding effects by target and state.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn backlog(&self) -> Result<Vec<(String, String, i64)>>;

    /// A run's effects, oldest first.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn effects_of(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Vec<Effect>>;

    /// Reads one run.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn get_run(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Option<Run>>;

    /// The audit trail of one run, in chain order.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn audit_trail(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
    ) -> Result<Vec<AuditRecord>>;

    /// API tokens created by the service itself (the first-start admin token).
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn stored_tokens(&self) -> Result<Vec<StoredToken>>;

    /// Stores a token digest.
    ///
    /// # Errors
    /// [`StoreError::Database`] on database failure.
    async fn insert_token(&self, token: &StoredToken) -> Result<()>;

    /// Closes the pools, waiting for checked-out connections.
    async fn close(&self);
}

/// A shared store handle.
pub type SharedStore = Arc<dyn Store>;

/// Options shared by both backends.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Most connections in a pool.
    pub max_connections: u32,
    /// How long SQLite waits on a locked database, in milliseconds.
    pub busy_timeout_ms: u64,
    /// The clock for SQLite, and for PostgreSQL when `use_db_clock` is off.
    pub clock: SharedClock,
    /// PostgreSQL: compare lease times with the database's `now()` (the
    /// production setting). Off only in tests that move time by hand.
    pub use_db_clock: bool,
}

/// Opens (creating if needed) the store a URL names, with the default
/// SQLite group commit.
///
/// # Errors
/// [`StoreError::UnsupportedUrl`] for an unknown scheme, or the backend's
/// connection error.
pub async fn connect(url: &str, options: StoreOptions) -> Result<SharedStore> {
    connect_with(url, options, group_commit::GroupCommitOptions::default()).await
}

/// Opens the store a URL names; `group` sets SQLite's group-commit
/// batching (PostgreSQL batches concurrent commits itself and ignores it).
///
/// # Errors
/// As [`connect`].
pub async fn connect_with(
    url: &str,
    options: StoreOptions,
    group: group_commit::GroupCommitOptions,
) -> Result<SharedStore> {
    if url.starts_with("sqlite:") {
        Ok(Arc::new(
            sqlite::SqliteStore::connect_with(url, options, group).await?,
        ))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(postgres::PgStore::connect(url, options).await?))
    } else {
        Err(StoreError::UnsupportedUrl(url.to_owned()))
    }
}

/// Redacts the password of a database URL for logs and errors.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn redacts_passwords_only() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("sqlite://oncegate.db"), "sqlite://oncegate.db");
    }
}
