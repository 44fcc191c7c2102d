//! The configured proxies, prepared at start: each with its ledger
//! namespace and its target's runtime (the HTTP client that never follows
//! redirects, the target's concurrency slots and rate pacing).

use std::collections::HashMap;
use std::sync::Arc;

use super::recent::RecentAnswers;
use super::ProxyConfig;
use crate::ledger::Namespace;
use crate::outbox::sender::TargetRuntime;
use crate::outbox::TargetConfig;

/// One proxy ready to forward.
#[derive(Debug)]
pub struct Prepared {
    /// Its configuration.
    pub config: ProxyConfig,
    /// `proxy:{name}`.
    pub namespace: Namespace,
    /// Its target's client and limits.
    pub target: Arc<TargetRuntime>,
    /// The answers of its keys this process completed lately.
    pub recent: RecentAnswers,
}

impl Prepared {
    /// How long a forward may hold its key: the target's connect and
    /// request timeouts, the longest wait for a send slot, and room to
    /// record the answer.
    pub fn lease_ms(&self) -> i64 {
        let t = &self.target.config;
        (t.connect_timeout_ms + t.timeout_ms + super::SLOT_WAIT_MS + super::RECORD_MARGIN_MS) as i64
    }
}

/// Every configured proxy by name.
#[derive(Debug, Default)]
pub struct Proxies(HashMap<String, Prepared>);

impl Proxies {
    /// Prepares `proxies`, one target runtime per target they use.
    ///
    /// # Errors
    /// A proxy names no configured target, or a client cannot be built.
    pub fn prepare(proxies: &[ProxyConfig], targets: &[TargetConfig]) -> Result<Self, String> {
        let mut runtimes: HashMap<&str, Arc<TargetRuntime>> = HashMap::new();
        let mut out = HashMap::new();
        for p in proxies {
            let target = match runtimes.get(p.target.as_str()) {
                Some(t) => t.clone(),
                None => {
                    let config = targets
                        .iter()
                        .find(|t| t.name == p.target)
                        .ok_or_else(|| format!("proxy {}: no target {:?}", p.name, p.target))?;
                    let runtime = TargetRuntime::new(config.clone())
                        .map_err(|e| format!("proxy {}: {e}", p.name))?;
                    let runtime = Arc::new(runtime);
                    runtimes.insert(&config.name, runtime.clone());
                    runtime
                }
            };
            let namespace = Namespace::parse(p.namespace()).map_err(|e| e.to_string())?;
            let prepared = Prepared {
                recent: RecentAnswers::new(p.replay_cache_bytes),
                config: p.clone(),
                namespace,
                target,
            };
            out.insert(p.name.clone(), prepared);
        }
        Ok(Self(out))
    }

    /// The proxy named `name`.
    pub fn get(&self, name: &str) -> Option<&Prepared> {
        self.0.get(name)
    }

    /// Whether any proxy is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
