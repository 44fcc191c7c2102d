//! Where a namespace's runs live (DESIGN.md §9): in the SQL database
//! (the default), or, for a namespace that declares `tier = "redis"` in
//! `[[ledger.namespaces]]`, in Redis (`[redis]`), for high-rate,
//! short-lived claims.
//!
//! [`Tiered`] is the ledger's port as the API sees it: it sends each call
//! to the store of its namespace's tier. A Redis namespace has runs and
//! owner moves only: effects, gates, ingress sources and dead letters are
//! refused for it (config validation, and `api::access` at run time).

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::port::{LedgerStore, RunSearch};
use super::storage::{Result, StoreError};
use super::{
    ClaimOutcome, ClaimRequest, IdempotencyKey, LedgerConfig, Moved, Namespace, OwnerCall,
    OwnerMove, Run, Span,
};

/// Which store holds a namespace's runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// The SQL database (`[database]`): every feature.
    #[default]
    Sql,
    /// Redis (`[redis]`): claims and owner moves only.
    Redis,
}

impl Tier {
    /// The tier's name, as configured and as a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sql => "sql",
            Self::Redis => "redis",
        }
    }
}

/// `[redis]`: how to reach the Redis that holds the Redis-tier namespaces.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]`; required when a namespace
    /// declares `tier = "redis"`.
    pub url: Option<String>,
    /// Multiplexed connections (each pipelines any number of concurrent
    /// commands); calls are spread over them.
    pub pool_size: usize,
    /// Longest wait for a connection to be made, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Longest wait for one command's answer, in milliseconds; past it the
    /// call is answered 503.
    pub command_timeout_ms: u64,
    /// Prefix of every key oncegate writes (so one Redis can serve several
    /// deployments, and a test its own keys).
    pub key_prefix: String,
    /// How long a run is remembered after its last change (the key's TTL).
    /// A duplicate arriving later finds nothing and is claimed anew.
    pub dedup_window: Span,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: None,
            pool_size: 4,
            connect_timeout_ms: 1_000,
            command_timeout_ms: 1_000,
            key_prefix: "oncegate:".into(),
            dedup_window: Span(24 * 3_600_000),
        }
    }
}

/// The longest key prefix accepted.
const MAX_PREFIX: usize = 64;

impl RedisConfig {
    /// Checks the section against the ledger's: a Redis-tier namespace
    /// needs a URL, and the dedup window must outlive the longest lease
    /// life, so a live lease never expires with its key.
    ///
    /// # Errors
    /// The first bad field and what is wrong with it.
    pub fn validate(&self, ledger: &LedgerConfig) -> std::result::Result<(), (String, String)> {
        let field = |f: &str| format!("redis.{f}");
        let used = ledger
            .namespaces
            .iter()
            .any(|n| n.tier == Some(Tier::Redis));
        match &self.url {
            None if used => {
                return Err((
                    field("url"),
                    "a namespace declares tier = \"redis\": set the Redis URL (redis://host:port)"
                        .into(),
                ))
            }
            Some(url) if !url.starts_with("redis://") => {
                return Err((
                    field("url"),
                    "must start with redis:// (TLS and sockets are not supported)".into(),
                ))
            }
            Some(url) if redis_url_unparsable(url) => {
                return Err((field("url"), "is not a valid redis:// URL".into()))
            }
            _ => {}
        }
        if !(1..=64).contains(&self.pool_size) {
            return Err((field("pool_size"), "must be between 1 and 64".into()));
        }
        for (name, ms) in [
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("command_timeout_ms", self.command_timeout_ms),
        ] {
            if !(1..=60_000).contains(&ms) {
                return Err((field(name), "must be between 1 and 60000".into()));
            }
        }
        if self.key_prefix.is_empty()
            || self.key_prefix.len() > MAX_PREFIX
            || !self.key_prefix.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err((
                field("key_prefix"),
                format!("must be 1–{MAX_PREFIX} bytes of visible ASCII"),
            ));
        }
        if self.dedup_window.0 < ledger.max_lease_life_ms {
            return Err((
                field("dedup_window"),
                "must be at least ledger.max_lease_life_ms: a live lease must never expire with its key"
                    .into(),
            ));
        }
        Ok(())
    }
}

fn redis_url_unparsable(url: &str) -> bool {
    url::Url::parse(url).map_or(true, |u| u.host_str().is_none_or(str::is_empty))
}

/// The namespaces of each tier.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tiers {
    redis: HashSet<String>,
}

impl Tiers {
    /// The tiers `ledger` declares.
    pub fn of(ledger: &LedgerConfig) -> Self {
        Self {
            redis: ledger
                .namespaces
                .iter()
                .filter(|n| n.tier == Some(Tier::Redis))
                .map(|n| n.namespace.clone())
                .collect(),
        }
    }

    /// The tier of `namespace`.
    pub fn of_namespace(&self, namespace: &str) -> Tier {
        if self.redis.contains(namespace) {
            Tier::Redis
        } else {
            Tier::Sql
        }
    }

    /// Whether any namespace is on the Redis tier.
    pub fn any_redis(&self) -> bool {
        !self.redis.is_empty()
    }

    /// The Redis-tier namespaces.
    pub fn redis_namespaces(&self) -> impl Iterator<Item = &str> {
        self.redis.iter().map(String::as_str)
    }
}

/// How each call of the ledger's port went, by tier (the metrics
/// implement it).
pub trait TierEvents: Send + Sync + std::fmt::Debug {
    /// One call on `tier` ended: `"ok"` (answered, a lost lease included),
    /// `"unavailable"` (answered 503) or `"error"`.
    fn ledger_call(&self, tier: Tier, result: &'static str);
}

/// The ledger's port that sends each call to its namespace's tier.
/// Searches read the SQL store only: Redis keeps runs by key, not in an
/// index (docs/redis.md).
#[derive(Debug)]
pub struct Tiered {
    /// The SQL store.
    pub sql: Arc<dyn LedgerStore>,
    /// The Redis store, when a namespace is on the Redis tier.
    pub redis: Option<Arc<dyn LedgerStore>>,
    /// Which namespaces are on which tier.
    pub tiers: Tiers,
    /// Where each call is counted.
    pub events: Arc<dyn TierEvents>,
}

impl Tiered {
    fn store(&self, namespace: &Namespace) -> (Tier, &dyn LedgerStore) {
        match (&self.redis, self.tiers.of_namespace(namespace.as_str())) {
            (Some(redis), Tier::Redis) => (Tier::Redis, redis.as_ref()),
            _ => (Tier::Sql, self.sql.as_ref()),
        }
    }

    fn counted<T>(&self, tier: Tier, result: Result<T>) -> Result<T> {
        let label = match &result {
            Ok(_) | Err(StoreError::LostOwnership { .. }) => "ok",
            Err(err) if err.is_unavailable() => "unavailable",
            Err(_) => "error",
        };
        self.events.ledger_call(tier, label);
        result
    }
}

#[async_trait]
impl LedgerStore for Tiered {
    async fn claim(&self, req: &ClaimRequest) -> Result<ClaimOutcome> {
        let (tier, store) = self.store(&req.namespace);
        self.counted(tier, store.claim(req).await)
    }

    async fn renew(&self, call: &OwnerCall, lease_ms: i64, max_life_ms: i64) -> Result<Moved> {
        let (tier, store) = self.store(&call.namespace);
        self.counted(tier, store.renew(call, lease_ms, max_life_ms).await)
    }

    async fn finish(&self, call: &OwnerCall, mv: &OwnerMove) -> Result<Moved> {
        let (tier, store) = self.store(&call.namespace);
        self.counted(tier, store.finish(call, mv).await)
    }

    async fn get_run(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Option<Run>> {
        let (tier, store) = self.store(namespace);
        self.counted(tier, store.get_run(namespace, key).await)
    }

    async fn search_runs(&self, search: &RunSearch) -> Result<Vec<Run>> {
        self.sql.search_runs(search).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(toml_text: &str) -> LedgerConfig {
        toml::from_str(toml_text).unwrap()
    }

    fn redis(toml_text: &str) -> RedisConfig {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn a_redis_namespace_needs_a_url_and_a_long_enough_window() {
        let l = ledger("[[namespaces]]\nnamespace = \"hot\"\ntier = \"redis\"\n");
        assert_eq!(Tiers::of(&l).of_namespace("hot"), Tier::Redis);
        assert_eq!(Tiers::of(&l).of_namespace("crm"), Tier::Sql);
        let field = |r: &RedisConfig| r.validate(&l).unwrap_err().0;
        assert_eq!(field(&RedisConfig::default()), "redis.url");
        assert_eq!(field(&redis("url = \"http://x\"")), "redis.url");
        assert_eq!(field(&redis("url = \"redis://\"")), "redis.url");
        let ok = "url = \"redis://127.0.0.1:6379/0\"\n";
        redis(ok).validate(&l).unwrap();
        for (extra, bad) in [
            ("pool_size = 0", "redis.pool_size"),
            ("command_timeout_ms = 0", "redis.command_timeout_ms"),
            ("key_prefix = \"a b\"", "redis.key_prefix"),
            ("dedup_window = \"30m\"", "redis.dedup_window"),
        ] {
            assert_eq!(field(&redis(&format!("{ok}{extra}"))), bad, "{extra}");
        }
        // Without a Redis namespace the section may stay empty.
        RedisConfig::default()
            .validate(&LedgerConfig::default())
            .unwrap();
    }

    #[test]
    fn an_unknown_tier_is_a_clear_error() {
        let err = toml::from_str::<LedgerConfig>(
            "[[namespaces]]\nnamespace = \"hot\"\ntier = \"memcached\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("sql") && err.contains("redis"), "{err}");
    }
}
