//! The Idempotency-Key proxy (DESIGN.md §10): `ANY /proxy/{name}/{path}`
//! forwards to a configured target with the semantics of
//! draft-ietf-httpapi-idempotency-key-header, so a synchronous call a
//! workflow retries is made at most once.
//!
//! Each key is a run in the ledger (namespace `proxy:{name}`, key
//! `{subject}:{key}`), so the console, the timeline, audit, metrics,
//! retention and dead letters work for it as for any run. A stored
//! answer lives beside its run ([`port::ProxyStore`]) for the proxy's
//! `retention` window. A forward whose outcome is unknown dead-letters
//! its run (`unknown_outcome`); an operator resolves it as found (the run
//! closes) or not found (the run is released and the next request with
//! the key is forwarded).
//!
//! The pieces: [`config`] (`[[proxies]]`), [`key`] (the header's syntax
//! and the scoped ledger key), [`request`] (fingerprint, upstream URL and
//! headers), [`answer`] (what is kept and replayed), [`recent`] (the
//! answers this process completed lately, replayed from memory),
//! [`service`] (the use case), [`forward`] (one forward and how it
//! settles the key), [`resolve`] (the operator's decision on an unknown
//! key).

pub mod answer;
pub mod config;
pub mod error;
mod forward;
pub mod key;
pub mod port;
pub mod prepared;
pub mod recent;
pub mod request;
pub mod resolve;
pub mod service;

pub use answer::Answer;
pub use config::{InFlight, KeyPolicy, ProxyConfig};
pub use error::ProxyError;
pub use port::ProxyStore;
pub use prepared::Proxies;
pub use service::{Caller, Proxy, Reply};

/// Every proxy namespace starts with this; such namespaces belong to the
/// proxy, and the claim API refuses them.
pub const NAMESPACE_PREFIX: &str = "proxy:";

/// The longest wait for one of the target's send slots, in milliseconds.
pub const SLOT_WAIT_MS: u64 = 5_000;

/// Room in a forward's lease to record its answer, in milliseconds.
pub const RECORD_MARGIN_MS: u64 = 5_000;
