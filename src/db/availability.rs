//! Which store failures mean "the database cannot take this now".
//!
//! A database that is unreachable, restarting, read-only, full or locked
//! refuses a request for reasons that have nothing to do with the request:
//! the caller should come back later (a 503 with `Retry-After`), and a
//! webhook provider will redeliver. Anything else (a constraint, a corrupt
//! row, a bug) stays a 500.

use sqlx::error::DatabaseError;

use super::StoreError;

/// SQLite primary result codes that mean the database is unavailable.
const SQLITE_BUSY: i64 = 5;
const SQLITE_LOCKED: i64 = 6;
const SQLITE_READONLY: i64 = 8;
const SQLITE_IOERR: i64 = 10;
const SQLITE_FULL: i64 = 13;
const SQLITE_CANTOPEN: i64 = 14;

impl StoreError {
    /// Whether the database refused or could not serve the statement for a
    /// reason outside the request (unreachable, shutting down, read-only,
    /// out of space, locked): retrying later may succeed, and nothing was
    /// stored.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Database(err) => sqlx_unavailable(err),
            Self::Sqlite(err) => err
                .sqlite_error()
                .is_some_and(|e| sqlite_unavailable(i64::from(e.extended_code & 0xff))),
            // A commit that failed (the disk, the lock) or a writer that
            // stopped: nothing was stored, and later may succeed.
            Self::BatchFailed(_) | Self::WriterClosed | Self::ReadOnly | Self::Unavailable(_) => {
                true
            }
            _ => false,
        }
    }
}

fn sqlx_unavailable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed => true,
        sqlx::Error::Database(db) => database_unavailable(db.as_ref()),
        _ => false,
    }
}

fn database_unavailable(db: &dyn DatabaseError) -> bool {
    let Some(code) = db.code() else { return false };
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        // sqlx reports SQLite's extended code; the low byte is the primary one.
        return code
            .parse::<i64>()
            .is_ok_and(|c| sqlite_unavailable(c & 0xff));
    }
    if db
        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .is_some()
    {
        return postgres_unavailable(&code);
    }
    false
}

fn sqlite_unavailable(primary: i64) -> bool {
    matches!(
        primary,
        SQLITE_BUSY
            | SQLITE_LOCKED
            | SQLITE_READONLY
            | SQLITE_IOERR
            | SQLITE_FULL
            | SQLITE_CANTOPEN
    )
}

/// PostgreSQL SQLSTATEs: read-only transaction, connection exceptions
/// (class 08), insufficient resources (class 53: disk full, out of memory,
/// too many connections), and the server shutting down or starting up.
fn postgres_unavailable(sqlstate: &str) -> bool {
    sqlstate == "25006"
        || sqlstate.starts_with("08")
        || sqlstate.starts_with("53")
        || matches!(sqlstate, "57P01" | "57P02" | "57P03")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_refusals_are_unavailable_and_constraints_are_not() {
        assert!(sqlite_unavailable(SQLITE_READONLY));
        assert!(sqlite_unavailable(SQLITE_FULL));
        assert!(sqlite_unavailable(SQLITE_BUSY));
        // SQLITE_READONLY_DBMOVED (1032) and SQLITE_IOERR_FSYNC (1034) by their primary code.
        assert!(sqlite_unavailable(1032 & 0xff));
        assert!(sqlite_unavailable(1034 & 0xff));
        // SQLITE_CONSTRAINT_UNIQUE (2067) is the caller's problem.
        assert!(!sqlite_unavailable(2067 & 0xff));
        assert!(!sqlite_unavailable(1));
    }

    #[test]
    fn postgres_refusals_are_unavailable_and_constraints_are_not() {
        for code in [
            "25006", "08006", "08001", "53100", "53300", "57P01", "57P03",
        ] {
            assert!(postgres_unavailable(code), "{code}");
        }
        for code in ["23505", "40001", "42P01", "22001"] {
            assert!(!postgres_unavailable(code), "{code}");
        }
    }

    #[test]
    fn pool_and_io_failures_are_unavailable() {
        assert!(StoreError::Database(sqlx::Error::PoolTimedOut).is_unavailable());
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(StoreError::Database(sqlx::Error::Io(io)).is_unavailable());
        assert!(!StoreError::Database(sqlx::Error::RowNotFound).is_unavailable());
        // A panicked worker is a bug, not an outage: it stays a 500.
        assert!(!StoreError::Database(sqlx::Error::WorkerCrashed).is_unavailable());
        assert!(!StoreError::Corrupt("x".into()).is_unavailable());
    }

    #[test]
    fn the_writers_refusals_are_unavailable_and_constraints_are_not() {
        let failure = |code: i32| {
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(code),
                None,
            ))
        };
        // SQLITE_READONLY, SQLITE_FULL, SQLITE_BUSY, SQLITE_IOERR_FSYNC.
        for code in [8, 13, 5, 1034] {
            assert!(failure(code).is_unavailable(), "{code}");
        }
        // SQLITE_CONSTRAINT_UNIQUE is the caller's problem.
        assert!(!failure(2067).is_unavailable());
        assert!(failure(2067).is_unique_violation());
        assert!(StoreError::WriterClosed.is_unavailable());
        assert!(!StoreError::WritePanicked.is_unavailable());
    }
}
