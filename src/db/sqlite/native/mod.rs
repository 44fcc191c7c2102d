//! The writer's own connection: SQLite's C API through rusqlite (on the
//! same `libsqlite3-sys` as sqlx), called on the writer's thread.
//!
//! sqlx runs each SQLite connection on a worker thread of its own, so every
//! statement of a write was a round trip between two threads (a savepoint,
//! the claim, its audit append: three per claim). Here the writer thread
//! owns the connection and runs each statement where it is: [`Exec`]'s
//! futures are ready when they are returned. Statements are prepared once
//! and kept (`prepare_cached`); `$N` parameters are bound by their number,
//! as sqlx binds them, and a string of several statements runs them in
//! turn, each binding the numbers it names.

mod values;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{self, BoxFuture};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};

use self::values::{bind, OwnedRow};
use crate::db::exec::{Arg, Args, Each, Exec, Row};
use crate::ledger::storage::{Result, StoreError};

/// Statements kept prepared on the write connection.
const STATEMENT_CACHE: usize = 256;

/// The page cache of each reading connection, in KiB (SQLite's default,
/// 2,000 KiB, stays the writer's). A reader keeps its cache for its whole
/// life, so once the tables outgrow them (a retention sweep or a console
/// search over millions of runs fills them all), twelve readers at the
/// default hold 24 MiB of copies of pages that the kernel's page cache
/// holds anyway; a point read walks one root-to-leaf path.
pub(crate) const READER_CACHE_KIB: u32 = 512;

/// The write connection and what it keeps between statements.
pub(crate) struct NativeConn {
    conn: Connection,
    /// Each statement's column names, shared by the rows it returns.
    columns: HashMap<String, Arc<[String]>>,
}

impl std::fmt::Debug for NativeConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeConn").finish_non_exhaustive()
    }
}

impl NativeConn {
    /// Opens (creating) the database file with the settings every pooled
    /// connection has: WAL, `synchronous=FULL`, the busy timeout, foreign
    /// keys.
    ///
    /// # Errors
    /// The file cannot be opened or a setting is refused.
    pub(crate) fn open(path: &Path, busy_timeout: Duration) -> Result<Self, rusqlite::Error> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags)?;
        conn.busy_timeout(busy_timeout)?;
        // journal_mode answers with the mode it set.
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(rusqlite::Error::InvalidQuery);
        }
        conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(Self {
            conn,
            columns: HashMap::new(),
        })
    }

    /// Opens the writer's connection: the same settings, without the
    /// automatic checkpoint (the checkpointer thread runs it).
    ///
    /// # Errors
    /// As [`NativeConn::open`].
    pub(crate) fn open_writer(
        path: &Path,
        busy_timeout: Duration,
    ) -> Result<Self, rusqlite::Error> {
        let conn = Self::open(path, busy_timeout)?;
        conn.conn.execute_batch("PRAGMA wal_autocheckpoint = 0;")?;
        Ok(conn)
    }

    /// Opens a read-only connection to the file (`PRAGMA query_only`), with
    /// the same settings and a page cache of [`READER_CACHE_KIB`].
    ///
    /// # Errors
    /// As [`NativeConn::open`].
    pub(crate) fn open_reader(
        path: &Path,
        busy_timeout: Duration,
    ) -> Result<Self, rusqlite::Error> {
        let conn = Self::open(path, busy_timeout)?;
        conn.conn.execute_batch(&format!(
            "PRAGMA query_only = ON; PRAGMA cache_size = -{READER_CACHE_KIB};"
        ))?;
        Ok(conn)
    }

    /// Runs a fixed statement with no parameters (`BEGIN`, `SAVEPOINT`, …).
    pub(crate) fn batch(&self, sql: &str) -> Result<(), rusqlite::Error> {
        self.conn.prepare_cached(sql)?.execute([]).map(|_| ())
    }

    /// Runs a statement outside any transaction; the first column of its
    /// first row as an integer, if it returns one.
    pub(crate) fn scalar(&self, sql: &str) -> Result<Option<i64>, rusqlite::Error> {
        let mut stmt = self.conn.prepare(sql)?;
        let mut rows = stmt.raw_query();
        match rows.next()? {
            Some(row) => Ok(match row.get_ref(0)? {
                ValueRef::Integer(i) => Some(i),
                _ => None,
            }),
            None => Ok(None),
        }
    }

    /// A passive checkpoint: the WAL's frames, and how many of them are
    /// now copied into the database file.
    ///
    /// # Errors
    /// The checkpoint failed.
    pub(crate) fn checkpoint_passive(&self) -> Result<(i64, i64), rusqlite::Error> {
        self.conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get(1)?, r.get(2)?))
            })
    }

    /// Copies every frame of the WAL into the database file and waits up
    /// to `patience` for the readers still on the WAL, so that the next
    /// write starts the WAL over from its beginning; whether it could.
    /// The connection's busy timeout is `usual` again afterwards.
    ///
    /// # Errors
    /// The checkpoint failed for another reason than a busy reader.
    pub(crate) fn restart_wal(
        &self,
        patience: Duration,
        usual: Duration,
    ) -> Result<bool, rusqlite::Error> {
        self.conn.busy_timeout(patience)?;
        let busy = self
            .conn
            .query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| r.get::<_, i64>(0));
        self.conn.busy_timeout(usual)?;
        Ok(busy? == 0)
    }

    /// Whether the connection is inside a transaction.
    pub(crate) fn in_transaction(&self) -> bool {
        !self.conn.is_autocommit()
    }

    /// Runs every statement of `sql` in turn, handing each returned row to
    /// `each`; the rows the statements changed.
    fn run(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        each: &mut dyn FnMut(OwnedRow) -> Result<()>,
    ) -> Result<u64> {
        let mut changed = 0;
        for part in statements(sql) {
            let names = self.column_names(part)?;
            let mut stmt = self.conn.prepare_cached(part).map_err(StoreError::Sqlite)?;
            bind(&mut stmt, args)?;
            let writes = !stmt.readonly();
            let mut rows = stmt.raw_query();
            while let Some(row) = rows.next().map_err(StoreError::Sqlite)? {
                each(OwnedRow::read(row, &names)?)?;
            }
            drop(rows);
            if writes {
                changed += self.conn.changes();
            }
        }
        Ok(changed)
    }

    fn column_names(&mut self, sql: &str) -> Result<Arc<[String]>> {
        if let Some(names) = self.columns.get(sql) {
            return Ok(names.clone());
        }
        let stmt = self.conn.prepare_cached(sql).map_err(StoreError::Sqlite)?;
        let names: Arc<[String]> = stmt.column_names().iter().map(|n| n.to_string()).collect();
        drop(stmt);
        self.columns.insert(sql.to_owned(), names.clone());
        Ok(names)
    }
}

/// A few read-only connections for the claim path's point reads (is this
/// key settled?), run where they are asked for: a look-up by primary key
/// in SQLite's page cache takes microseconds, less than a hand-off to one
/// of sqlx's connection threads and back. Scans stay on sqlx's read pool.
pub(crate) struct PointReads {
    conns: Vec<std::sync::Mutex<NativeConn>>,
    next: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for PointReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PointReads")
            .field("conns", &self.conns.len())
            .finish()
    }
}

impl PointReads {
    /// Opens `n` read-only connections.
    ///
    /// # Errors
    /// As [`NativeConn::open`].
    pub(crate) fn open(
        path: &Path,
        busy_timeout: Duration,
        n: usize,
    ) -> Result<Self, rusqlite::Error> {
        let conns = (0..n.max(1))
            .map(|_| NativeConn::open_reader(path, busy_timeout).map(std::sync::Mutex::new))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            conns,
            next: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// Every row a read returns, on the first free connection (or, when
    /// all are busy, the next one's turn).
    fn rows(&self, sql: &str, args: Args<'_>) -> Result<Vec<Box<dyn Row + 'static>>> {
        let held = self.conns.iter().find_map(|c| c.try_lock().ok());
        let mut conn = match held {
            Some(conn) => conn,
            None => {
                let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.conns[i % self.conns.len()]
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            }
        };
        let mut rows: Vec<Box<dyn Row>> = Vec::new();
        conn.run(sql, &args.into_inner(), &mut |row| {
            rows.push(Box::new(row));
            Ok(())
        })?;
        Ok(rows)
    }
}

impl crate::db::exec::Read for PointReads {
    fn stream<'e>(
        &'e self,
        sql: &'e str,
        args: Args<'e>,
    ) -> futures_util::stream::BoxStream<'e, Result<Box<dyn Row + 'static>>> {
        use futures_util::stream::StreamExt;
        match self.rows(sql, args) {
            Ok(rows) => futures_util::stream::iter(rows.into_iter().map(Ok)).boxed(),
            Err(err) => futures_util::stream::once(future::ready(Err(err))).boxed(),
        }
    }
}

impl Exec for NativeConn {
    fn execute<'e>(&'e mut self, sql: &'e str, args: Args<'e>) -> BoxFuture<'e, Result<u64>> {
        let done = self.run(sql, &args.into_inner(), &mut |_| Ok(()));
        Box::pin(future::ready(done))
    }

    fn fetch<'e>(
        &'e mut self,
        sql: &'e str,
        args: Args<'e>,
        each: Each<'e>,
    ) -> BoxFuture<'e, Result<()>> {
        let done = self
            .run(sql, &args.into_inner(), &mut |row| each(&row))
            .map(|_| ());
        Box::pin(future::ready(done))
    }
}

/// The statements of a string, split at each `;` outside quotes (the
/// audit append on SQLite is two statements in one string).
fn statements(sql: &str) -> impl Iterator<Item = &str> {
    let mut parts = Vec::new();
    if !sql.contains(';') {
        parts.push(sql);
    } else {
        let (mut start, mut quote) = (0, None::<u8>);
        for (i, b) in sql.bytes().enumerate() {
            match (quote, b) {
                (Some(q), b) if b == q => quote = None,
                (Some(_), _) => {}
                (None, b'\'' | b'"') => quote = Some(b),
                (None, b';') => {
                    parts.push(&sql[start..i]);
                    start = i + 1;
                }
                (None, _) => {}
            }
        }
        parts.push(&sql[start..]);
    }
    parts.into_iter().filter(|p| !p.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{statements, NativeConn, READER_CACHE_KIB};

    #[test]
    fn readers_keep_a_small_page_cache_and_the_writer_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache.db");
        let wait = Duration::from_secs(1);
        let writer = NativeConn::open_writer(&path, wait).unwrap();
        let reader = NativeConn::open_reader(&path, wait).unwrap();
        let cache = |c: &NativeConn| c.scalar("PRAGMA cache_size").unwrap();
        assert_eq!(cache(&reader), Some(-i64::from(READER_CACHE_KIB)));
        assert_eq!(cache(&writer), Some(-2000), "SQLite's default");
    }

    #[test]
    fn splits_at_semicolons_outside_quotes() {
        let parts: Vec<_> =
            statements("INSERT INTO t VALUES ('a;b'); UPDATE t SET x = \";\"").collect();
        assert_eq!(
            parts,
            ["INSERT INTO t VALUES ('a;b')", " UPDATE t SET x = \";\""]
        );
        assert_eq!(statements("SELECT 1").collect::<Vec<_>>(), ["SELECT 1"]);
        assert_eq!(statements("SELECT 1;").collect::<Vec<_>>(), ["SELECT 1"]);
    }
}
