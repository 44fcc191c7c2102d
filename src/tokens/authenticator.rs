//! The table of known tokens: the configured ones in memory, the stored
//! ones (first-start and run-time tokens) looked up in the database by
//! digest, through a short cache.
//!
//! Revocation must reach every instance within seconds (DESIGN.md §5), so
//! a stored token's row is cached for [`CACHE_TTL`] at most: after that a
//! presented token is looked up again, and a revocation made on any other
//! instance is seen. The instance that revokes forgets the row at once.
//! Unknown digests are cached too (for the same time), so a flood of wrong
//! tokens costs one read each per window; the cache holds at most
//! [`CACHE_MAX`] digests and is emptied when full.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq;

use super::port::{StoredToken, TokenStore};
use super::{digest, Namespaces, Principal, Scope, TokenConfig};
use crate::clock::SharedClock;
use crate::ledger::storage::StoreError;

/// How long an instance trusts a stored token's row (revocation and
/// expiry reach it within this time; expiry itself is checked on every
/// request against the row).
pub const CACHE_TTL: Duration = Duration::from_secs(2);

/// The most digests the cache holds.
pub const CACHE_MAX: usize = 10_000;

type Cached = (Instant, Option<StoredToken>);

/// Every known token digest and whom it names.
#[derive(Debug)]
pub struct Authenticator {
    configured: HashMap<String, Principal>,
    store: std::sync::Arc<dyn TokenStore>,
    clock: SharedClock,
    cache: Mutex<HashMap<String, Cached>>,
}

impl Authenticator {
    /// The table of `configured` tokens, with stored ones read from `store`.
    pub fn new(
        configured: &[TokenConfig],
        store: std::sync::Arc<dyn TokenStore>,
        clock: SharedClock,
    ) -> Self {
        let configured = configured
            .iter()
            .map(|t| {
                let principal = Principal {
                    subject: t.subject.clone(),
                    scopes: t.scopes.iter().copied().collect(),
                    roles: t.roles.clone(),
                    namespaces: Namespaces::from_list(t.namespaces.as_deref()),
                };
                (t.digest.clone(), principal)
            })
            .collect();
        Self {
            configured,
            store,
            clock,
            cache: Mutex::default(),
        }
    }

    /// Whether no token is configured (stored ones may still exist).
    pub fn none_configured(&self) -> bool {
        self.configured.is_empty()
    }

    /// The principal a presented token names.
    ///
    /// # Errors
    /// The store failed while looking a stored token up.
    pub async fn authenticate(&self, token: &str) -> Result<Option<Principal>, StoreError> {
        self.by_digest(&digest(token)).await
    }

    /// The principal of a token by its digest (a session's credential):
    /// a configured token, or a stored one neither revoked nor expired.
    ///
    /// # Errors
    /// The store failed while looking a stored token up.
    pub async fn by_digest(&self, digest: &str) -> Result<Option<Principal>, StoreError> {
        if let Some((known, p)) = self.configured.get_key_value(digest) {
            if bool::from(known.as_bytes().ct_eq(digest.as_bytes())) {
                return Ok(Some(p.clone()));
            }
        }
        let Some(row) = self.stored(digest).await? else {
            return Ok(None);
        };
        let now = self.clock.now_ms();
        let live = row.revoked_at.is_none() && row.expires_at.is_none_or(|at| at > now);
        let same = bool::from(row.digest.as_bytes().ct_eq(digest.as_bytes()));
        Ok((live && same).then(|| principal_of(&row)))
    }

    /// Forgets a cached row, so this instance refuses a revoked token at once.
    pub fn forget(&self, digest: &str) {
        self.lock().remove(digest);
    }

    /// The configured tokens, by digest.
    pub fn configured(&self) -> impl Iterator<Item = (&str, &Principal)> {
        self.configured.iter().map(|(d, p)| (d.as_str(), p))
    }

    async fn stored(&self, digest: &str) -> Result<Option<StoredToken>, StoreError> {
        if let Some((at, row)) = self.lock().get(digest) {
            if at.elapsed() < CACHE_TTL {
                return Ok(row.clone());
            }
        }
        let row = self.store.token_by_digest(digest).await?;
        let mut cache = self.lock();
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        cache.insert(digest.to_owned(), (Instant::now(), row.clone()));
        Ok(row)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cached>> {
        // A panic while holding the lock leaves a plain map: still usable.
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The principal a stored token names.
pub fn principal_of(row: &StoredToken) -> Principal {
    Principal {
        subject: row.subject.clone(),
        scopes: row.scopes.iter().filter_map(|s| Scope::parse(s)).collect(),
        roles: row.roles.clone(),
        namespaces: Namespaces::from_list(row.namespaces.as_deref()),
    }
}
