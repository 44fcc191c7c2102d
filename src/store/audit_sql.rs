//! The SQL of audit checkpoints, verification, retention and maintenance
//! leases, written once for both backends (see [`super::sql`]).

use super::sql::Dialect;

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

/// Terminal states retention may touch; nothing else is ever selected.
const TERMINAL: &str = "('completed', 'failed_terminal', 'dead_lettered')";

/// The audit and retention statements, spelled for one backend.
#[derive(Debug, Clone)]
pub struct AuditStatements {
    /// Current and checkpointed heads, sorted bytewise by (namespace, key).
    pub head_scan: String,
    /// Runs, checkpointed heads and events, by key then kind then seq.
    /// `[0]` every namespace; `[1]` binds: namespace.
    pub audit_scan: [String; 2],
    /// The checkpointed heads, sorted bytewise.
    pub heads: String,
    /// Every checkpoint by id.
    pub checkpoints: String,
    /// The latest checkpoint.
    pub latest_checkpoint: String,
    /// Inserts a checkpoint (10 binds in column order).
    pub insert_checkpoint: String,
    /// Deletes one tombstone. Binds: namespace, key, cutoff.
    pub delete_tombstone: String,
    /// Deletes a key's checkpointed head. Binds: namespace, key.
    pub delete_head: String,
    /// Deletes a key's remaining events. Binds: namespace, key.
    pub delete_events: String,
    /// A run's chain anchors. Binds: namespace, key.
    pub run_head: String,
    /// A key's checkpointed head. Binds: namespace, key.
    pub checkpointed_head: String,
    /// Records a verification (8 binds in column order).
    pub insert_verification: String,
    /// The latest verification.
    pub last_verification: String,
    /// Takes or renews a job lease. Binds: name, owner, now, lease_ms.
    pub take_job: String,
    /// Releases a job lease. Binds: name, owner.
    pub release_job: String,
    /// One run, whole. Binds: namespace, key.
    pub run_row: String,
    /// Slims a run to its tombstone. Binds: namespace, key, version, now.
    pub slim: String,
    /// Deletes a slimmed run's attempts. Binds: namespace, key.
    pub slim_attempts: String,
    /// Deletes a slimmed run's effects. Binds: namespace, key.
    pub slim_effects: String,
    /// Deletes a slimmed run's archived events. Binds: namespace, key, max seq.
    pub slim_events: String,
    /// Deletes a slimmed run's resolved dead letters. Binds: namespace, key.
    pub slim_dead_letters: String,
    /// Deletes a slimmed run's approval challenges. Binds: namespace, key.
    pub slim_challenges: String,
    /// Deletes a slimmed run's model outputs. Binds: namespace, key.
    pub slim_outputs: String,
    /// Deletes one archived raw delivery. Binds: id.
    pub slim_raw_event: String,
    /// Replaces one effect's body. Binds: id, body, now.
    pub scrub: String,
}

impl AuditStatements {
    /// The statements spelled for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        let c = match dialect {
            Dialect::Sqlite => "",
            Dialect::Postgres => " COLLATE \"C\"",
        };
        let system = crate::audit::SYSTEM_NAMESPACE;
        let head_scan = format!(
            "SELECT namespace, run_key, src, seq, head FROM ( \
                 SELECT namespace, run_key, CAST(0 AS BIGINT) AS src, audit_seq AS seq, \
                     audit_head AS head FROM runs \
                 UNION ALL \
                 SELECT a.namespace, a.run_key, CAST(0 AS BIGINT), a.seq, a.hash FROM audit_events a \
                 WHERE a.namespace = '{system}' \
                   AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.namespace = a.namespace AND r.run_key = a.run_key) \
                   AND NOT EXISTS (SELECT 1 FROM audit_events b WHERE b.namespace = a.namespace \
                       AND b.run_key = a.run_key AND b.seq > a.seq) \
                 UNION ALL \
                 SELECT namespace, run_key, CAST(1 AS BIGINT), seq, head FROM audit_heads \
             ) h ORDER BY namespace{c}, run_key{c}, src"
        );
        let scan = |filter: &str| {
            format!(
                "SELECT namespace, run_key, src, seq, kind, actor, from_state, to_state, version, \
                     detail, prev_hash, hash, created_at, archived_at FROM ( \
                     SELECT namespace, run_key, CAST(0 AS BIGINT) AS src, audit_seq AS seq, \
                         CAST(NULL AS TEXT) AS kind, CAST(NULL AS TEXT) AS actor, \
                         CAST(NULL AS TEXT) AS from_state, CAST(NULL AS TEXT) AS to_state, \
                         CAST(NULL AS BIGINT) AS version, CAST(NULL AS TEXT) AS detail, \
                         CAST(NULL AS TEXT) AS prev_hash, audit_head AS hash, \
                         updated_at AS created_at, archived_at FROM runs {filter} \
                     UNION ALL \
                     SELECT namespace, run_key, CAST(1 AS BIGINT), seq, NULL, NULL, NULL, NULL, \
                         NULL, NULL, NULL, head, checkpoint_id, NULL FROM audit_heads {filter} \
                     UNION ALL \
                     SELECT namespace, run_key, CAST(2 AS BIGINT), seq, kind, actor, from_state, \
                         to_state, version, detail, prev_hash, hash, created_at, NULL \
                     FROM audit_events {filter} \
                 ) s ORDER BY namespace{c}, run_key{c}, src, seq"
            )
        };
        let checkpoint_columns = "id, created_at, chain_count, digest, changed, removed, \
             anomalies, reason, prev_hash, hash";
        Self {
            head_scan,
            audit_scan: [scan(""), scan("WHERE namespace = $1")],
            heads: format!(
                "SELECT namespace, run_key, seq, head FROM audit_heads \
                 ORDER BY namespace{c}, run_key{c}"
            ),
            checkpoints: format!("SELECT {checkpoint_columns} FROM audit_checkpoints ORDER BY id"),
            latest_checkpoint: format!(
                "SELECT {checkpoint_columns} FROM audit_checkpoints ORDER BY id DESC LIMIT 1"
            ),
            insert_checkpoint: format!(
                "INSERT INTO audit_checkpoints ({checkpoint_columns}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            ),
            delete_tombstone: format!(
                "DELETE FROM runs WHERE namespace = $1 AND run_key = $2 \
                 AND archived_at IS NOT NULL AND updated_at < $3 AND state IN {TERMINAL}"
            ),
            delete_head: "DELETE FROM audit_heads WHERE namespace = $1 AND run_key = $2".into(),
            delete_events: "DELETE FROM audit_events WHERE namespace = $1 AND run_key = $2".into(),
            run_head: "SELECT audit_seq, audit_head, archived_at FROM runs \
                 WHERE namespace = $1 AND run_key = $2"
                .into(),
            checkpointed_head: "SELECT checkpoint_id, seq, head FROM audit_heads \
                 WHERE namespace = $1 AND run_key = $2"
                .into(),
            insert_verification: "INSERT INTO audit_verifications (id, started_at, finished_at, \
                 namespace, chains, failures, first_failure, checkpoint_id) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
                .into(),
            last_verification: "SELECT id, started_at, finished_at, namespace, chains, failures, \
                 first_failure, checkpoint_id FROM audit_verifications \
                 ORDER BY finished_at DESC LIMIT 1"
                .into(),
            take_job: "INSERT INTO maintenance_leases (name, owner, expires_at) \
                 VALUES ($1, $2, $3 + $4) ON CONFLICT (name) DO UPDATE \
                 SET owner = excluded.owner, expires_at = excluded.expires_at \
                 WHERE maintenance_leases.expires_at <= $3 OR maintenance_leases.owner = excluded.owner \
                 RETURNING owner"
                .into(),
            release_job: "DELETE FROM maintenance_leases WHERE name = $1 AND owner = $2".into(),
            run_row: "SELECT * FROM runs WHERE namespace = $1 AND run_key = $2".into(),
            slim: format!(
                "UPDATE runs SET archived_at = $4, prev_state = NULL, result = NULL, \
                     last_error = NULL, reason = NULL, operation = NULL, workflow_version = NULL, \
                     source_url = NULL, execution_ref = NULL, requested_by = NULL \
                 WHERE namespace = $1 AND run_key = $2 AND version = $3 AND archived_at IS NULL \
                   AND state IN {TERMINAL} \
                   AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.namespace = runs.namespace \
                       AND d.run_key = runs.run_key AND d.resolved_at IS NULL) \
                   AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.namespace = runs.namespace \
                       AND e.run_key = runs.run_key AND e.state IN ('pending', 'sending', 'unknown'))"
            ),
            slim_attempts: "DELETE FROM effect_attempts WHERE effect_id IN \
                 (SELECT id FROM effects WHERE namespace = $1 AND run_key = $2)"
                .into(),
            slim_effects: "DELETE FROM effects WHERE namespace = $1 AND run_key = $2".into(),
            slim_events: "DELETE FROM audit_events WHERE namespace = $1 AND run_key = $2 \
                 AND seq <= $3"
                .into(),
            slim_dead_letters: "DELETE FROM dead_letters WHERE namespace = $1 AND run_key = $2 \
                 AND resolved_at IS NOT NULL"
                .into(),
            slim_raw_event: "DELETE FROM raw_events WHERE id = $1".into(),
            slim_challenges: "DELETE FROM challenges WHERE namespace = $1 AND run_key = $2".into(),
            slim_outputs: "DELETE FROM run_outputs WHERE namespace = $1 AND run_key = $2".into(),
            scrub: "UPDATE effects SET body = $2, redacted_at = $3 \
                 WHERE id = $1 AND redacted_at IS NULL"
                .into(),
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

    /// Upserts `n` checkpointed heads in one statement (5 binds each:
    /// namespace, key, seq, head, checkpoint_id).
    pub fn upsert_heads(n: usize) -> String {
        let rows: Vec<String> = (0..n)
            .map(|i| {
                let b = i * 5;
                format!(
                    "(${}, ${}, ${}, ${}, ${})",
                    b + 1,
                    b + 2,
                    b + 3,
                    b + 4,
                    b + 5
                )
            })
            .collect();
        format!(
            "INSERT INTO audit_heads (namespace, run_key, seq, head, checkpoint_id) VALUES {} \
             ON CONFLICT (namespace, run_key) DO UPDATE SET seq = excluded.seq, \
             head = excluded.head, checkpoint_id = excluded.checkpoint_id",
            rows.join(", ")
        )
    }
}
