//! `oncegate backup`: a consistent copy of a live SQLite database.
//!
//! `VACUUM INTO` on a connection of its own copies one read snapshot (WAL mode
//! lets writers go on meanwhile) into a new file, compacted. The copy is
//! written under a temporary name beside the target, fsynced, checked with
//! `PRAGMA integrity_check`, then renamed into place and its directory
//! fsynced, so a crash leaves either no backup or a whole one.
//!
//! PostgreSQL has no such call here: [`PG_BACKUP_PROCEDURE`] says how.

use std::path::Path;

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, SqliteConnection};

use crate::ledger::storage::{Result, StoreError};

/// The documented PostgreSQL procedure (also in docs/runbook.md).
pub const PG_BACKUP_PROCEDURE: &str = "\
oncegate does not copy a PostgreSQL database itself. Use pg_dump, which reads one
consistent snapshot while oncegate keeps serving:

  pg_dump --format=custom --no-owner --file=oncegate-$(date -u +%Y%m%dT%H%M%SZ).dump \"$DATABASE_URL\"

Restore into an empty database, then check it before pointing oncegate at it:

  createdb oncegate_restored
  pg_restore --no-owner --dbname=oncegate_restored oncegate-<stamp>.dump
  ONCEGATE_DATABASE_URL=postgres://…/oncegate_restored oncegate audit verify

For point-in-time recovery, use continuous WAL archiving (pg_basebackup plus
archive_command); see docs/runbook.md.";

fn fail(what: impl std::fmt::Display) -> StoreError {
    StoreError::Backup(what.to_string())
}

/// Copies the database `connect` opens to `dest` (which must not exist),
/// on a connection of its own (the read pool refuses writes, and `VACUUM
/// INTO` writes the copy).
///
/// # Errors
/// [`StoreError::Backup`] when `dest` exists, cannot be written, or the
/// copy fails its integrity check.
pub(crate) async fn sqlite(connect: &SqliteConnectOptions, dest: &Path) -> Result<()> {
    if dest.exists() {
        return Err(fail(format!(
            "{} already exists; name a new file",
            dest.display()
        )));
    }
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => std::path::PathBuf::from("."),
    };
    let name = dest
        .file_name()
        .ok_or_else(|| fail(format!("{} names no file", dest.display())))?;
    let tmp = dir.join(format!(
        ".{}.partial-{}",
        name.to_string_lossy(),
        uuid::Uuid::now_v7()
    ));
    let tmp_text = tmp
        .to_str()
        .ok_or_else(|| fail("the backup path is not UTF-8"))?
        .to_owned();
    // VACUUM INTO fills an empty file as it is, so the copy is never
    // readable by others, not even for a moment.
    create_private(&tmp).map_err(fail)?;
    let mut conn = SqliteConnection::connect_with(connect).await?;
    let copied = sqlx::query("VACUUM INTO $1")
        .bind(&tmp_text)
        .execute(&mut conn)
        .await;
    let _ = conn.close().await;
    if let Err(err) = copied {
        let _ = std::fs::remove_file(&tmp);
        return Err(err.into());
    }
    let checked = check_and_sync(&tmp, &tmp_text).await;
    if let Err(err) = checked {
        let _ = std::fs::remove_file(&tmp);
        return Err(err);
    }
    std::fs::rename(&tmp, dest).map_err(fail)?;
    std::fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(fail)?;
    Ok(())
}

/// Creates `path` empty and readable by its owner only (0600), unless it
/// exists. The database holds payloads and token digests; SQLite gives its
/// `-wal` and `-shm` files the main file's mode.
///
/// # Errors
/// The file cannot be created.
pub(crate) fn create_private(path: &Path) -> std::io::Result<()> {
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
    match open.open(path) {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(err) => Err(err),
    }
}

async fn check_and_sync(tmp: &Path, tmp_text: &str) -> Result<()> {
    std::fs::File::open(tmp)
        .and_then(|f| f.sync_all())
        .map_err(fail)?;
    let url = format!("sqlite://{tmp_text}?mode=ro");
    let mut conn = SqliteConnection::connect(&url).await?;
    let verdict: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&mut conn)
        .await?;
    conn.close().await?;
    if verdict != "ok" {
        return Err(fail(format!(
            "the copy failed its integrity check: {verdict}"
        )));
    }
    Ok(())
}
