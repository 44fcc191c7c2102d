//! The SQL of retention (archive, slim, tombstones, scrubbing) and of the
//! maintenance leases that keep periodic jobs to one instance, written
//! once for both backends. Slimming the run row itself is in [`super::runs`].

use super::runs::TERMINAL;

/// The tables that belong to a run, archived and slimmed with it: name and
/// the `SELECT *` that reads one run's rows (binds: namespace, key). A
/// table added later that belongs to runs (approval challenges, …) joins
/// this list and the `slim_*` statements of [`AuditStatements`].
pub const RUN_TABLES: &[(&str, &str)] = &[
    (
        "effects",
        "SELECT * FROM effects WHERE namespace = $1 AND run_key = $2 ORDER BY created_at, id",
    ),
    (
        "effect_attempts",
        "SELECT a.* FROM effect_attempts a JOIN effects e ON e.id = a.effect_id \
         WHERE e.namespace = $1 AND e.run_key = $2 ORDER BY a.effect_id, a.attempt",
    ),
    (
        "audit_events",
        "SELECT * FROM audit_events WHERE namespace = $1 AND run_key = $2 ORDER BY seq",
    ),
    (
        "raw_events",
        "SELECT * FROM raw_events WHERE source = $1 AND event_id = $2 ORDER BY received_at, id",
    ),
    (
        "dead_letters",
        "SELECT * FROM dead_letters WHERE namespace = $1 AND run_key = $2 ORDER BY created_at, id",
    ),
    (
        "challenges",
        "SELECT * FROM challenges WHERE namespace = $1 AND run_key = $2 ORDER BY created_at, id",
    ),
    (
        "run_outputs",
        "SELECT * FROM run_outputs WHERE namespace = $1 AND run_key = $2 ORDER BY attempt",
    ),
];

/// What a finished run's raw model output reads after `retention.output_days`.
pub const EXPIRED_OUTPUT: &str = "\"[expired]\"";

/// The retention statements (the same on both backends).
#[derive(Debug, Clone)]
pub struct RetentionStatements {
    /// One run, whole. Binds: namespace, key.
    pub run_row: String,
    /// Deletes a slimmed run's attempts. Binds: namespace, key.
    pub slim_attempts: String,
    /// Deletes a slimmed run's effects. Binds: namespace, key.
    pub slim_effects: String,
    /// Deletes a slimmed run's archived events. Binds: namespace, key, max seq.
    pub slim_events: String,
    /// Deletes a slimmed run's resolved dead letters whose retention
    /// deadline passed (the rest stay until theirs). Binds: namespace, key, now.
    pub slim_dead_letters: String,
    /// Resolved dead letters past their retention deadline, oldest first.
    /// Binds: now, limit.
    pub expired_dead_letters: String,
    /// Deletes one resolved dead letter past its deadline. Binds: id, now.
    pub remove_dead_letter: String,
    /// Erases finished runs' raw model output recorded before a cutoff.
    /// Binds: cutoff.
    pub expire_outputs: String,
    /// Deletes a slimmed run's approval challenges. Binds: namespace, key.
    pub slim_challenges: String,
    /// Deletes a slimmed run's model outputs. Binds: namespace, key.
    pub slim_outputs: String,
    /// Deletes a slimmed run's kept proxy answer (a replay cache, never
    /// archived: the run's result keeps its status, size and digest).
    /// Binds: namespace, key.
    pub slim_proxy_answer: String,
    /// Deletes one archived raw delivery. Binds: id.
    pub slim_raw_event: String,
    /// Replaces one effect's body. Binds: id, body, now.
    pub scrub: String,
    /// Takes or renews a maintenance lease. Binds: name, owner, now, lease_ms.
    pub take_job: String,
    /// Releases a maintenance lease. Binds: name, owner.
    pub release_job: String,
}

impl RetentionStatements {
    /// The statements.
    pub fn new() -> Self {
        Self {
            run_row: "SELECT * FROM runs WHERE namespace = $1 AND run_key = $2".into(),
            slim_attempts: "DELETE FROM effect_attempts WHERE effect_id IN \
                 (SELECT id FROM effects WHERE namespace = $1 AND run_key = $2)"
                .into(),
            slim_effects: "DELETE FROM effects WHERE namespace = $1 AND run_key = $2".into(),
            slim_events: "DELETE FROM audit_events WHERE namespace = $1 AND run_key = $2 \
                 AND seq <= $3"
                .into(),
            slim_dead_letters: "DELETE FROM dead_letters WHERE namespace = $1 AND run_key = $2 \
                 AND resolved_at IS NOT NULL AND retain_until <= $3"
                .into(),
            expired_dead_letters: "SELECT * FROM dead_letters WHERE resolved_at IS NOT NULL \
                 AND retain_until <= $1 ORDER BY retain_until, id LIMIT $2"
                .into(),
            expire_outputs: format!(
                "UPDATE run_outputs SET output = '{EXPIRED_OUTPUT}' \
                 WHERE created_at < $1 AND output <> '{EXPIRED_OUTPUT}' \
                   AND EXISTS (SELECT 1 FROM runs r WHERE r.namespace = run_outputs.namespace \
                       AND r.run_key = run_outputs.run_key \
                       AND r.state IN ('completed', 'failed_terminal'))"
            ),
            remove_dead_letter: "DELETE FROM dead_letters WHERE id = $1 \
                 AND resolved_at IS NOT NULL AND retain_until <= $2"
                .into(),
            slim_raw_event: "DELETE FROM raw_events WHERE id = $1".into(),
            slim_challenges: "DELETE FROM challenges WHERE namespace = $1 AND run_key = $2".into(),
            slim_outputs: "DELETE FROM run_outputs WHERE namespace = $1 AND run_key = $2".into(),
            slim_proxy_answer: "DELETE FROM proxy_answers WHERE namespace = $1 AND run_key = $2"
                .into(),
            scrub: "UPDATE effects SET body = $2, redacted_at = $3 \
                 WHERE id = $1 AND redacted_at IS NULL"
                .into(),
            take_job: "INSERT INTO maintenance_leases (name, owner, expires_at) \
                 VALUES ($1, $2, $3 + $4) ON CONFLICT (name) DO UPDATE \
                 SET owner = excluded.owner, expires_at = excluded.expires_at \
                 WHERE maintenance_leases.expires_at <= $3 OR maintenance_leases.owner = excluded.owner \
                 RETURNING owner"
                .into(),
            release_job: "DELETE FROM maintenance_leases WHERE name = $1 AND owner = $2".into(),
        }
    }

    /// Terminal runs due for archiving (or, `tombstones`, slimmed runs due
    /// for deletion) under `sel`, oldest first. Binds: cutoff, limit, then
    /// the namespace (`only`) or each excluded namespace.
    pub fn candidates(sel: &crate::retention::Selection, tombstones: bool) -> String {
        let archived = if tombstones {
            "r.archived_at IS NOT NULL"
        } else {
            "r.archived_at IS NULL \
             AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.namespace = r.namespace \
                 AND d.run_key = r.run_key AND d.resolved_at IS NULL) \
             AND (r.state <> 'dead_lettered' OR EXISTS (SELECT 1 FROM dead_letters d \
                 WHERE d.namespace = r.namespace AND d.run_key = r.run_key)) \
             AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.namespace = r.namespace \
                 AND e.run_key = r.run_key AND e.state IN ('pending', 'sending', 'unknown'))"
        };
        let namespaces = match (&sel.only, sel.exclude.len()) {
            (Some(_), _) => "AND r.namespace = $3".to_owned(),
            (None, 0) => String::new(),
            (None, n) => {
                let list: Vec<String> = (3..3 + n).map(|i| format!("${i}")).collect();
                format!("AND r.namespace NOT IN ({})", list.join(", "))
            }
        };
        format!(
            "SELECT r.namespace, r.run_key, r.version, r.state, r.updated_at FROM runs r \
             WHERE r.state IN {TERMINAL} AND r.updated_at < $1 AND {archived} {namespaces} \
             ORDER BY r.updated_at LIMIT $2"
        )
    }

    /// Finished effects whose verbatim body is no longer needed, in the
    /// `n` namespaces bound after the limit (`None`: every namespace).
    pub fn scrub_candidates(namespaces: Option<usize>) -> String {
        let filter = match namespaces {
            None => String::new(),
            Some(n) => {
                let list: Vec<String> = (2..2 + n).map(|i| format!("${i}")).collect();
                format!("AND e.namespace IN ({})", list.join(", "))
            }
        };
        format!(
            "SELECT e.id, e.namespace, e.body FROM effects e \
             JOIN runs r ON r.namespace = e.namespace AND r.run_key = e.run_key \
             WHERE e.redacted_at IS NULL AND e.body IS NOT NULL {filter} \
               AND (e.state IN ('completed', 'cancelled') \
                    OR r.state IN ('completed', 'failed_terminal')) \
             ORDER BY e.id LIMIT $1"
        )
    }
}

impl Default for RetentionStatements {
    fn default() -> Self {
        Self::new()
    }
}
