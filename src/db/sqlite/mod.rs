//! The embedded SQLite backend: one node, durable by default.
//!
//! Every connection runs in WAL mode with `synchronous=FULL`, a busy
//! timeout and foreign keys on (set by the connect options, so a connection
//! the pool opens later gets them too; the writer's own connection sets the
//! same). Writes go through one connection owned by the [group-commit
//! executor](group_commit), which runs each write transaction on its own
//! thread through SQLite's C API ([`native`]): concurrent write
//! transactions share one durable transaction, each in its own savepoint,
//! and each caller is answered once that transaction is on disk. Reads use
//! a separate pool whose connections run with `PRAGMA query_only = ON`, so
//! a write that bypassed the writer fails loudly instead of fighting it
//! for the lock.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;

use super::exec::{Read, Reader};
use super::sql::{Dialect, Statements};
use super::sqlx_exec::SqliteReadPool;
use super::tx::ledger::settled_claim;
use super::{Backend, Db, Job, StoreOptions};
use crate::clock::{Millis, SharedClock};
use crate::ingress::RawEvent;
use crate::ledger::storage::{Result, StoreError};
use crate::ledger::{ClaimOutcome, ClaimRequest};
use crate::outbox::NewEffect;

pub mod backup;
pub mod group_commit;
mod native;
pub mod serve_lock;

pub use group_commit::{GroupCommit, GroupCommitOptions, WriterSettings};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

/// Connections for the claim path's point reads (one per core is plenty:
/// each read holds one for microseconds).
const POINT_READERS: usize = 4;

/// The SQLite store: every port over one file.
pub type SqliteStore = Db<SqliteBackend>;

/// Where SQLite's writes and reads go.
#[derive(Debug)]
pub struct SqliteBackend {
    write: Arc<GroupCommit>,
    read: SqliteReadPool,
    /// The claim path's point reads, on connections of their own.
    points: native::PointReads,
    connect: SqliteConnectOptions,
    st: Arc<Statements>,
    clock: SharedClock,
}

impl Db<SqliteBackend> {
    /// Opens the database file a `sqlite://PATH` URL names, creating it,
    /// with the default group commit.
    ///
    /// # Errors
    /// The URL does not parse, names an in-memory database (two pools would
    /// see two databases), or the file cannot be opened.
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Self> {
        Self::connect_with(url, options, GroupCommitOptions::default()).await
    }

    /// Opens the database with the given group-commit batching.
    ///
    /// # Errors
    /// As [`SqliteStore::connect`].
    pub async fn connect_with(
        url: &str,
        options: StoreOptions,
        group: GroupCommitOptions,
    ) -> Result<Self> {
        if url.contains(":memory:") || url.contains("mode=memory") {
            return Err(StoreError::UnsupportedUrl(format!(
                "{url} (in-memory SQLite loses every claim on exit; name a file)"
            )));
        }
        let connect = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_millis(options.busy_timeout_ms))
            .foreign_keys(true);
        // Created here, before SQLite would create it with the umask's mode.
        backup::create_private(connect.get_filename())
            .map_err(|e| StoreError::Database(sqlx::Error::Io(e)))?;
        let st = Arc::new(
            Statements::new(Dialect::Sqlite)
                .redacting(options.redaction.clone())
                .recovering(options.ledger.clone()),
        );
        let settings = WriterSettings {
            path: connect.get_filename().to_owned(),
            busy_timeout: Duration::from_millis(options.busy_timeout_ms),
            statements: st.clone(),
            clock: options.clock.clone(),
        };
        let points =
            native::PointReads::open(&settings.path, settings.busy_timeout, POINT_READERS)?;
        let write = GroupCommit::start(settings, group).await?;
        let read = SqlitePoolOptions::new()
            .max_connections(options.max_connections.max(1))
            // A file connection does not go stale; sqlx's ping before each
            // use would cost every read a trip to the connection's thread.
            .test_before_acquire(false)
            .connect_with(
                connect
                    .clone()
                    .pragma("query_only", "ON")
                    .pragma("cache_size", format!("-{}", native::READER_CACHE_KIB)),
            )
            .await?;
        Ok(Self::new(SqliteBackend {
            write: Arc::new(write),
            read: SqliteReadPool(read),
            points,
            connect,
            st,
            clock: options.clock,
        }))
    }

    /// The group-commit executor every write goes through.
    pub fn writer(&self) -> &GroupCommit {
        &self.backend().write
    }

    /// The pool reads go through (its connections refuse writes).
    pub fn read_pool(&self) -> &SqlitePool {
        &self.backend().read.0
    }
}

impl SqliteBackend {
    /// The claim path's point reads.
    fn points(&self) -> Reader<'_> {
        let now = self.clock.now_ms();
        Reader::new(&self.points, &self.st, Some(now), now)
    }
}

impl Backend for SqliteBackend {
    const NAME: &'static str = "sqlite";

    fn statements(&self) -> &Arc<Statements> {
        &self.st
    }

    fn clock(&self) -> &SharedClock {
        &self.clock
    }

    fn now(&self) -> Option<Millis> {
        Some(self.clock.now_ms())
    }

    fn read(&self) -> &dyn Read {
        &self.read
    }

    fn point_read(&self) -> &dyn Read {
        &self.points
    }

    /// Runs the whole job on the writer's thread, inside a savepoint of the
    /// open batch; its output once the batch is durable.
    async fn write<T: Send + 'static>(&self, job: Job<T>) -> Result<T> {
        self.write.write(job).await
    }

    /// A duplicate (the key is settled) is answered from the read pool and
    /// never waits for a group commit.
    async fn claim_first(&self, req: &ClaimRequest) -> Result<Option<ClaimOutcome>> {
        settled_claim(&self.points(), req).await
    }

    async fn accept_first(
        &self,
        req: &ClaimRequest,
        _event: &RawEvent,
        _forward: &NewEffect,
    ) -> Result<Option<ClaimOutcome>> {
        settled_claim(&self.points(), req).await
    }

    async fn migrate(&self) -> Result<()> {
        // Migrations take their own connection: they manage their own
        // transactions, which a turn inside a batch cannot.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(self.connect.clone())
            .await?;
        let migrated = MIGRATOR.run(&pool).await;
        pool.close().await;
        Ok(migrated?)
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.read.0).await?;
        // Through the writer: an UPDATE that matches no row still needs a
        // writable database (SQLITE_READONLY otherwise: a read-only file or
        // mount, `query_only`), and changes no page.
        self.write
            .between_batches("UPDATE _sqlx_migrations SET version = version WHERE 0")
            .await?;
        Ok(())
    }

    async fn backup(&self, dest: &std::path::Path) -> Result<()> {
        backup::sqlite(&self.connect, dest).await
    }

    async fn close(&self) {
        self.write.close().await;
        self.read.0.close().await;
    }
}
