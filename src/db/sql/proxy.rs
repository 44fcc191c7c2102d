//! The Idempotency-Key proxy's statements: the answers kept beside its
//! runs, and the open dead letter of an unknown key.

use super::Dialect;
use crate::ledger::RunState;

/// Whether the run of `(namespace, key)` completed with `payload_hash`
/// (SQL expressions), for a replay's read: a scalar subquery on the run's
/// key alone. Spelled as `EXISTS (… AND state = 'completed' …)`, the
/// state's constant let PostgreSQL plan, for young tables without
/// statistics, a scan of `runs_state_updated` through every completed
/// run, kept as the statement's generic plan until the next `ANALYZE`.
pub(crate) fn kept_run(namespace: &str, key: &str, payload_hash: &str) -> String {
    format!(
        "(SELECT state = '{completed}' AND payload_hash = {payload_hash} FROM runs \
             WHERE namespace = {namespace} AND run_key = {key})",
        completed = RunState::Completed.as_str(),
    )
}

/// Keeps the answer `rows` give (namespace, key, status, headers, body,
/// stored_at, expires_at): a retried key that completes again replaces
/// the one its window let go.
pub(crate) fn keep_answer(rows: &str) -> String {
    format!(
        "INSERT INTO proxy_answers (namespace, run_key, status, headers, body, stored_at, \
             expires_at) {rows} \
         ON CONFLICT (namespace, run_key) DO UPDATE SET status = excluded.status, \
             headers = excluded.headers, body = excluded.body, \
             stored_at = excluded.stored_at, expires_at = excluded.expires_at"
    )
}

/// The proxy's statements, spelled for one backend.
#[derive(Debug, Clone)]
pub struct ProxyStatements {
    /// Keeps an answer (a retried key that completes again replaces the
    /// one its window let go). Binds: now, namespace, key, status,
    /// headers, body, window_ms.
    pub insert_answer: String,
    /// A key's answer while its window lasts. Binds: now, namespace, key.
    pub answer: String,
    /// A replay in one read: a key's answer while its window lasts, if
    /// its run completed with this payload hash. Binds: now, namespace,
    /// key, payload_hash.
    pub replay: String,
    /// PostgreSQL: the replays of a batch in one read. Binds: now, then
    /// namespaces, keys and payload hashes (arrays), one entry per
    /// distinct read; returns the answer of each read that replays, with
    /// its 1-based position as `v_idx`. Each read is its own lookup by
    /// primary key (`LIMIT 1` keeps the planner from turning the lookups
    /// into a join): as a join, a generic plan made while the tables were
    /// small (a proxy's first minutes, before autovacuum's analyze)
    /// scanned every completed run on every batch; the run's check is
    /// [`kept_run`] for the same reason.
    pub replay_batch: Option<String>,
    /// Deletes up to `$2` answers whose window has passed. Binds: now, limit.
    pub purge: String,
    /// The newest open dead letter of a run. Binds: namespace, key.
    pub open_dead_letter: String,
}

impl ProxyStatements {
    /// The statements spelled for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        let now = dialect.now();
        Self {
            insert_answer: keep_answer(&format!("VALUES ($2, $3, $4, $5, $6, {now}, {now} + $7)")),
            answer: format!(
                "SELECT status, headers, body FROM proxy_answers \
                 WHERE namespace = $2 AND run_key = $3 AND expires_at > {now}"
            ),
            replay: format!(
                "SELECT status, headers, body FROM proxy_answers \
                 WHERE namespace = $2 AND run_key = $3 AND expires_at > {now} \
                     AND {kept_run}",
                kept_run = kept_run("$2", "$3", "$4"),
            ),
            replay_batch: (dialect == Dialect::Postgres).then(|| {
                format!(
                    "SELECT v_idx, status, headers, body \
                     FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY \
                         AS i(v_ns, v_key, v_hash, v_idx) \
                     CROSS JOIN LATERAL (SELECT status, headers, body FROM proxy_answers \
                         WHERE namespace = v_ns AND run_key = v_key AND expires_at > {now} \
                             AND {kept_run} \
                         LIMIT 1) AS kept",
                    kept_run = kept_run("v_ns", "v_key", "v_hash"),
                )
            }),
            purge: format!(
                "DELETE FROM proxy_answers WHERE (namespace, run_key) IN ( \
                     SELECT namespace, run_key FROM proxy_answers \
                     WHERE expires_at <= {now} ORDER BY expires_at LIMIT $2)"
            ),
            open_dead_letter: "SELECT id FROM dead_letters \
                 WHERE namespace = $1 AND run_key = $2 AND resolved_at IS NULL \
                 ORDER BY created_at DESC, id DESC LIMIT 1"
                .into(),
        }
    }
}
