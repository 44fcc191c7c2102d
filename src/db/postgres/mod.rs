//! The PostgreSQL backend: any number of oncegate processes, one database.
//!
//! Lease times are compared with the database's clock (`og_now_ms`, which is
//! `now()` in milliseconds), so nodes whose clocks disagree still agree on
//! who owns a run. Migrations take PostgreSQL's advisory lock, so processes
//! starting together apply them once. Writes are pool transactions:
//! PostgreSQL batches concurrent commits itself.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use super::exec::{Read, Reader, Tx};
use super::sql::{Dialect, Statements};
use super::{Backend, Db, Finish, Job, StoreOptions};
use crate::clock::{Millis, SharedClock};
use crate::ledger::storage::{Result, StoreError};
use crate::ledger::{ClaimOutcome, ClaimRequest};

pub mod claim;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// A pooled connection idle this long is pinged before it is used again.
const IDLE_BEFORE_PING: Duration = Duration::from_secs(10);

/// The PostgreSQL store: every port over one database.
pub type PgStore = Db<PgBackend>;

/// Where PostgreSQL's writes and reads go: one pool.
#[derive(Debug)]
pub struct PgBackend {
    pool: PgPool,
    st: Arc<Statements>,
    clock: SharedClock,
    use_db_clock: bool,
}

impl Db<PgBackend> {
    /// Connects a pool to the database a `postgres://` URL names.
    ///
    /// # Errors
    /// The URL does not parse or the database cannot be reached.
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Self> {
        let connect = PgConnectOptions::from_str(url)?.application_name("oncegate");
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .acquire_timeout(Duration::from_secs(10))
            // sqlx pings every connection it hands out by default: one more
            // round trip per transaction. Only a connection idle long enough
            // to have been dropped by the server or a proxy is checked.
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= IDLE_BEFORE_PING {
                        sqlx::Connection::ping(conn).await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(connect)
            .await?;
        let st = Statements::new(Dialect::Postgres).redacting(options.redaction.clone());
        Ok(Self::new(PgBackend {
            pool,
            st: Arc::new(st),
            clock: options.clock,
            use_db_clock: options.use_db_clock,
        }))
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        &self.backend().pool
    }
}

impl PgBackend {
    fn reader(&self) -> Reader<'_> {
        Reader::new(&self.pool, &self.st, self.now(), self.clock.now_ms())
    }
}

impl Backend for PgBackend {
    const NAME: &'static str = "postgres";

    fn statements(&self) -> &Arc<Statements> {
        &self.st
    }

    fn clock(&self) -> &SharedClock {
        &self.clock
    }

    fn now(&self) -> Option<Millis> {
        (!self.use_db_clock).then(|| self.clock.now_ms())
    }

    fn read(&self) -> &dyn Read {
        &self.pool
    }

    async fn write<T: Send + 'static>(&self, job: Job<T>) -> Result<T> {
        let mut transaction = self.pool.begin().await?;
        let mut tx = Tx::new(
            &mut *transaction,
            &self.st,
            self.now(),
            self.clock.now_ms(),
            Self::NAME,
        );
        let outcome = job(&mut tx).await;
        match outcome? {
            Finish::Commit(value) => {
                transaction.commit().await?;
                Ok(value)
            }
            Finish::Rollback(value) => {
                transaction.rollback().await?;
                Ok(value)
            }
        }
    }

    /// A new key or a duplicate: one autocommitted statement. Anything else
    /// (a reclaim, a taken business key, a race with another claim of the
    /// same key): the general transactional claim.
    async fn claim_first(&self, req: &ClaimRequest) -> Result<Option<ClaimOutcome>> {
        claim::claim_new(&self.reader(), req).await
    }

    async fn accept_first(&self, _req: &ClaimRequest) -> Result<Option<ClaimOutcome>> {
        Ok(None)
    }

    async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn backup(&self, _dest: &std::path::Path) -> Result<()> {
        Err(StoreError::Unsupported(
            super::sqlite::backup::PG_BACKUP_PROCEDURE.into(),
        ))
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
