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

/// Parses a duration written as a whole number and a unit (`90s`, `15m`,
/// `2h`, `7d`) into milliseconds; `None` for anything else (no sign, no
/// fraction, no other unit, no overflow). Dead-letter ages and the
/// ledger's recovery windows are both written this way.
pub fn parse_duration_ms(text: &str) -> Option<Millis> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = text.split_at(split);
    let n: i64 = n.parse().ok()?;
    let ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(ms)
}

/// Writes milliseconds back in the largest unit that divides them
/// (`3600000` → `1h`), the inverse of [`parse_duration_ms`] for whole
/// seconds.
pub fn format_duration_ms(ms: Millis) -> String {
    for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000)] {
        if ms != 0 && ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{}s", ms / 1_000)
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
    fn durations_parse_with_units_only_and_format_back() {
        assert_eq!(parse_duration_ms("90s"), Some(90_000));
        assert_eq!(parse_duration_ms("24h"), Some(86_400_000));
        for bad in ["", "h", "10", "5w", "-1h", "1.5h", "99999999999999999d"] {
            assert_eq!(parse_duration_ms(bad), None, "{bad}");
        }
        for text in ["1h", "1d", "7d", "90s", "15m", "0s"] {
            assert_eq!(format_duration_ms(parse_duration_ms(text).unwrap()), text);
        }
    }

    #[test]
    fn converts_millis_to_datetime() {
        assert_eq!(to_datetime(0).to_rfc3339(), "1970-01-01T00:00:00+00:00");
    }
}
