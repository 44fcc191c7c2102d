//! Retention (DESIGN.md §8): terminal runs older than their window are
//! archived to JSONL, then slimmed to tombstones; tombstones older than
//! their longer window are deleted with an audit checkpoint.
//!
//! A sweep, in order:
//! 1. **scrub**: effect bodies kept verbatim to be forwarded are replaced
//!    by their redacted form once the effect is done (completed or
//!    cancelled, or its run ended completed / failed_terminal);
//! 2. **archive**: per namespace window, batches of terminal runs
//!    (`completed`, `failed_terminal`, `dead_lettered` whose dead letters
//!    are all resolved; never one with an unresolved dead letter or an
//!    outstanding effect) are written to a JSONL file, fsynced, and only
//!    then slimmed by compare-and-set on their version: the run row keeps
//!    its identity, payload hash, final state, dates and chain head; its
//!    effects, attempts, events, raw deliveries and dead letters go;
//! 3. **delete tombstones** past the tombstone window, in the transaction
//!    that writes an audit checkpoint without them.
//!
//! `processing`, `awaiting_human`, `approved` and `failed_retryable` rows
//! are never selected: every statement names the terminal states.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::clock::Millis;

/// One day in milliseconds.
pub const DAY_MS: i64 = 86_400_000;

/// `[retention]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// Whether `serve` runs the sweeper.
    pub enabled: bool,
    /// Seconds between sweeps in `serve`.
    pub interval_secs: u64,
    /// Terminal runs older than this (since their last change) are archived.
    pub archive_after_days: u32,
    /// Tombstones older than this (since the run's last change) are deleted.
    pub tombstone_days: u32,
    /// Where the JSONL archive files go (created if missing).
    pub archive_dir: PathBuf,
    /// Runs per archive batch (one file and one transaction each).
    pub batch_size: u32,
    /// Per-namespace windows.
    pub overrides: Vec<RetentionOverride>,
    /// Deliveries-log entries older than this are deleted, with the
    /// `duplicate_of` bodies no run took up (an event's other raw
    /// deliveries go with its run's archive).
    pub deliveries_days: u32,
    /// Days a finished run's raw model output is kept (DESIGN.md §6:
    /// shorter than the run's archive window by default); afterwards only
    /// its validity, violations and model identity remain.
    pub output_days: u32,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            interval_secs: 600,
            archive_after_days: 90,
            tombstone_days: 400,
            archive_dir: PathBuf::from("archive"),
            batch_size: 500,
            overrides: Vec::new(),
            deliveries_days: 30,
            output_days: 30,
        }
    }
}

/// `[[retention.overrides]]`: one namespace's windows.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RetentionOverride {
    /// The namespace.
    pub namespace: String,
    /// Its archive window (default: the global one).
    pub archive_after_days: Option<u32>,
    /// Its tombstone window (default: the global one).
    pub tombstone_days: Option<u32>,
}

impl RetentionConfig {
    /// Checks the windows; errors name the field.
    ///
    /// # Errors
    /// `(field, message)` for the first bad field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let err = |f: &str, m: &str| Err((format!("retention.{f}"), m.to_owned()));
        if self.interval_secs == 0 {
            return err("interval_secs", "must be positive");
        }
        if !(1..=100_000).contains(&self.batch_size) {
            return err("batch_size", "must be between 1 and 100000");
        }
        if self.deliveries_days == 0 {
            return err("deliveries_days", "must be positive");
        }
        if self.archive_dir.as_os_str().is_empty() {
            return err("archive_dir", "must name a directory");
        }
        if self.output_days == 0 {
            return err("output_days", "must be at least 1");
        }
        let mut seen = std::collections::HashSet::new();
        for (i, o) in self.overrides.iter().enumerate() {
            let at = |f: &str| format!("overrides[{i}].{f}");
            if crate::ledger::Namespace::parse(o.namespace.clone()).is_err() {
                return err(&at("namespace"), "is not a valid namespace");
            }
            if !seen.insert(&o.namespace) {
                return err(&at("namespace"), "is listed twice");
            }
            let (a, t) = self.windows(&o.namespace);
            if a == 0 || t <= a {
                return err(
                    &at("tombstone_days"),
                    "the tombstone window must be longer than a positive archive window",
                );
            }
        }
        if self.archive_after_days == 0 || self.tombstone_days <= self.archive_after_days {
            return err(
                "tombstone_days",
                "must be longer than archive_after_days, which must be positive",
            );
        }
        Ok(())
    }

    /// `(archive_after_days, tombstone_days)` for a namespace.
    pub fn windows(&self, namespace: &str) -> (u32, u32) {
        let o = self.overrides.iter().find(|o| o.namespace == namespace);
        (
            o.and_then(|o| o.archive_after_days)
                .unwrap_or(self.archive_after_days),
            o.and_then(|o| o.tombstone_days)
                .unwrap_or(self.tombstone_days),
        )
    }

    /// One selection per window: each override's namespace alone, then
    /// every other namespace with the global windows. `tombstones` picks the
    /// tombstone window instead of the archive window.
    pub fn selections(&self, now: Millis, tombstones: bool) -> Vec<Selection> {
        let limit = i64::from(self.batch_size);
        let cutoff = |(archive, tomb): (u32, u32)| {
            now - i64::from(if tombstones { tomb } else { archive }) * DAY_MS
        };
        let mut out: Vec<Selection> = self
            .overrides
            .iter()
            .map(|o| Selection {
                only: Some(o.namespace.clone()),
                exclude: Vec::new(),
                cutoff: cutoff(self.windows(&o.namespace)),
                limit,
            })
            .collect();
        out.push(Selection {
            only: None,
            exclude: self.overrides.iter().map(|o| o.namespace.clone()).collect(),
            cutoff: cutoff((self.archive_after_days, self.tombstone_days)),
            limit,
        });
        out
    }
}

/// Which runs a retention statement may pick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// Only this namespace…
    pub only: Option<String>,
    /// …or every namespace but these.
    pub exclude: Vec<String>,
    /// Runs whose last change is older than this.
    pub cutoff: Millis,
    /// At most this many.
    pub limit: i64,
}

/// A run picked by retention, with the version its slimming is guarded by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunStamp {
    /// Namespace.
    pub namespace: String,
    /// Key.
    pub key: String,
    /// Fencing version when picked.
    pub version: i64,
    /// State when picked.
    pub state: String,
    /// Last change.
    pub updated_at: Millis,
}

/// Everything stored about one run, as JSON rows per table.
#[derive(Debug, Clone, PartialEq)]
pub struct RunMaterial {
    /// The run as picked.
    pub stamp: RunStamp,
    /// `(table, rows)`: `runs` first, then every table that belongs to it.
    pub tables: Vec<(String, Vec<Map<String, Value>>)>,
}

impl RunMaterial {
    /// The rows of one table.
    pub fn rows(&self, table: &str) -> &[Map<String, Value>] {
        self.tables
            .iter()
            .find(|(t, _)| t == table)
            .map_or(&[], |(_, rows)| rows.as_slice())
    }

    /// The text `id`s of one table's rows.
    pub fn ids(&self, table: &str) -> Vec<String> {
        self.rows(table)
            .iter()
            .filter_map(|r| r.get("id")?.as_str().map(str::to_owned))
            .collect()
    }

    /// The highest audit sequence number archived.
    pub fn max_seq(&self) -> i64 {
        self.rows("audit_events")
            .iter()
            .filter_map(|r| r.get("seq")?.as_i64())
            .max()
            .unwrap_or(0)
    }
}

/// What one sweep did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    /// Effect bodies replaced by their redacted form.
    pub scrubbed: u64,
    /// Runs written to archive files.
    pub archived: u64,
    /// Runs slimmed to tombstones.
    pub slimmed: u64,
    /// Tombstones deleted.
    pub tombstones_deleted: u64,
    /// Idempotency-Key proxy answers deleted after their window.
    pub proxy_answers_deleted: u64,
    /// Deliveries-log entries deleted after `deliveries_days`.
    pub deliveries_deleted: u64,
    /// Unclaimed `duplicate_of` bodies deleted after `deliveries_days`.
    pub duplicate_bodies_deleted: u64,
    /// Resolved dead letters archived and deleted at their retention
    /// deadline (`dead_letters.retention_days` after resolution).
    pub dead_letters_expired: u64,
    /// Raw model outputs of finished runs erased after `output_days`.
    pub outputs_expired: u64,
    /// Archive files written.
    pub files: Vec<String>,
    /// Dry run: nothing was written.
    pub dry_run: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_get_their_own_selection() {
        let config = RetentionConfig {
            overrides: vec![RetentionOverride {
                namespace: "stripe".into(),
                archive_after_days: Some(30),
                tombstone_days: None,
            }],
            ..RetentionConfig::default()
        };
        config.validate().unwrap();
        let now = 1_000 * DAY_MS;
        let s = config.selections(now, false);
        assert_eq!(s[0].only.as_deref(), Some("stripe"));
        assert_eq!(s[0].cutoff, now - 30 * DAY_MS);
        assert_eq!(s[1].exclude, vec!["stripe".to_owned()]);
        assert_eq!(s[1].cutoff, now - 90 * DAY_MS);
        assert_eq!(config.selections(now, true)[0].cutoff, now - 400 * DAY_MS);
    }

    #[test]
    fn windows_must_nest() {
        let bad = RetentionConfig {
            tombstone_days: 30,
            ..RetentionConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().0, "retention.tombstone_days");
    }
}
