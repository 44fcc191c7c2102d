//! `[ledger]`: the lease bounds every claim and renewal keeps to, and the
//! recovery rules (the reclaim budget and the stranded window) with their
//! per-namespace overrides (`[[ledger.namespaces]]`).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{LeaseMs, Namespace, Recovery};
use crate::clock::{format_duration_ms, parse_duration_ms, Millis};

/// A duration written as a number and a unit: `90s`, `15m`, `2h`, `7d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span(pub Millis);

impl Serialize for Span {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration_ms(self.0))
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration_ms(&text).map(Span).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{text:?} is not a duration: write a number and a unit, e.g. 90s, 15m, 2h or 7d"
            ))
        })
    }
}

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
    /// A `processing` run whose lease expired this long ago and that
    /// nobody reclaimed is dead-lettered as `stranded`.
    pub stranded_after: Span,
    /// The most reclaims a run may have (since its first claim or its
    /// last operator release); a `failed_retryable` run that used them all
    /// is dead-lettered as `reclaim_budget_exhausted`.
    pub max_reclaims: i64,
    /// How long after its first claim (or last release) a
    /// `failed_retryable` run may still be reclaimed.
    pub retry_window: Span,
    /// Per-namespace recovery rules.
    pub namespaces: Vec<NamespaceRecovery>,
}

/// `[[ledger.namespaces]]`: one namespace's recovery rules (an absent
/// field takes the `[ledger]` value) and the tier its runs live on.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NamespaceRecovery {
    /// The namespace.
    pub namespace: String,
    /// Its stranded window.
    pub stranded_after: Option<Span>,
    /// Its reclaim count.
    pub max_reclaims: Option<i64>,
    /// Its retry window.
    pub retry_window: Option<Span>,
    /// Where its runs live: `sql` (the default) or `redis` (DESIGN.md §9).
    #[serde(default)]
    pub tier: Option<super::tier::Tier>,
}

/// The largest `max_reclaims` accepted (a typo guard, not a design limit).
const MAX_RECLAIMS: i64 = 10_000;

impl LedgerConfig {
    /// Checks that the lease bounds nest (default ≤ longest ≤ longest
    /// life) and that every recovery rule is in range.
    ///
    /// # Errors
    /// The first bad field and what is wrong with it.
    pub fn validate(&self) -> Result<(), (String, String)> {
        self.validate_leases()?;
        check_recovery("ledger", &self.recovery_default())?;
        let mut seen = std::collections::HashSet::new();
        for (i, o) in self.namespaces.iter().enumerate() {
            let at = format!("ledger.namespaces[{i}]");
            if Namespace::parse(o.namespace.clone()).is_err() {
                return Err((format!("{at}.namespace"), "is not a valid namespace".into()));
            }
            if !seen.insert(o.namespace.as_str()) {
                return Err((format!("{at}.namespace"), "is listed twice".into()));
            }
            check_recovery(&at, &self.recovery(&o.namespace))?;
        }
        Ok(())
    }

    fn validate_leases(&self) -> Result<(), (String, String)> {
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

    /// The `[ledger]` recovery rules, before any namespace's override.
    pub fn recovery_default(&self) -> Recovery {
        Recovery {
            stranded_after_ms: self.stranded_after.0,
            max_reclaims: self.max_reclaims,
            retry_window_ms: self.retry_window.0,
        }
    }

    /// The recovery rules of `namespace`.
    pub fn recovery(&self, namespace: &str) -> Recovery {
        let base = self.recovery_default();
        let Some(o) = self.namespaces.iter().find(|o| o.namespace == namespace) else {
            return base;
        };
        Recovery {
            stranded_after_ms: o.stranded_after.map_or(base.stranded_after_ms, |s| s.0),
            max_reclaims: o.max_reclaims.unwrap_or(base.max_reclaims),
            retry_window_ms: o.retry_window.map_or(base.retry_window_ms, |s| s.0),
        }
    }
}

/// One set of recovery rules in range; errors name the field under `at`.
fn check_recovery(at: &str, r: &Recovery) -> Result<(), (String, String)> {
    if r.stranded_after_ms < 1_000 {
        return Err((
            format!("{at}.stranded_after"),
            "must be at least 1s (a stranded run waits for its window)".into(),
        ));
    }
    if !(0..=MAX_RECLAIMS).contains(&r.max_reclaims) {
        return Err((
            format!("{at}.max_reclaims"),
            format!("must be between 0 and {MAX_RECLAIMS}"),
        ));
    }
    if r.retry_window_ms < 1_000 {
        return Err((format!("{at}.retry_window"), "must be at least 1s".into()));
    }
    Ok(())
}

impl Default for LedgerConfig {
    fn default() -> Self {
        let recovery = Recovery::default();
        Self {
            default_lease_ms: 30_000,
            max_lease_ms: 15 * 60_000,
            max_lease_life_ms: 60 * 60_000,
            in_flight_retry_after_ms: 30_000,
            stranded_after: Span(recovery.stranded_after_ms),
            max_reclaims: recovery.max_reclaims,
            retry_window: Span(recovery.retry_window_ms),
            namespaces: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Result<LedgerConfig, String> {
        toml::from_str(toml_text).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_the_design_s_and_namespaces_override_them() {
        let c = LedgerConfig::default();
        assert_eq!(c.recovery("any"), Recovery::default());
        let c = parse(
            "max_reclaims = 3\n[[namespaces]]\nnamespace = \"stripe\"\nstranded_after = \"30m\"\n",
        )
        .unwrap();
        c.validate().unwrap();
        let stripe = c.recovery("stripe");
        assert_eq!(stripe.stranded_after_ms, 30 * 60_000);
        assert_eq!(stripe.max_reclaims, 3, "absent fields take [ledger]'s");
        assert_eq!(stripe.retry_window_ms, 24 * 3_600_000);
    }

    #[test]
    fn bad_values_name_their_field() {
        let err = parse("stranded_after = \"an hour\"").unwrap_err();
        assert!(err.contains("not a duration"), "{err}");
        let field = |text: &str| parse(text).unwrap().validate().unwrap_err().0;
        assert_eq!(field("max_reclaims = -1"), "ledger.max_reclaims");
        assert_eq!(field("retry_window = \"0s\""), "ledger.retry_window");
        assert_eq!(
            field("[[namespaces]]\nnamespace = \"a\"\nstranded_after = \"0m\"\n"),
            "ledger.namespaces[0].stranded_after"
        );
        assert_eq!(
            field("[[namespaces]]\nnamespace = \"a\"\n[[namespaces]]\nnamespace = \"a\"\n"),
            "ledger.namespaces[1].namespace"
        );
    }
}
