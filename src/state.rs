//! The state every HTTP handler shares: the store, the token table, the
//! metrics, the checked configuration, the clock, the prepared sources and
//! schemas, the kill switch and the dispatcher's wake-up.
//!
//! It is its own top-level module because the API, the console and the
//! webhook route all take it while the code that starts the service
//! builds it and imports them: kept beside either, one would import the
//! other back.

use std::sync::Arc;

use crate::clock::SharedClock;
use crate::config::Config;
use crate::db::SharedStore;
use crate::deadletter::replay::ReplayContext;
use crate::ingress::Sources;
use crate::metrics::Metrics;
use crate::outbox::KillSwitch;
use crate::tokens::Authenticator;
use crate::validate::OutputSchemas;

/// What every handler shares: a handle on [`Shared`], so the clone every
/// layer, extractor and task takes per request is one reference count
/// (cloning the parts themselves, a dozen reference counts, was a sixth of
/// the server's CPU on the no-op route).
#[derive(Debug, Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    /// The handle on `shared`.
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The parts behind an [`AppState`].
#[derive(Debug)]
pub struct Shared {
    /// The ledger's storage.
    pub store: SharedStore,
    /// The ledger's port for the API: each namespace's calls go to its
    /// tier (the SQL store, or Redis for `tier = "redis"`).
    pub runs: Arc<dyn crate::ledger::port::LedgerStore>,
    /// The Redis tier's store, when a namespace is on it (`/readyz` pings it).
    pub redis: Option<Arc<crate::db::redis::RedisLedger>>,
    /// Which namespaces are on which tier.
    pub tiers: crate::ledger::Tiers,
    /// Known API tokens.
    pub auth: Arc<Authenticator>,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// The checked configuration.
    pub config: Arc<Config>,
    /// The injected clock.
    pub clock: SharedClock,
    /// Webhook sources, prepared at start.
    pub sources: Arc<Sources>,
    /// Deliveries-log entries on their way to the database, in batches.
    pub logbook: crate::ingress::Logbook,
    /// Unauthenticated deliveries, kept in memory only.
    pub refused: Arc<crate::ingress::RefusedRing>,
    /// Wakes the dispatcher when effects are queued or released.
    pub wake: Arc<tokio::sync::Notify>,
    /// The kill switch as this process sees it (shared with its dispatcher).
    pub kill_switch: KillSwitch,
    /// Compiled output schemas of the operations (the AI step contract).
    pub schemas: Arc<OutputSchemas>,
    /// The Idempotency-Key proxies, prepared at start.
    pub proxies: Arc<crate::proxy::Proxies>,
    /// What dead-letter replays run in (the store, the declared operations,
    /// the dispatcher's wake-up), built once and shared by the API, the
    /// console and the bulk replay runner.
    pub replay: ReplayContext,
    /// Keys `approve_by_exception`'s human sample (a server secret).
    pub server_key: crate::approval::server_key::ServerKey,
    /// The OpenID provider people sign in with, when configured.
    pub oidc: Option<Arc<crate::approval::oidc::Oidc>>,
}

impl Shared {
    /// The ledger's calls over this state.
    pub fn ledger(&self) -> crate::ledger::service::Ledger<'_> {
        crate::ledger::service::Ledger {
            store: self.runs.as_ref(),
            events: self.metrics.as_ref(),
            clock: self.clock.as_ref(),
            config: &self.config.ledger,
        }
    }

    /// The owner's outbox calls over this state.
    pub fn outbox(&self) -> crate::outbox::commit::Outbox<'_> {
        crate::outbox::commit::Outbox {
            store: self.store.as_ref(),
            runs: self.store.as_ref(),
            metrics: &self.metrics,
            wake: &self.wake,
        }
    }

    /// The Idempotency-Key proxy's calls over this state.
    pub fn proxy(&self) -> crate::proxy::Proxy<'_> {
        crate::proxy::Proxy {
            proxies: &self.proxies,
            ledger: self.ledger(),
            store: self.store.as_ref(),
            switch: &self.kill_switch,
            clock: self.clock.as_ref(),
        }
    }

    /// Bulk replay's dry run and job start over this state.
    pub fn bulk_replay(&self) -> crate::deadletter::plan::BulkReplay<'_> {
        crate::deadletter::plan::BulkReplay {
            store: self.store.as_ref(),
            operations: &self.config.operations,
            config: &self.config.dead_letters,
            clock: self.clock.as_ref(),
        }
    }

    /// The intake of webhook deliveries over this state.
    pub fn intake(&self) -> crate::ingress::Intake<'_> {
        crate::ingress::Intake {
            sources: &self.sources,
            store: self.store.as_ref(),
            log: self.store.as_ref(),
            logbook: &self.logbook,
            refused: &self.refused,
            metrics: &self.metrics,
            clock: self.clock.as_ref(),
            wake: &self.wake,
            lease_ms: self.config.ledger.default_lease_ms,
            in_flight_retry_after_ms: self.config.ledger.in_flight_retry_after_ms,
        }
    }

    /// The operator's forwards of logged deliveries over this state.
    pub fn delivery_actions(&self) -> crate::ingress::DeliveryActions<'_> {
        crate::ingress::DeliveryActions {
            sources: &self.sources,
            logbook: &self.logbook,
            deliveries: self.store.as_ref(),
            events: self.store.as_ref(),
            wake: &self.wake,
            lease_ms: self.config.ledger.default_lease_ms,
        }
    }

    /// The owner's gate calls (model output, the gate) over this state.
    pub fn gate(&self) -> crate::approval::gate::Gate<'_> {
        crate::approval::gate::Gate {
            approvals: self.store.as_ref(),
            runs: self.store.as_ref(),
            outputs: self.store.as_ref(),
            operations: &self.config.operations,
            targets: &self.config.targets,
            schemas: &self.schemas,
            public_base: self.config.server.public_base(),
            metrics: &self.metrics,
            clock: self.clock.as_ref(),
            wake: &self.wake,
            sample: &self.server_key,
        }
    }

    /// Who is signed in, sign-in and sign-out, over this state.
    pub fn people(&self) -> crate::approval::people::People<'_> {
        let secure = self.config.server.is_https();
        crate::approval::people::People {
            store: self.store.as_ref(),
            config: &self.config.approvals,
            auth: &self.auth,
            clock: self.clock.as_ref(),
            secure,
            server_key: &self.server_key,
        }
    }

    /// The token use cases (create, list, revoke) over this state.
    pub fn tokens(&self) -> crate::tokens::Tokens<'_> {
        crate::tokens::Tokens {
            store: self.store.as_ref(),
            auth: &self.auth,
            clock: self.clock.as_ref(),
        }
    }

    /// People's decisions on challenges over this state.
    pub fn decisions(&self) -> crate::approval::decide::Decisions<'_> {
        crate::approval::decide::Decisions {
            approvals: self.store.as_ref(),
            runs: self.store.as_ref(),
            metrics: &self.metrics,
            clock: self.clock.as_ref(),
            wake: &self.wake,
        }
    }
}
