//! Injected time.
//!
//! Leases, expiry and backoff read the time through [`Clock`] so tests can
//! move it deterministically ([`ManualClock`]). Times are whole milliseconds
//! since the Unix epoch, the unit both database backends store.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time in milliseconds since the Unix epoch.
    fn now_ms(&self) -> Millis;
}

/// A shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

/// The operating system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        Utc::now().timestamp_millis()
    }
}

/// A clock that only moves when told to; for tests.
#[derive(Debug)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    /// A clock stopped at `start_ms`.
    pub fn new(start_ms: Millis) -> Self {
        Self {
            now: AtomicI64::new(start_ms),
        }
    }

    /// Moves the clock forward by `ms` milliseconds.
    pub fn advance_ms(&self, ms: i64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.now.load(Ordering::SeqCst)
    }
}

/// Converts stored milliseconds to a UTC date-time (saturating on overflow).
pub fn to_datetime(ms: Millis) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let clock = ManualClock::new(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        clock.advance_ms(250);
        assert_eq!(clock.now_ms(), 1_250);
    }

    #[test]
    fn converts_millis_to_datetime() {
        assert_eq!(to_datetime(0).to_rfc3339(), "1970-01-01T00:00:00+00:00");
    }
}
