//! What every storage port shares: the error and result of a storage call.
//!
//! Each part declares the storage it needs as a small trait of its own
//! (`ledger::port::LedgerStore`, `outbox::port::OutboxStore`, …); the
//! backends in [`crate::db`] implement them. The error lives here, in the
//! ledger every part builds on, so that no part imports the backends and
//! the backends can name every part's types.

use super::Run;

/// Errors of the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused or failed a statement.
    #[error("database error")]
    Database(#[from] sqlx::Error),
    /// SQLite's writer (its own connection, through SQLite's C API)
    /// refused or failed a statement.
    #[error("database error")]
    Sqlite(#[from] rusqlite::Error),
    /// The group commit that carried this write failed: nothing in its
    /// batch was stored.
    #[error("the group commit failed; nothing in its batch was stored")]
    BatchFailed(#[source] std::sync::Arc<rusqlite::Error>),
    /// SQLite's writer has stopped (the store is closing).
    #[error("the SQLite writer has stopped")]
    WriterClosed,
    /// A write transaction panicked on SQLite's writer; it was rolled back
    /// alone.
    #[error("a write transaction panicked and was rolled back")]
    WritePanicked,
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
    /// The backend cannot do this (e.g. an online backup of PostgreSQL).
    #[error("{0}")]
    Unsupported(String),
    /// A backup could not be written or checked.
    #[error("backup failed: {0}")]
    Backup(String),
    /// The database answers but takes no writes (a standby, a read-only
    /// default): found by the readiness check.
    #[error("the database takes no writes (read-only or a standby)")]
    ReadOnly,
    /// The Redis tier's store did not answer in time, refused the
    /// connection, or is loading: nothing was acknowledged.
    #[error("the Redis claim store is unavailable: {0}")]
    Unavailable(String),
    /// The database URL names no supported backend.
    #[error("unsupported database URL {0:?}: use sqlite://PATH or postgres://…")]
    UnsupportedUrl(String),
}

/// `Result` of the storage layer.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl StoreError {
    /// A stored value that does not read back.
    pub fn corrupt(what: impl std::fmt::Display) -> Self {
        Self::Corrupt(what.to_string())
    }
}

impl StoreError {
    /// Whether the database refused the statement for a unique constraint.
    pub fn is_unique_violation(&self) -> bool {
        match self {
            Self::Database(sqlx::Error::Database(db)) => db.is_unique_violation(),
            // SQLITE_CONSTRAINT_UNIQUE and _PRIMARYKEY, as sqlx reads them.
            Self::Sqlite(err) => err
                .sqlite_error()
                .is_some_and(|e| matches!(e.extended_code, 2067 | 1555)),
            _ => false,
        }
    }
}
