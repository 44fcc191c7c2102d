//! The database backends: transactions as plain Rust over a small executor.
//!
//! Each part declares the storage it needs as a port beside it
//! (`ledger::port::LedgerStore`, `outbox::port::OutboxStore`, …). Here
//! every port is implemented once, for any [`Backend`], by [`Db`]:
//!
//! - [`sql`]: the statements, one file per part, spelled per [`sql::Dialect`];
//!   every statement that writes `runs` is in [`sql::runs`].
//! - [`tx`]: the transactions and reads, plain `async fn`s over
//!   [`exec::Tx`] and [`exec::Reader`], and each port's implementation.
//! - [`rows`]: rows as statements return them, and their conversion to
//!   domain types.
//! - [`exec`]: the executor surface ([`exec::Args`], [`exec::Row`]) and
//!   [`sqlx_exec`], the leaf that binds and reads through sqlx.
//! - [`sqlite`]: the embedded default for one node; its writes go through
//!   one group-committed connection, its read pool cannot write.
//! - [`postgres`]: many nodes against one database.
//!
//! A backend only says how a write transaction begins and ends and where
//! reads go ([`Backend`]), plus the few calls it does differently (the
//! first try of a claim, migrations, backups).

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use futures_util::future::BoxFuture;

use crate::approval::port::{ApprovalStore, SessionStore};
use crate::audit::port::AuditStore;
use crate::clock::{Millis, SharedClock};
use crate::deadletter::port::{DeadLetterStore, JobStore, ReplayStore};
use crate::ingress::port::IngressStore;
use crate::ingress::RawEvent;
use crate::ledger::port::{LedgerStore, RecoveryStore};
use crate::ledger::{
    ClaimOutcome, ClaimRequest, IdempotencyKey, Moved, Namespace, OwnerCall, PayloadHash,
};
use crate::metrics::port::GaugeStore;
use crate::outbox::port::OutboxStore;
use crate::outbox::NewEffect;
use crate::proxy::Answer;
use crate::retention::port::RetentionStore;
use crate::tokens::port::TokenStore;
use crate::validate::port::OutputStore;

pub mod availability;
pub mod exec;
pub mod postgres;
pub mod probe;
pub mod redis;
pub mod rows;
pub mod sql;
pub mod sqlite;
pub mod sqlx_exec;
pub mod tx;

pub use crate::ledger::storage::{Result, StoreError};
use exec::{Reader, Tx};
use sql::Statements;

/// How a write transaction ends.
#[derive(Debug)]
pub enum Finish<T> {
    /// Keep its writes (durable before the caller hears of it).
    Commit(T),
    /// Undo them (the caller is answered once what was committed before
    /// is durable, so its next read sees it).
    Rollback(T),
}

impl<T> Finish<T> {
    /// The same ending with its value mapped.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Finish<U> {
        match self {
            Self::Commit(value) => Finish::Commit(f(value)),
            Self::Rollback(value) => Finish::Rollback(f(value)),
        }
    }
}

/// A write transaction's work, run by the backend inside one transaction.
pub type Job<T> =
    Box<dyn for<'t, 'u> FnOnce(&'t mut Tx<'u>) -> BoxFuture<'t, Result<Finish<T>>> + Send>;

/// What a backend provides: where writes and reads go, and the calls it
/// does differently. Everything else is written once in [`tx`].
pub trait Backend: Send + Sync + fmt::Debug + 'static {
    /// `"sqlite"` or `"postgres"`.
    const NAME: &'static str;

    /// Every statement, spelled for this backend.
    fn statements(&self) -> &Arc<Statements>;

    /// The clock.
    fn clock(&self) -> &SharedClock;

    /// The time bound into statements: `None` lets PostgreSQL use its own.
    fn now(&self) -> Option<Millis>;

    /// The read side, outside any transaction.
    fn read(&self) -> &dyn exec::Read;

    /// Where the request path's one-row reads go: SQLite reads them on
    /// the calling thread, on connections of their own (no hand-off to
    /// a pool's thread); elsewhere they are ordinary reads.
    fn point_read(&self) -> &dyn exec::Read {
        self.read()
    }

    /// Runs `job` in one write transaction, committed or rolled back as it
    /// says; its output once that is durable.
    fn write<T: Send + 'static>(&self, job: Job<T>) -> impl Future<Output = Result<T>> + Send;

    /// A claim's first try: an answer when the backend can give one
    /// without the general transactional claim (SQLite answers a settled
    /// key from its read pool; PostgreSQL claims a new key or answers a
    /// duplicate in one autocommitted statement). `None`: nothing was
    /// written, and the general claim decides.
    fn claim_first(
        &self,
        req: &ClaimRequest,
    ) -> impl Future<Output = Result<Option<ClaimOutcome>>> + Send;

    /// An ingress accept's first try: an answer read without a write when
    /// the key is settled (SQLite), or the whole accept of a new event id
    /// batched with its neighbours (PostgreSQL); `None`: nothing was
    /// written, and the general accept decides.
    fn accept_first(
        &self,
        req: &ClaimRequest,
        event: &RawEvent,
        forward: &NewEffect,
    ) -> impl Future<Output = Result<Option<ClaimOutcome>>> + Send;

    /// An owner's completion's first try: one statement where the backend
    /// knows the run's audit chain (PostgreSQL, for a run one of its
    /// claim batches won); `done` builds the completion only then. `None`:
    /// nothing was written, and the general move decides.
    fn complete_first<'a, F>(
        &'a self,
        call: &'a OwnerCall,
        done: F,
    ) -> impl Future<Output = Result<Option<Moved>>> + Send + 'a
    where
        F: FnOnce() -> tx::ledger::Completion<'a> + Send + 'a,
    {
        let _ = (call, done);
        std::future::ready(Ok(None))
    }

    /// The proxy's replay read, batched with its neighbours' where the
    /// backend batches them (PostgreSQL); `None`: read it alone.
    fn replay_batched(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
        payload_hash: &PayloadHash,
    ) -> impl Future<Output = Option<Option<Answer>>> + Send {
        let _ = (namespace, key, payload_hash);
        std::future::ready(None)
    }

    /// Applies pending migrations.
    fn migrate(&self) -> impl Future<Output = Result<()>> + Send;

    /// Checks that the database answers and takes writes, without
    /// changing anything.
    fn ping(&self) -> impl Future<Output = Result<()>> + Send;

    /// Writes a consistent copy of the database to `dest` while serving.
    fn backup(&self, dest: &std::path::Path) -> impl Future<Output = Result<()>> + Send;

    /// Closes the pools.
    fn close(&self) -> impl Future<Output = ()> + Send;
}

/// Every port, implemented for one backend.
#[derive(Debug)]
pub struct Db<B> {
    backend: B,
}

impl<B: Backend> Db<B> {
    /// The ports over `backend`.
    pub fn new(backend: B) -> Self {
        Self { backend }
    }

    /// The backend itself (its pools, for tests and maintenance).
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// A read's view: the read side, the statements, the time.
    pub(crate) fn reader(&self) -> Reader<'_> {
        Reader::new(
            self.backend.read(),
            self.backend.statements(),
            self.backend.now(),
            self.backend.clock().now_ms(),
        )
    }

    /// A one-row read's view on the request path ([`Backend::point_read`]).
    pub(crate) fn point_reader(&self) -> Reader<'_> {
        Reader::new(
            self.backend.point_read(),
            self.backend.statements(),
            self.backend.now(),
            self.backend.clock().now_ms(),
        )
    }

    /// Runs `job` in one write transaction that ends as it says.
    pub(crate) async fn write<T, F>(&self, job: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'t, 'u> FnOnce(&'t mut Tx<'u>) -> BoxFuture<'t, Result<Finish<T>>> + Send + 'static,
    {
        self.backend.write(Box::new(job)).await
    }

    /// Runs `job` in one write transaction that commits when it succeeds.
    pub(crate) async fn commit<T, F>(&self, job: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'t, 'u> FnOnce(&'t mut Tx<'u>) -> BoxFuture<'t, Result<T>> + Send + 'static,
    {
        self.backend
            .write(Box::new(move |tx| {
                Box::pin(async move { job(tx).await.map(Finish::Commit) })
            }))
            .await
    }
}

/// The calls that concern the database itself rather than a part.
#[async_trait]
pub trait Admin: Send + Sync {
    /// `"sqlite"` or `"postgres"`.
    fn backend_name(&self) -> &'static str;

    /// Applies pending migrations.
    ///
    /// # Errors
    /// [`StoreError::Migrate`] when a migration fails or the database holds
    /// migrations this binary does not know.
    async fn migrate(&self) -> Result<()>;

    /// Checks that the database answers and takes writes, without
    /// changing anything (the readiness probe).
    ///
    /// # Errors
    /// [`StoreError::Database`] when it does not answer,
    /// [`StoreError::ReadOnly`] or SQLite's `SQLITE_READONLY` when it
    /// takes no writes.
    async fn ping(&self) -> Result<()>;

    /// Takes (or renews) the lease of a periodic job for `lease_ms`; `false`
    /// when another live holder has it.
    ///
    /// # Errors
    /// On database failure.
    async fn take_job(&self, name: &str, owner: &str, lease_ms: i64) -> Result<bool>;

    /// Releases a job lease held by `owner`.
    ///
    /// # Errors
    /// On database failure.
    async fn release_job(&self, name: &str, owner: &str) -> Result<()>;

    /// Writes a consistent copy of the database to `dest` while serving.
    ///
    /// # Errors
    /// [`StoreError::Unsupported`] on PostgreSQL (use `pg_dump`); the
    /// database's or the file system's error otherwise.
    async fn backup(&self, dest: &std::path::Path) -> Result<()>;

    /// Closes the pools, waiting for checked-out connections.
    async fn close(&self);
}

/// Every port of every part, as one handle for the composition root.
pub trait Store:
    ReplayStore
    + LedgerStore
    + IngressStore
    + crate::ingress::port::DeliveryStore
    + OutboxStore
    + ApprovalStore
    + SessionStore
    + TokenStore
    + OutputStore
    + DeadLetterStore
    + JobStore
    + AuditStore
    + RetentionStore
    + RecoveryStore
    + GaugeStore
    + crate::proxy::ProxyStore
    + Admin
    + fmt::Debug
    + 'static
{
}

impl<B: Backend> Store for Db<B> {}

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
    /// Redaction rules applied before anything is stored.
    pub redaction: Arc<crate::audit::Redactor>,
    /// The ledger's recovery rules (reclaim budget, stranded window) the
    /// claim and the recovery moves apply per namespace.
    pub ledger: Arc<crate::ledger::LedgerConfig>,
}

/// Opens (creating if needed) the store a URL names, with the default
/// SQLite group commit.
///
/// # Errors
/// [`StoreError::UnsupportedUrl`] for an unknown scheme, or the backend's
/// connection error.
pub async fn connect(url: &str, options: StoreOptions) -> Result<SharedStore> {
    connect_with(url, options, sqlite::GroupCommitOptions::default()).await
}

/// Opens the store a URL names; `group` sets SQLite's group-commit
/// batching (PostgreSQL batches concurrent commits itself and ignores it).
///
/// # Errors
/// As [`connect`].
pub async fn connect_with(
    url: &str,
    options: StoreOptions,
    group: sqlite::GroupCommitOptions,
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
