//! Unauthenticated deliveries, kept only in memory (DESIGN.md §3): a
//! bounded ring per configured source of the latest refusals (signature
//! refused, body over the limit), so an operator can see a provider whose
//! secret rotated without anyone being able to fill the database by
//! posting garbage. The counters (`oncegate_deliveries_total`,
//! `oncegate_signature_failures_total`) keep the totals; each process keeps
//! its own ring, and a restart empties it.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use super::log::DeliveryOutcome;
use crate::clock::Millis;

/// Refusals kept per source; older ones fall out.
pub const RING_PER_SOURCE: usize = 100;

/// One refused delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The configured source.
    pub source: String,
    /// `signature_refused` or `too_large`.
    pub outcome: DeliveryOutcome,
    /// The HTTP status answered.
    pub status: u16,
    /// Why (never a secret or a signature).
    pub reason: String,
    /// SHA-256 of the body, when it was read.
    pub payload_hash: Option<String>,
    /// Size of the body in bytes (as read, or as declared when too large).
    pub body_bytes: i64,
    /// When it arrived.
    pub received_at: Millis,
}

/// The rings, by source name (only configured sources get one, so the map
/// is bounded by the configuration).
#[derive(Debug, Default)]
pub struct RefusedRing {
    rings: Mutex<HashMap<String, VecDeque<Refused>>>,
}

impl RefusedRing {
    /// Keeps `refused`, pushing out the source's oldest when full.
    pub fn push(&self, refused: Refused) {
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let ring = rings.entry(refused.source.clone()).or_default();
        if ring.len() == RING_PER_SOURCE {
            ring.pop_front();
        }
        ring.push_back(refused);
    }

    /// The kept refusals, newest first, of `source` (or every source),
    /// at most `limit`.
    pub fn latest(&self, source: Option<&str>, limit: usize) -> Vec<Refused> {
        let rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<Refused> = rings
            .iter()
            .filter(|(name, _)| source.is_none_or(|s| s == name.as_str()))
            .flat_map(|(_, ring)| ring.iter().cloned())
            .collect();
        out.sort_by_key(|r| std::cmp::Reverse(r.received_at));
        out.truncate(limit);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(source: &str, at: Millis) -> Refused {
        Refused {
            source: source.into(),
            outcome: DeliveryOutcome::SignatureRefused,
            status: 401,
            reason: "no signature matched".into(),
            payload_hash: None,
            body_bytes: 2,
            received_at: at,
        }
    }

    #[test]
    fn each_source_keeps_only_its_latest() {
        let ring = RefusedRing::default();
        for at in 0..(RING_PER_SOURCE as i64 + 50) {
            ring.push(refused("stripe", at));
        }
        ring.push(refused("github", 10_000));
        let stripe = ring.latest(Some("stripe"), usize::MAX);
        assert_eq!(stripe.len(), RING_PER_SOURCE);
        assert_eq!(stripe[0].received_at, RING_PER_SOURCE as i64 + 49);
        assert_eq!(stripe.last().unwrap().received_at, 50);
        let all = ring.latest(None, 3);
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].source, "github");
    }
}
