//! `config check --connect`: try the configured database once, briefly,
//! and name why it cannot be used: nothing listens (refused), the
//! credentials are wrong, the database does not exist, it cannot take
//! writes (a standby, a read-only file or disk), or it did not answer in
//! time. A pool that "timed out" after ten seconds says none of that.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{ConnectOptions, Connection};

/// How long one attempt may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the probe found when the database answered and takes writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reachable {
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// The server's version, or the file's state (`exists`, `will be created`).
    pub detail: String,
}

/// Why the database cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeFailure {
    /// Nothing listens at the address.
    #[error("connection refused by {address}: is PostgreSQL running and listening there?")]
    Refused {
        /// `host:port`.
        address: String,
    },
    /// The server refused the user or password.
    #[error("authentication failed for user {user:?}: {message}")]
    Auth {
        /// The user in the URL.
        user: String,
        /// The server's words.
        message: String,
    },
    /// The database named in the URL does not exist.
    #[error("database {name:?} does not exist on the server (create it, or fix database.url)")]
    UnknownDatabase {
        /// Its name.
        name: String,
    },
    /// The database answers but takes no writes.
    #[error("read-only: {why}")]
    ReadOnly {
        /// What makes it so.
        why: String,
    },
    /// No answer within [`PROBE_TIMEOUT`].
    #[error("no answer from {address} within {} s (host down, or a firewall dropping packets)", PROBE_TIMEOUT.as_secs())]
    Timeout {
        /// `host:port`.
        address: String,
    },
    /// Anything else, in the driver's words.
    #[error("{0}")]
    Other(String),
}

/// Tries the database `url` names, without creating or changing anything.
///
/// # Errors
/// [`ProbeFailure`] naming the cause.
pub async fn probe(url: &str) -> Result<Reachable, ProbeFailure> {
    if url.starts_with("sqlite:") {
        probe_sqlite(url).await
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        probe_postgres(url).await
    } else {
        Err(ProbeFailure::Other(format!(
            "unsupported database URL scheme (sqlite:// or postgres://): {}",
            crate::config::redact_url(url)
        )))
    }
}

async fn probe_postgres(url: &str) -> Result<Reachable, ProbeFailure> {
    let options = PgConnectOptions::from_str(url)
        .map_err(|e| ProbeFailure::Other(e.to_string()))?
        .application_name("oncegate config check");
    let address = format!("{}:{}", options.get_host(), options.get_port());
    let user = options.get_username().to_owned();
    let name = options
        .get_database()
        .unwrap_or(options.get_username())
        .to_owned();
    let mut conn = tokio::time::timeout(PROBE_TIMEOUT, options.connect())
        .await
        .map_err(|_| ProbeFailure::Timeout {
            address: address.clone(),
        })?
        .map_err(|e| pg_failure(&e, &address, &user, &name))?;
    let version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&mut conn)
        .await
        .map_err(|e| ProbeFailure::Other(e.to_string()))?;
    let (standby, read_only): (bool, String) =
        sqlx::query_as("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')")
            .fetch_one(&mut conn)
            .await
            .map_err(|e| ProbeFailure::Other(e.to_string()))?;
    let _ = conn.close().await;
    if standby {
        return Err(ProbeFailure::ReadOnly {
            why: format!("{address} is a standby (in recovery); point database.url at the primary"),
        });
    }
    if read_only == "on" {
        return Err(ProbeFailure::ReadOnly {
            why: format!(
                "sessions on {address} are read-only (default_transaction_read_only is on)"
            ),
        });
    }
    Ok(Reachable {
        backend: "postgres",
        detail: format!("PostgreSQL {version} at {address}, database {name:?}, takes writes"),
    })
}

fn pg_failure(err: &sqlx::Error, address: &str, user: &str, name: &str) -> ProbeFailure {
    match err {
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            ProbeFailure::Refused {
                address: address.to_owned(),
            }
        }
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => ProbeFailure::Timeout {
            address: address.to_owned(),
        },
        sqlx::Error::Database(db) => match db.code().as_deref() {
            // invalid_password, invalid_authorization_specification
            Some("28P01" | "28000") => ProbeFailure::Auth {
                user: user.to_owned(),
                message: db.message().to_owned(),
            },
            // invalid_catalog_name
            Some("3D000") => ProbeFailure::UnknownDatabase {
                name: name.to_owned(),
            },
            _ => ProbeFailure::Other(db.to_string()),
        },
        other => ProbeFailure::Other(other.to_string()),
    }
}

async fn probe_sqlite(url: &str) -> Result<Reachable, ProbeFailure> {
    let options =
        SqliteConnectOptions::from_str(url).map_err(|e| ProbeFailure::Other(e.to_string()))?;
    let path = options.get_filename().to_owned();
    if !path.exists() {
        // serve creates it: the directory must exist and take a new file.
        let dir = parent_dir(&path);
        return match writable_dir(&dir) {
            Ok(()) => Ok(Reachable {
                backend: "sqlite",
                detail: format!("{} will be created by serve or migrate", path.display()),
            }),
            Err(why) => Err(ProbeFailure::ReadOnly { why }),
        };
    }
    let meta = std::fs::metadata(&path).map_err(|e| ProbeFailure::Other(e.to_string()))?;
    if meta.permissions().readonly() {
        return Err(ProbeFailure::ReadOnly {
            why: format!("{} is not writable (its mode)", path.display()),
        });
    }
    // WAL mode writes `-wal` and `-shm` beside the file.
    writable_dir(&parent_dir(&path)).map_err(|why| ProbeFailure::ReadOnly { why })?;
    let mut conn: SqliteConnection = tokio::time::timeout(
        PROBE_TIMEOUT,
        options.create_if_missing(false).read_only(false).connect(),
    )
    .await
    .map_err(|_| ProbeFailure::Timeout {
        address: path.display().to_string(),
    })?
    .map_err(|e| sqlite_failure(&e, &path))?;
    // A write lock taken and given back: a read-only mount or file says so
    // here, and a database another process holds locked does not hang.
    let tried = sqlx::query("BEGIN IMMEDIATE").execute(&mut conn).await;
    let result = match tried {
        Ok(_) => {
            let _ = sqlx::query("ROLLBACK").execute(&mut conn).await;
            Ok(Reachable {
                backend: "sqlite",
                detail: format!("{} opens and takes writes", path.display()),
            })
        }
        Err(e) => Err(sqlite_failure(&e, &path)),
    };
    let _ = conn.close().await;
    result
}

fn sqlite_failure(err: &sqlx::Error, path: &Path) -> ProbeFailure {
    let code = match err {
        sqlx::Error::Database(db) => db.code().and_then(|c| c.parse::<i64>().ok()),
        _ => None,
    };
    match code.map(|c| c & 0xff) {
        // SQLITE_READONLY
        Some(8) => ProbeFailure::ReadOnly {
            why: format!("{} (or its file system) takes no writes", path.display()),
        },
        _ => ProbeFailure::Other(format!("{}: {err}", path.display())),
    }
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Whether a new file can be made in `dir` (tried, then removed): the
/// mode bits alone do not tell a read-only mount or root's exemption.
fn writable_dir(dir: &Path) -> Result<(), String> {
    if !dir.is_dir() {
        return Err(format!("the directory {} does not exist", dir.display()));
    }
    match tempfile::Builder::new()
        .prefix(".oncegate-check")
        .tempfile_in(dir)
    {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("cannot create files in {}: {e}", dir.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_new_sqlite_file_in_a_writable_directory_is_fine_and_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/new.db", dir.path().display());
        let found = probe(&url).await.unwrap();
        assert!(found.detail.contains("will be created"), "{found:?}");
        assert!(!dir.path().join("new.db").exists());
    }

    #[tokio::test]
    async fn a_missing_directory_is_named() {
        let err = probe("sqlite:///nonexistent-oncegate-dir/x.db")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
    }

    #[tokio::test]
    async fn nothing_listening_is_refused() {
        // Bound then dropped: nothing listens on this port now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = probe(&format!("postgres://postgres@127.0.0.1:{port}/x"))
            .await
            .unwrap_err();
        assert!(matches!(err, ProbeFailure::Refused { .. }), "{err:?}");
    }
}
