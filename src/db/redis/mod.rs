//! The Redis tier (DESIGN.md §9): the ledger's port for the namespaces
//! that declare `tier = "redis"`.
//!
//! One key per run (`{prefix}run:{namespace length}:{namespace}:{key}`),
//! its value a [`record::Record`] and its TTL the dedup window, refreshed
//! by every write. A claim is one `SET … NX PX … GET`: a new key is
//! claimed in that one round trip, and an existing key comes back in the
//! same answer, so a duplicate costs one round trip too. Taking over an
//! expired lease or a retryable failure, renewing and finishing are Lua
//! scripts ([`scripts`]) that re-check the rule on the value they read:
//! no answer is ever decided by a read followed by a separate write.
//!
//! Every command has a deadline (`[redis] command_timeout_ms`); a command
//! that fails to reach Redis or misses it is
//! [`StoreError::Unavailable`], answered 503 with `Retry-After`: nothing
//! was acknowledged to the caller.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError};

use crate::audit::Redactor;
use crate::clock::SharedClock;
use crate::ledger::port::{LedgerStore, RunSearch};
use crate::ledger::storage::{Result, StoreError};
use crate::ledger::{
    explain_lost, ClaimOutcome, ClaimRequest, IdempotencyKey, Lease, LeaseOwner, LedgerConfig,
    Moved, Namespace, OwnerCall, OwnerMove, RedisConfig, Run, RunState,
};

mod record;
mod scripts;

use record::{FinishFields, ReclaimFields, Record};
use scripts::Scripts;

/// The Redis tier's store.
pub struct RedisLedger {
    conns: Vec<ConnectionManager>,
    next: AtomicUsize,
    prefix: String,
    ttl_ms: i64,
    timeout: Duration,
    clock: SharedClock,
    ledger: Arc<LedgerConfig>,
    redactor: Arc<Redactor>,
    scripts: Scripts,
}

impl std::fmt::Debug for RedisLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLedger")
            .field("prefix", &self.prefix)
            .field("connections", &self.conns.len())
            .finish_non_exhaustive()
    }
}

/// How many times a claim starts over when the key it found expired
/// before its takeover script ran.
const CLAIM_TRIES: usize = 3;

impl RedisLedger {
    /// The store for `config`. Connections are made on first use (and
    /// remade after a failure), so the service starts while Redis is down
    /// and answers 503 until it is back.
    ///
    /// # Errors
    /// [`StoreError::Unsupported`] when the URL is missing or malformed.
    pub fn new(
        config: &RedisConfig,
        clock: SharedClock,
        ledger: Arc<LedgerConfig>,
        redactor: Arc<Redactor>,
    ) -> Result<Self> {
        let url = config
            .url
            .as_deref()
            .ok_or_else(|| StoreError::Unsupported("redis.url is not set".into()))?;
        let client = redis::Client::open(url)
            .map_err(|e| StoreError::Unsupported(format!("redis.url: {e}")))?;
        let timeout = Duration::from_millis(config.command_timeout_ms);
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(config.connect_timeout_ms)))
            .set_response_timeout(Some(timeout))
            // One quick retry: the caller's deadline bounds the wait, and
            // the next command starts a new reconnection anyway.
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(100));
        let conns = (0..config.pool_size)
            .map(|_| ConnectionManager::new_lazy_with_config(client.clone(), manager.clone()))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| StoreError::Unsupported(format!("redis: {e}")))?;
        Ok(Self {
            conns,
            next: AtomicUsize::new(0),
            prefix: config.key_prefix.clone(),
            ttl_ms: config.dedup_window.0,
            timeout,
            clock,
            ledger,
            redactor,
            scripts: Scripts::new(),
        })
    }

    /// The Redis key of a run.
    pub fn run_key(&self, namespace: &Namespace, key: &IdempotencyKey) -> String {
        let ns = namespace.as_str();
        format!("{}run:{}:{ns}:{key}", self.prefix, ns.len())
    }

    /// Whether Redis answers `PING` within the command deadline.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub async fn ping(&self) -> Result<()> {
        let mut conn = self.conn();
        let _: String = self
            .bounded(async { redis::cmd("PING").query_async(&mut conn).await })
            .await?;
        Ok(())
    }

    fn conn(&self) -> ConnectionManager {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        self.conns[i].clone()
    }

    /// Runs one command under the deadline; a failure to reach Redis is
    /// [`StoreError::Unavailable`].
    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => Err(store_error(&err)),
            Err(_) => Err(StoreError::Unavailable(format!(
                "no answer within {} ms",
                self.timeout.as_millis()
            ))),
        }
    }

    /// `SET key value NX PX ttl GET`: `None` when this call created the
    /// key, else the value already there.
    async fn set_new(&self, key: &str, value: &str) -> Result<Option<String>> {
        let mut conn = self.conn();
        self.bounded(async {
            redis::cmd("SET")
                .arg(key)
                .arg(value)
                .arg("NX")
                .arg("PX")
                .arg(self.ttl_ms)
                .arg("GET")
                .query_async(&mut conn)
                .await
        })
        .await
    }

    /// One script's `{verdict, value}`.
    async fn verdict(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<(String, Option<String>)> {
        let mut conn = self.conn();
        let answer: Vec<String> = self
            .bounded(async { invocation.invoke_async(&mut conn).await })
            .await?;
        let mut answer = answer.into_iter();
        let verdict = answer
            .next()
            .ok_or_else(|| StoreError::corrupt("a redis script answered nothing"))?;
        Ok((verdict, answer.next()))
    }

    fn run_of(&self, text: &str, ns: &Namespace, key: &IdempotencyKey) -> Result<Run> {
        Record::decode(text)?.to_run(ns, key)
    }

    /// Takes over `found` (an expired lease or a retryable failure) by
    /// script; `None` when the key expired meanwhile.
    async fn reclaim(
        &self,
        req: &ClaimRequest,
        key: &str,
        found: Run,
    ) -> Result<Option<ClaimOutcome>> {
        let owner = LeaseOwner::generate();
        let rules = self.ledger.recovery(req.namespace.as_str());
        let fields = serde_json::to_string(&ReclaimFields::of(req)).unwrap_or_default();
        let mut invocation = self.scripts.reclaim.key(key);
        invocation
            .arg(self.clock.now_ms())
            .arg(req.payload_hash.as_str())
            .arg(owner.to_hex())
            .arg(req.lease_ms)
            .arg(fields)
            .arg(rules.max_reclaims)
            .arg(rules.retry_window_ms)
            .arg(self.ttl_ms);
        let (verdict, value) = self.verdict(&invocation).await?;
        let run = match value {
            Some(text) => self.run_of(&text, &req.namespace, &req.key)?,
            None => return Ok(None),
        };
        Ok(Some(match verdict.as_str() {
            "claimed" => ClaimOutcome::Claimed {
                lease: Lease {
                    owner,
                    version: run.version,
                },
                run,
                reclaimed_from: Some(found.state),
            },
            // No dead letters on this tier: the run ends failed_terminal.
            "exhausted" => ClaimOutcome::Finished(run),
            _ => ClaimOutcome::for_existing(run, &req.payload_hash),
        }))
    }

    /// An owner script's answer: the moved run, or why the lease lost it.
    fn owned(&self, call: &OwnerCall, verdict: &str, value: Option<String>) -> Result<Moved> {
        let run = value
            .map(|text| self.run_of(&text, &call.namespace, &call.key))
            .transpose()?;
        match (verdict, run) {
            ("ok", Some(run)) => Ok(Moved {
                lease: run.lease,
                run,
            }),
            (_, current) => {
                let why = explain_lost(current.as_ref(), &call.lease, self.clock.now_ms());
                Err(StoreError::LostOwnership {
                    current: current.map(Box::new),
                    why,
                })
            }
        }
    }
}

/// Whether a Redis error means "Redis cannot serve this now" (503) or a
/// bug on our side (500).
fn store_error(err: &RedisError) -> StoreError {
    match err.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType | ErrorKind::InvalidClientConfig => {
            StoreError::corrupt(format!("redis: {err}"))
        }
        _ => StoreError::Unavailable(err.to_string()),
    }
}

#[async_trait]
impl LedgerStore for RedisLedger {
    async fn claim(&self, req: &ClaimRequest) -> Result<ClaimOutcome> {
        if req.business_key.is_some() {
            return Err(StoreError::Unsupported(
                "business_key is not supported on the Redis tier".into(),
            ));
        }
        let key = self.run_key(&req.namespace, &req.key);
        for _ in 0..CLAIM_TRIES {
            let owner = LeaseOwner::generate();
            let record = Record::new_claim(req, owner, self.clock.now_ms());
            let Some(found) = self.set_new(&key, &record.encode()).await? else {
                let run = record.to_run(&req.namespace, &req.key)?;
                let lease = Lease {
                    owner,
                    version: run.version,
                };
                return Ok(ClaimOutcome::Claimed {
                    run,
                    lease,
                    reclaimed_from: None,
                });
            };
            let run = self.run_of(&found, &req.namespace, &req.key)?;
            let now = self.clock.now_ms();
            let takeover = run.payload_hash == req.payload_hash
                && match run.state {
                    RunState::FailedRetryable => true,
                    RunState::Processing => run.lease_expires_at.is_some_and(|at| at <= now),
                    _ => false,
                };
            if !takeover {
                return Ok(ClaimOutcome::for_existing(run, &req.payload_hash));
            }
            if let Some(outcome) = self.reclaim(req, &key, run).await? {
                return Ok(outcome);
            }
        }
        Err(StoreError::Unavailable(
            "the key kept expiring during the claim".into(),
        ))
    }

    async fn renew(&self, call: &OwnerCall, lease_ms: i64, max_life_ms: i64) -> Result<Moved> {
        let mut invocation = self
            .scripts
            .renew
            .key(self.run_key(&call.namespace, &call.key));
        invocation
            .arg(self.clock.now_ms())
            .arg(call.lease.owner.to_hex())
            .arg(call.lease.version.get())
            .arg(lease_ms)
            .arg(max_life_ms)
            .arg(self.ttl_ms);
        let (verdict, value) = self.verdict(&invocation).await?;
        self.owned(call, &verdict, value)
    }

    async fn finish(&self, call: &OwnerCall, mv: &OwnerMove) -> Result<Moved> {
        let ns = call.namespace.as_str();
        let fields = match mv {
            OwnerMove::Complete { result } => FinishFields {
                res: result.as_ref().map(|value| {
                    let mut value = value.clone();
                    if self.redactor.applies(ns) {
                        self.redactor.value(ns, &mut value);
                    }
                    value.to_string()
                }),
                err: None,
                why: None,
            },
            OwnerMove::FailRetryable { error } => FinishFields {
                res: None,
                err: Some(error),
                why: None,
            },
            OwnerMove::FailTerminal { error } => FinishFields {
                res: None,
                err: Some(error),
                why: Some(error),
            },
        };
        let fields = serde_json::to_string(&fields).unwrap_or_default();
        let mut invocation = self
            .scripts
            .finish
            .key(self.run_key(&call.namespace, &call.key));
        invocation
            .arg(self.clock.now_ms())
            .arg(call.lease.owner.to_hex())
            .arg(call.lease.version.get())
            .arg(mv.as_move().to_state().as_str())
            .arg(fields)
            .arg(self.ttl_ms);
        let (verdict, value) = self.verdict(&invocation).await?;
        self.owned(call, &verdict, value)
    }

    async fn get_run(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Option<Run>> {
        let mut conn = self.conn();
        let redis_key = self.run_key(namespace, key);
        let text: Option<String> = self
            .bounded(async {
                redis::cmd("GET")
                    .arg(&redis_key)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        text.map(|t| self.run_of(&t, namespace, key)).transpose()
    }

    async fn search_runs(&self, _search: &RunSearch) -> Result<Vec<Run>> {
        // Runs are kept by key, not indexed: a search reads the SQL tier
        // (`ledger::Tiered` never sends one here).
        Ok(Vec::new())
    }
}
