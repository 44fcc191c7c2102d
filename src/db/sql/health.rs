//! Target health's SQL (DESIGN.md §4): one row per target that ever left
//! `healthy`, read by every lease and written by the dispatchers' verdicts
//! and the operators' enable/disable. Times are bound from the node's clock.

use super::Dialect;

/// The `target_health` columns, in [`HealthRow`](crate::db::rows::HealthRow) order.
const COLUMNS: &str = "target, state, failures, pauses, paused_at, paused_until, probe_owner, \
    probe_expires_at, paused_ms, cause, changed_by, changed_at";

/// The target-health statements, spelled for one backend.
#[derive(Debug, Clone)]
pub struct HealthStatements {
    /// Every target's row.
    pub all: String,
    /// The rows of targets that are not healthy (the lease's gate).
    pub not_healthy: String,
    /// Adds a healthy row for a target that has none. Binds: target, now.
    pub ensure: String,
    /// One target's row, locked for the change that follows (PostgreSQL).
    /// Binds: target.
    pub lock: String,
    /// Writes a target's row. Binds the columns in order.
    pub upsert: String,
    /// Takes the half-open probe of a target whose cool-down (or whose
    /// last probe's hold) has ended; returns the row when taken, nothing
    /// when another dispatcher took it first. Binds: now, target, owner,
    /// probe_expires_at.
    pub claim_probe: String,
    /// Gives a probe back that found nothing to send. Binds: target, owner.
    pub unclaim_probe: String,
    /// The cluster-wide rate and concurrency (PostgreSQL only).
    pub limits: Option<LimitStatements>,
}

/// The statements of the cluster-wide limits, run in the lease
/// transaction: the target's bucket row is locked first, so every other
/// lease of the target (on any instance) waits for this one to commit.
#[derive(Debug, Clone)]
pub struct LimitStatements {
    /// Adds a full bucket for a target that has none. Binds: target,
    /// tokens_milli, now.
    pub ensure: String,
    /// The target's bucket, locked. Binds: target.
    pub lock: String,
    /// The target's effects in flight now, every instance's. Binds: target.
    pub in_flight: String,
    /// Stores the bucket after the lease. Binds: target, tokens_milli, refilled_at.
    pub spend: String,
}

impl HealthStatements {
    /// The statements spelled for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        let for_update = match dialect {
            Dialect::Sqlite => "",
            Dialect::Postgres => " FOR UPDATE",
        };
        let set: Vec<String> = COLUMNS
            .split(", ")
            .skip(1)
            .map(|c| format!("{c} = excluded.{c}"))
            .collect();
        Self {
            all: format!("SELECT {COLUMNS} FROM target_health ORDER BY target"),
            not_healthy: format!("SELECT {COLUMNS} FROM target_health WHERE state <> 'healthy'"),
            ensure: "INSERT INTO target_health (target, state, changed_by, changed_at) \
                 VALUES ($1, 'healthy', '-', $2) ON CONFLICT (target) DO NOTHING"
                .into(),
            lock: format!("SELECT {COLUMNS} FROM target_health WHERE target = $1{for_update}"),
            upsert: format!(
                "INSERT INTO target_health ({COLUMNS}) \
                 VALUES ({}) ON CONFLICT (target) DO UPDATE SET {}",
                super::placeholders(1, 12),
                set.join(", ")
            ),
            claim_probe: format!(
                "UPDATE target_health SET state = 'probing', probe_owner = $3, \
                     probe_expires_at = $4 \
                 WHERE target = $2 AND ((state = 'paused' AND paused_until <= $1) \
                     OR (state = 'probing' AND probe_expires_at <= $1)) \
                 RETURNING {COLUMNS}"
            ),
            unclaim_probe: "UPDATE target_health SET state = 'paused', probe_owner = NULL, \
                     probe_expires_at = NULL \
                 WHERE target = $1 AND state = 'probing' AND probe_owner = $2"
                .into(),
            limits: (dialect == Dialect::Postgres).then(|| LimitStatements {
                ensure: "INSERT INTO target_limits (target, tokens_milli, refilled_at) \
                     VALUES ($1, $2, $3) ON CONFLICT (target) DO NOTHING"
                    .into(),
                lock: "SELECT tokens_milli, refilled_at FROM target_limits WHERE target = $1 \
                     FOR UPDATE"
                    .into(),
                in_flight: "SELECT COUNT(*) FROM effects WHERE state = 'sending' AND target = $1"
                    .into(),
                spend: "UPDATE target_limits SET tokens_milli = $2, refilled_at = $3 \
                     WHERE target = $1"
                    .into(),
            }),
        }
    }
}
