//! Building the service: the configured store, and the shared state around
//! a migrated one (with the first-start admin token when none is
//! configured).

use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::sync::Notify;

use crate::approval::oidc::Oidc;
use crate::approval::server_key::{ServerKey, MIN_SECRET_LEN, SERVER_SECRET};
use crate::clock::SharedClock;
use crate::config::{Config, Scope, ServerConfig};
use crate::db::redis::RedisLedger;
use crate::db::{self as store, SharedStore, StoreOptions};
use crate::deadletter::replay::ReplayContext;
use crate::ingress::Sources;
use crate::ledger::port::LedgerStore;
use crate::ledger::tier::TierEvents;
use crate::ledger::{Tiered, Tiers};
use crate::metrics::{DeclaredNames, Metrics};
use crate::outbox::KillSwitch;
use crate::state::AppState;
use crate::tokens::port::StoredToken;
use crate::tokens::{self, Authenticator};

/// Opens the configured store.
///
/// # Errors
/// The database cannot be reached or the URL is unsupported.
pub async fn open_store(config: &Config, clock: SharedClock) -> Result<SharedStore> {
    let options = StoreOptions {
        max_connections: config.database.pool_size(),
        busy_timeout_ms: config.database.busy_timeout_ms,
        clock,
        use_db_clock: true,
        redaction: Arc::new(config.redactor()),
        ledger: Arc::new(config.ledger.clone()),
    };
    let group = store::sqlite::GroupCommitOptions {
        max_batch: config.database.group_commit_max_batch,
        max_wait: std::time::Duration::from_micros(config.database.group_commit_max_wait_us),
    };
    let url = &config.database.url;
    match store::connect_with(url, options, group).await {
        Ok(store) => Ok(store),
        Err(err) => {
            // A pool says only "timed out"; one direct try names the cause
            // (refused, authentication, unknown database, read-only).
            let cause = match crate::db::probe::probe(url).await {
                Err(cause) => format!(" ({cause})"),
                Ok(_) => String::new(),
            };
            Err(anyhow::Error::new(err).context(format!(
                "opening database {}{cause}",
                crate::config::redact_url(url)
            )))
        }
    }
}

/// The first-start admin token, made and stored (its digest) when no
/// stored token works (none yet, or all revoked or expired).
async fn first_start_token(
    store: &SharedStore,
    now: crate::clock::Millis,
) -> Result<Option<String>> {
    let stored = store.stored_tokens().await?;
    let live = stored
        .iter()
        .any(|t| t.revoked_at.is_none() && t.expires_at.is_none_or(|at| at > now));
    if live {
        return Ok(None);
    }
    let token = tokens::generate_token();
    let digest = tokens::digest(&token);
    let entry = StoredToken {
        id: tokens::id_of(&digest),
        digest,
        subject: "admin".into(),
        scopes: vec![Scope::Admin.as_str().into()],
        roles: vec![],
        namespaces: None,
        created_by: None,
        created_at: now,
        expires_at: None,
        revoked_at: None,
    };
    store.insert_token(&entry).await?;
    Ok(Some(token))
}

/// Builds the app around a migrated store. When no token is configured and
/// none is stored yet, creates one admin token, stores its digest, and
/// returns the token so the caller can show it once.
///
/// # Errors
/// Reading or writing stored tokens failed.
pub async fn build_state(
    config: Config,
    store: SharedStore,
    clock: SharedClock,
) -> Result<(AppState, Option<String>)> {
    let bootstrap = if config.tokens.is_empty() {
        first_start_token(&store, clock.now_ms()).await?
    } else {
        // Once tokens are configured, the first-start token is deleted: if
        // `[[tokens]]` is emptied later, a new one is made and shown, and
        // the old one (perhaps still in a shell history) never works again.
        // Tokens made at run time stay.
        let retired = store.delete_stored_tokens().await?;
        if retired > 0 {
            tracing::warn!(
                retired,
                "[[tokens]] is configured: the first-start admin token is deleted"
            );
        }
        None
    };
    let token_store: Arc<dyn crate::tokens::port::TokenStore> = store.clone();
    let auth = Authenticator::new(&config.tokens, token_store, clock.clone());
    let sources = Sources::prepare(&config.sources, &config.targets).map_err(anyhow::Error::msg)?;
    let schemas = crate::approval::operation::output_schemas(&config.operations)
        .map_err(anyhow::Error::msg)?;
    let proxies = crate::proxy::Proxies::prepare(&config.proxies, &config.targets)
        .map_err(anyhow::Error::msg)?;
    let wake = Arc::new(Notify::new());
    let replay = ReplayContext::new(
        store.clone(),
        &config.operations,
        &config.dead_letters,
        wake.clone(),
        Arc::new(config.redactor()),
    );
    let metrics = Metrics::from_config(&config.metrics, declared_names(&config));
    let server_key = server_key(&config.server, &store).await?;
    let metrics = Arc::new(metrics);
    let (runs, redis, tiers) = tiers(&config, &store, &clock, metrics.clone())?;
    let oidc = oidc(&config, &clock)?;
    let state = AppState::new(crate::state::Shared {
        runs,
        redis,
        tiers,
        schemas: Arc::new(schemas),
        wake,
        kill_switch: KillSwitch::new(store.clone()),
        sources: Arc::new(sources),
        refused: Arc::default(),
        logbook: crate::ingress::Logbook::spawn(store.clone()),
        proxies: Arc::new(proxies),
        store,
        auth: Arc::new(auth),
        metrics,
        config: Arc::new(config),
        clock,
        replay,
        server_key,
        oidc,
    });
    Ok((state, bootstrap))
}

/// The OpenID provider of `[approvals.oidc]`, when configured.
fn oidc(config: &Config, clock: &SharedClock) -> Result<Option<Arc<Oidc>>> {
    let (Some(section), Some(base)) = (&config.approvals.oidc, config.server.public_base()) else {
        return Ok(None);
    };
    let oidc = Oidc::new(section, &base, clock.clone()).map_err(anyhow::Error::msg)?;
    Ok(Some(Arc::new(oidc)))
}

/// The ledger's port for the API, the Redis tier's store (when a
/// namespace is on it) and the namespaces' tiers.
type TierParts = (Arc<dyn LedgerStore>, Option<Arc<RedisLedger>>, Tiers);

/// The ledger's port for the API, sending each namespace to its tier,
/// and the Redis tier's store when a namespace is on it.
fn tiers(
    config: &Config,
    store: &SharedStore,
    clock: &SharedClock,
    events: Arc<dyn TierEvents>,
) -> Result<TierParts> {
    let tiers = Tiers::of(&config.ledger);
    let redis = if tiers.any_redis() {
        let redis = RedisLedger::new(
            &config.redis,
            clock.clone(),
            Arc::new(config.ledger.clone()),
            Arc::new(config.redactor()),
        )?;
        Some(Arc::new(redis))
    } else {
        None
    };
    let runs = Arc::new(Tiered {
        sql: store.clone(),
        redis: redis.clone().map(|r| -> Arc<dyn LedgerStore> { r }),
        tiers: tiers.clone(),
        events,
    });
    Ok((runs, redis, tiers))
}

/// The key of `approve_by_exception`'s human sample: the secret in the
/// variable `server.secret_env` names, or the one stored at the first
/// start (generated then).
async fn server_key(server: &ServerConfig, store: &SharedStore) -> Result<ServerKey> {
    if let Some(var) = &server.secret_env {
        let secret = std::env::var(var)
            .with_context(|| format!("server.secret_env names {var}, which is not set"))?;
        if secret.len() < MIN_SECRET_LEN {
            anyhow::bail!("the server secret in {var} must be at least {MIN_SECRET_LEN} bytes");
        }
        return Ok(ServerKey::new(secret.as_bytes()));
    }
    let stored = store
        .server_secret(SERVER_SECRET, &ServerKey::generate_secret())
        .await?;
    Ok(ServerKey::new(stored.as_bytes()))
}

/// The names the metrics' label bounds always admit.
fn declared_names(config: &Config) -> DeclaredNames {
    let names = |list: &mut dyn Iterator<Item = &String>| list.cloned().collect();
    DeclaredNames {
        sources: names(&mut config.sources.iter().map(|s| &s.name)),
        targets: names(&mut config.targets.iter().map(|t| &t.name)),
        // The ingress forwards under an operation of their own.
        operations: names(&mut config.operations.iter().map(|o| &o.name))
            .into_iter()
            .chain([crate::ingress::FORWARD_OPERATION.to_owned()])
            .collect(),
    }
}
