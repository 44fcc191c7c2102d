//! The SQL of the audit log: appending entries, reading a run's trail,
//! checkpoints over every chain head, and verification records, written
//! once for both backends. Appending an entry together with moving its
//! run's head is in [`super::runs`] (it writes `runs`).

use super::Dialect;

/// Appends an audit entry (12 binds, in [`crate::audit::AuditEntry`] order).
pub(crate) const INSERT_AUDIT: &str = "INSERT INTO audit_events (namespace, run_key, seq, kind, \
     actor, from_state, to_state, version, detail, prev_hash, hash, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";

/// The audit statements, spelled for one backend.
#[derive(Debug, Clone)]
pub struct AuditStatements {
    /// Appends an audit entry (12 binds, in [`crate::audit::AuditEntry`] order).
    pub insert_audit: String,
    /// One run's audit trail. Binds: namespace, key.
    pub audit_trail: String,
    /// The last audit entry of a run-less key. Binds: namespace, key.
    pub last_audit: String,
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
    /// Run first in a staging transaction (PostgreSQL): its commit need not
    /// wait for the disk. Staged rows count only once the checkpoint's own
    /// commit, later in the same log, is durable, and that one waits.
    pub stage_unsynced: Option<String>,
    /// Stages heads of a checkpoint in preparation. Binds: checkpoint id,
    /// attempt, the heads as a JSON array of `HeadBatchRow`.
    pub stage_heads: String,
    /// Moves one attempt's staged heads into the head list. Binds:
    /// checkpoint id, attempt.
    pub merge_staged: String,
    /// Deletes the staged heads of a checkpoint id and every earlier one.
    /// Binds: checkpoint id.
    pub clear_staged: String,
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
}

impl AuditStatements {
    /// The statements spelled for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        let (c, blob) = match dialect {
            Dialect::Sqlite => ("", "BLOB"),
            Dialect::Postgres => (" COLLATE \"C\"", "BYTEA"),
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
        // Effects come last in their key, in the events' columns: type,
        // target, method, URL, `redacted_at`, headers, key, id, body.
        let scan = |filter: &str| {
            format!(
                "SELECT namespace, run_key, src, seq, kind, actor, from_state, to_state, version, \
                     detail, prev_hash, hash, created_at, archived_at, body FROM ( \
                     SELECT namespace, run_key, CAST(0 AS BIGINT) AS src, audit_seq AS seq, \
                         CAST(NULL AS TEXT) AS kind, CAST(NULL AS TEXT) AS actor, \
                         CAST(NULL AS TEXT) AS from_state, CAST(NULL AS TEXT) AS to_state, \
                         CAST(NULL AS BIGINT) AS version, CAST(NULL AS TEXT) AS detail, \
                         CAST(NULL AS TEXT) AS prev_hash, audit_head AS hash, \
                         updated_at AS created_at, archived_at, CAST(NULL AS {blob}) AS body \
                     FROM runs {filter} \
                     UNION ALL \
                     SELECT namespace, run_key, CAST(1 AS BIGINT), seq, NULL, NULL, NULL, NULL, \
                         NULL, NULL, NULL, head, checkpoint_id, NULL, NULL FROM audit_heads {filter} \
                     UNION ALL \
                     SELECT namespace, run_key, CAST(2 AS BIGINT), seq, kind, actor, from_state, \
                         to_state, version, detail, prev_hash, hash, created_at, NULL, NULL \
                     FROM audit_events {filter} \
                     UNION ALL \
                     SELECT namespace, run_key, CAST(3 AS BIGINT), CAST(0 AS BIGINT), effect_type, \
                         target, method, url, redacted_at, headers, idempotency_key, id, created_at, \
                         NULL, body FROM effects {filter} \
                 ) s ORDER BY namespace{c}, run_key{c}, src, seq"
            )
        };
        let checkpoint_columns = "id, created_at, chain_count, digest, changed, removed, \
             anomalies, reason, prev_hash, hash";
        Self {
            insert_audit: INSERT_AUDIT.into(),
            audit_trail: "SELECT namespace, run_key, seq, kind, actor, from_state, to_state, \
                 version, detail, prev_hash, hash, created_at FROM audit_events \
                 WHERE namespace = $1 AND run_key = $2 ORDER BY seq"
                .into(),
            last_audit: "SELECT seq, hash FROM audit_events WHERE namespace = $1 AND run_key = $2 \
                 ORDER BY seq DESC LIMIT 1"
                .into(),
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
            stage_unsynced: match dialect {
                Dialect::Sqlite => None,
                Dialect::Postgres => Some("SET LOCAL synchronous_commit = off".into()),
            },
            stage_heads: format!(
                "INSERT INTO audit_heads_staged (checkpoint_id, attempt, namespace, run_key, seq, \
                 head) SELECT $1, $2, v_ns, v_key, v_seq, v_head FROM {}",
                dialect.json_rows(
                    "$3",
                    &[
                        ("v_ns", "text"),
                        ("v_key", "text"),
                        ("v_seq", "bigint"),
                        ("v_head", "text"),
                    ],
                )
            ),
            merge_staged: "INSERT INTO audit_heads (namespace, run_key, seq, head, checkpoint_id) \
                 SELECT namespace, run_key, seq, head, checkpoint_id FROM audit_heads_staged \
                 WHERE checkpoint_id = $1 AND attempt = $2 \
                 ON CONFLICT (namespace, run_key) DO UPDATE SET seq = excluded.seq, \
                 head = excluded.head, checkpoint_id = excluded.checkpoint_id"
                .into(),
            clear_staged: "DELETE FROM audit_heads_staged WHERE checkpoint_id <= $1".into(),
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
        }
    }
}
