//! The PostgreSQL backend: any number of oncegate processes, one database.
//!
//! Lease times are compared with the database's clock (`og_now_ms`, which is
//! `now()` in milliseconds), so nodes whose clocks disagree still agree on
//! who owns a run. Migrations take PostgreSQL's advisory lock, so processes
//! starting together apply them once.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use super::sql::{Dialect, Statements};
use super::{Result, Store, StoreOptions, StoredToken};
use crate::audit::AuditRecord;
use crate::clock::SharedClock;
use crate::ingress::RawEvent;
use crate::ledger::{
    ClaimOutcome, ClaimRequest, IdempotencyKey, Moved, Namespace, OwnerCall, OwnerMove, Run,
};
use crate::outbox::{ActionSwitch, AttemptView, Decision, Effect, Leased, NewEffect};
use serde_json::Value;

mod ops {
    /// Writes go to the pool: PostgreSQL batches concurrent commits itself.
    pub(crate) type Writer = sqlx::PgPool;
    /// One write: a pool transaction.
    pub(crate) type WriteTx = sqlx::Transaction<'static, sqlx::Postgres>;
    crate::ledger_ops!(sqlx::Postgres);
    crate::outbox_ops!(sqlx::Postgres);
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// A pooled connection idle this long is pinged before it is used again.
const IDLE_BEFORE_PING: Duration = Duration::from_secs(10);

/// Parallel transactions a batch of dispatch decisions is recorded in.
const RECORD_CHUNKS: usize = 4;

/// Splits decisions into at most `n` groups, keeping each run's together.
fn chunk_by_run(decisions: &[Decision], n: usize) -> Vec<Vec<Decision>> {
    use std::hash::{Hash, Hasher};
    let mut chunks: Vec<Vec<Decision>> = vec![Vec::new(); n];
    for d in decisions {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&d.leased.effect.namespace, &d.leased.effect.key).hash(&mut h);
        chunks[(h.finish() % n as u64) as usize].push(d.clone());
    }
    chunks.retain(|c| !c.is_empty());
    chunks
}

/// The PostgreSQL store.
#[derive(Debug)]
pub struct PgStore {
    pool: PgPool,
    st: Statements,
    clock: SharedClock,
    use_db_clock: bool,
}

impl PgStore {
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
        Ok(Self {
            pool,
            st: Statements::new(Dialect::Postgres),
            clock: options.clock,
            use_db_clock: options.use_db_clock,
        })
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The time bound into statements: `None` lets the database decide.
    fn now(&self) -> Option<i64> {
        (!self.use_db_clock).then(|| self.clock.now_ms())
    }

    fn cx(&self) -> ops::Cx<'_> {
        ops::Cx {
            write: &self.pool,
            read: &self.pool,
            st: &self.st,
            now: self.now(),
            clock_now: self.clock.now_ms(),
        }
    }
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn claim(&self, req: &ClaimRequest) -> Result<ClaimOutcome> {
        // A new key or a duplicate: one autocommitted statement. Anything
        // else (a reclaim, a taken business key, a race with another
        // claim of the same key): the general transactional claim.
        let clock_now = self.clock.now_ms();
        if let Some(answer) =
            super::pg_claim::claim_new(&self.pool, self.now(), clock_now, req).await?
        {
            return Ok(answer);
        }
        ops::claim(&self.cx(), req).await
    }

    async fn renew(&self, call: &OwnerCall, lease_ms: i64, max_life_ms: i64) -> Result<Moved> {
        ops::renew(&self.cx(), call, lease_ms, max_life_ms).await
    }

    async fn finish(&self, call: &OwnerCall, mv: &OwnerMove) -> Result<Moved> {
        ops::finish(&self.cx(), call, mv).await
    }

    async fn accept_event(
        &self,
        req: &ClaimRequest,
        event: &RawEvent,
        forward: &NewEffect,
    ) -> Result<ClaimOutcome> {
        ops::accept_event(&self.cx(), req, event, forward).await
    }

    async fn quarantine_event(&self, event: &RawEvent, run: &Run) -> Result<()> {
        ops::quarantine_event(&self.cx(), event, run).await
    }

    async fn effects_of(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Vec<Effect>> {
        ops::effects_of(&self.pool, &self.st, namespace, key).await
    }

    async fn commit(
        &self,
        call: &OwnerCall,
        result: Option<&Value>,
        effects: &[NewEffect],
    ) -> Result<Moved> {
        ops::outbox::commit(&self.cx(), call, result, effects).await
    }

    async fn lease_effects(&self, owner: &str, lease_ms: i64, limit: i64) -> Result<Vec<Leased>> {
        ops::outbox::lease(&self.cx(), owner, lease_ms, limit).await
    }

    async fn record_decisions(&self, decisions: &[Decision]) -> Result<Vec<bool>> {
        // Several transactions in parallel over the pool; every decision of
        // one run stays in one chunk, so no two chunks lock the same run row.
        let chunks = chunk_by_run(decisions, RECORD_CHUNKS);
        let cx = self.cx();
        let results = futures_util::future::join_all(
            chunks
                .iter()
                .map(|chunk| ops::outbox::record_decisions(&cx, chunk)),
        )
        .await;
        let mut recorded = vec![false; decisions.len()];
        for (chunk, result) in chunks.iter().zip(results) {
            for (decision, ok) in chunk.iter().zip(result?) {
                if let Some(i) = decisions
                    .iter()
                    .position(|d| d.leased.effect.id == decision.leased.effect.id)
                {
                    recorded[i] = ok;
                }
            }
        }
        Ok(recorded)
    }

    async fn expire_sending(&self) -> Result<u64> {
        ops::outbox::expire(&self.cx()).await
    }

    async fn cancel_effect(&self, id: &str, actor: &str) -> Result<Option<Effect>> {
        ops::outbox::cancel(&self.cx(), id, actor).await
    }

    async fn effect(&self, id: &str) -> Result<Option<Effect>> {
        ops::outbox::effect(&self.pool, &self.st, id).await
    }

    async fn attempts(&self, effect_id: &str) -> Result<Vec<AttemptView>> {
        ops::outbox::attempts(&self.pool, &self.st, effect_id).await
    }

    async fn set_actions(&self, scope: &str, enabled: bool, actor: &str) -> Result<()> {
        ops::outbox::set_switch(&self.cx(), scope, enabled, actor, self.clock.now_ms()).await
    }

    async fn action_switches(&self) -> Result<Vec<ActionSwitch>> {
        ops::outbox::switches(&self.pool, &self.st).await
    }

    async fn backlog(&self) -> Result<Vec<(String, String, i64)>> {
        ops::outbox::backlog(&self.pool, &self.st).await
    }

    async fn get_run(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Option<Run>> {
        ops::fetch(&self.pool, &self.st, namespace, key).await
    }

    async fn audit_trail(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
    ) -> Result<Vec<AuditRecord>> {
        ops::audit_trail(&self.pool, &self.st, namespace, key).await
    }

    async fn stored_tokens(&self) -> Result<Vec<StoredToken>> {
        ops::stored_tokens(&self.pool, &self.st).await
    }

    async fn insert_token(&self, token: &StoredToken) -> Result<()> {
        ops::insert_token(&self.cx(), token).await
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
