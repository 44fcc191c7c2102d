//! `[ledger]`: the lease bounds every claim and renewal keeps to.

use serde::{Deserialize, Serialize};

use super::LeaseMs;

/// `[ledger]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LedgerConfig {
    /// Lease length when a claim names none, in milliseconds.
    pub default_lease_ms: i64,
    /// Longest lease a claim or renewal may ask for, in milliseconds.
    pub max_lease_ms: i64,
    /// Longest total life of one owner's lease across renewals, in milliseconds.
    pub max_lease_life_ms: i64,
    /// `retry_after` told to duplicates of runs awaiting a human or
    /// approved, in milliseconds.
    pub in_flight_retry_after_ms: i64,
}

impl LedgerConfig {
    /// Checks that the lease bounds nest: default ≤ longest ≤ longest life.
    ///
    /// # Errors
    /// The first bad field and what is wrong with it.
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.default_lease_ms < LeaseMs::MIN {
            return Err((
                "ledger.default_lease_ms".into(),
                format!("must be at least {}", LeaseMs::MIN),
            ));
        }
        if self.max_lease_ms < self.default_lease_ms {
            return Err((
                "ledger.max_lease_ms".into(),
                "must be at least ledger.default_lease_ms".into(),
            ));
        }
        if self.max_lease_life_ms < self.max_lease_ms {
            return Err((
                "ledger.max_lease_life_ms".into(),
                "must be at least ledger.max_lease_ms".into(),
            ));
        }
        if self.in_flight_retry_after_ms < 0 {
            return Err((
                "ledger.in_flight_retry_after_ms".into(),
                "must not be negative".into(),
            ));
        }
        Ok(())
    }
}

impl Default for LedgerConfig {
    fn default() -> Self {
        Self {
            default_lease_ms: 30_000,
            max_lease_ms: 15 * 60_000,
            max_lease_life_ms: 60 * 60_000,
            in_flight_retry_after_ms: 30_000,
        }
    }
}
