//! One `oncegate serve` per SQLite file.
//!
//! SQLite itself lets a second process open the same file, and two
//! servers on it would each run the workers meant to run once (the
//! dispatcher's rate limits, recovery, retention) while racing for the
//! writer lock. `serve` therefore holds an exclusive lock on a file beside
//! the database for as long as it runs; the kernel releases it when the
//! process ends, however it ends (`kill -9` included), so a stale lock
//! file never blocks a restart. The other commands (backup, audit verify,
//! migrate) do not take it: they are meant to run beside a server.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use sqlx::sqlite::SqliteConnectOptions;

/// The lock `serve` holds on its SQLite file; released when dropped.
#[derive(Debug)]
pub struct ServeLock {
    _file: File,
    path: PathBuf,
}

impl ServeLock {
    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum ServeLockError {
    /// Another process serves this database.
    #[error(
        "another oncegate serve{holder} is already running on {database} (it holds {lock}); \
         stop it first, or point this one at another database"
    )]
    Held {
        /// The database file.
        database: String,
        /// The lock file.
        lock: String,
        /// ` (pid N)` when the holder wrote its pid.
        holder: String,
    },
    /// The URL does not parse or the lock file cannot be opened.
    #[error("cannot lock {path} for serve: {source}")]
    Io {
        /// The lock file (or the URL).
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// Takes the serve lock for the SQLite database `url` names: the file
/// `<database>.serve.lock`, created readable by its owner only.
///
/// # Errors
/// [`ServeLockError::Held`] when another process holds it.
pub fn lock_for_serve(url: &str) -> Result<ServeLock, ServeLockError> {
    let options = SqliteConnectOptions::from_str(url).map_err(|e| ServeLockError::Io {
        path: url.to_owned(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let database = options.get_filename().to_owned();
    let mut name = database.clone().into_os_string();
    name.push(".serve.lock");
    let path = PathBuf::from(name);
    let io = |source| ServeLockError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut open = OpenOptions::new();
    open.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
    let mut file = open.open(&path).map_err(io)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            let pid = pid.trim();
            return Err(ServeLockError::Held {
                database: database.display().to_string(),
                lock: path.display().to_string(),
                holder: if pid.is_empty() {
                    String::new()
                } else {
                    format!(" (pid {pid})")
                },
            });
        }
        Err(TryLockError::Error(e)) => return Err(io(e)),
    }
    // The pid is for the message a second process prints; the lock is what counts.
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    write!(file, "{}", std::process::id()).map_err(io)?;
    Ok(ServeLock { _file: file, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_file_is_refused_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/og.db", dir.path().display());
        let first = lock_for_serve(&url).unwrap();
        let err = lock_for_serve(&url).unwrap_err().to_string();
        assert!(err.contains("already running"), "{err}");
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        assert!(err.contains("og.db"), "{err}");
        drop(first);
        lock_for_serve(&url).expect("released when dropped");
    }
}
