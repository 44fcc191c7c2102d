//! The PostgreSQL backend: any number of oncegate processes, one database.
//!
//! Lease times are compared with the database's clock (`og_now_ms`, which is
//! `now()` in milliseconds), so nodes whose clocks disagree still agree on
//! who owns a run. Migrations take PostgreSQL's advisory lock, so processes
//! starting together apply them once. Writes are pool transactions;
//! concurrent claims of new keys, and concurrent intakes of new webhook
//! events, share one statement and one commit ([`batch`]); concurrent
//! replays of the proxy's kept answers share one read ([`proxy_replay`]).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use super::exec::{Read, Tx};
use super::sql::{Dialect, Statements};
use super::tx::ledger::Completion;
use super::{Backend, Db, Finish, Job, StoreOptions};
use crate::clock::{Millis, SharedClock};
use crate::ingress::RawEvent;
use crate::ledger::storage::{Result, StoreError};
use crate::ledger::{
    ClaimOutcome, ClaimRequest, IdempotencyKey, Moved, Namespace, OwnerCall, PayloadHash,
};
use crate::outbox::NewEffect;
use crate::proxy::Answer;

pub mod batch;
pub mod claim;
pub mod complete;
pub mod intake;
pub mod proxy_replay;
mod queue;

pub use queue::BatchStats;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// A pooled connection idle this long is pinged before it is used again.
const IDLE_BEFORE_PING: Duration = Duration::from_secs(10);

/// The PostgreSQL store: every port over one database.
pub type PgStore = Db<PgBackend>;

/// Where PostgreSQL's writes and reads go: one pool.
#[derive(Debug)]
pub struct PgBackend {
    pool: PgPool,
    claims: batch::Batcher,
    intakes: batch::Batcher,
    replays: proxy_replay::ReplayBatcher,
    /// The chains of the runs the claim batches won, for their owners'
    /// completions.
    heads: Arc<complete::WonHeads>,
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
        let st = Statements::new(Dialect::Postgres)
            .redacting(options.redaction.clone())
            .recovering(options.ledger.clone());
        let (clock, use_db_clock) = (options.clock.clone(), options.use_db_clock);
        let now: queue::Now = Arc::new(move || (!use_db_clock).then(|| clock.now_ms()));
        let heads = Arc::new(complete::WonHeads::default());
        let claims = batch::Batcher::start(
            pool.clone(),
            now.clone(),
            batch::Kind::Claims,
            Some(heads.clone()),
        );
        let intakes = batch::Batcher::start(pool.clone(), now.clone(), batch::Kind::Intakes, None);
        let replays = proxy_replay::ReplayBatcher::start(pool.clone(), &st.proxy, now);
        Ok(Self::new(PgBackend {
            claims,
            intakes,
            replays,
            heads,
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

    /// The claim batches sent so far.
    pub fn claim_batches(&self) -> BatchStats {
        self.backend().claims.stats()
    }

    /// The intake batches sent so far.
    pub fn intake_batches(&self) -> BatchStats {
        self.backend().intakes.stats()
    }

    /// The owner completions that went as one statement so far (runs a
    /// claim batch of this store won).
    pub fn completions_at_head(&self) -> u64 {
        self.backend().heads.completed()
    }

    /// The proxy replay batches sent so far.
    pub fn replay_batches(&self) -> BatchStats {
        self.backend().replays.stats()
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

    /// A new key or a duplicate: one autocommitted statement shared by the
    /// claims of a batch. Anything else (a reclaim, a taken business key, a
    /// race with another claim of the same key): the general transactional
    /// claim.
    async fn claim_first(&self, req: &ClaimRequest) -> Result<Option<ClaimOutcome>> {
        let redactor = &self.st.redactor;
        self.claims.claim(req, self.clock.now_ms(), redactor).await
    }

    /// A new event id: the whole accept in one autocommitted statement
    /// shared by the intakes of a batch; anything else: the general accept.
    async fn accept_first(
        &self,
        req: &ClaimRequest,
        event: &RawEvent,
        forward: &NewEffect,
    ) -> Result<Option<ClaimOutcome>> {
        let redactor = &self.st.redactor;
        let now = self.clock.now_ms();
        self.intakes
            .accept(req, event, forward, now, redactor)
            .await
    }

    /// The owner's completion of a run a claim batch won: one statement.
    async fn complete_first<'a, F>(&'a self, call: &'a OwnerCall, done: F) -> Result<Option<Moved>>
    where
        F: FnOnce() -> Completion<'a> + Send + 'a,
    {
        self.complete_at_head(call, done).await
    }

    /// A kept answer's replay: one statement shared by the reads of a batch.
    async fn replay_batched(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
        payload_hash: &PayloadHash,
    ) -> Option<Option<Answer>> {
        self.replays.replay(namespace, key, payload_hash).await
    }

    async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn ping(&self) -> Result<()> {
        // A standby or a read-only default answers reads but no write.
        let (writable,): (bool,) = sqlx::query_as(
            "SELECT current_setting('transaction_read_only') = 'off' AND NOT pg_is_in_recovery()",
        )
        .fetch_one(&self.pool)
        .await?;
        if !writable {
            return Err(StoreError::ReadOnly);
        }
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
