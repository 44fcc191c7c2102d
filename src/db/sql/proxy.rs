//! The Idempotency-Key proxy's statements: the answers kept beside its
//! runs, and the open dead letter of an unknown key.

use super::Dialect;
use crate::ledger::RunState;

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
            insert_answer: format!(
                "INSERT INTO proxy_answers (namespace, run_key, status, headers, body, \
                     stored_at, expires_at) \
                 VALUES ($2, $3, $4, $5, $6, {now}, {now} + $7) \
                 ON CONFLICT (namespace, run_key) DO UPDATE SET status = excluded.status, \
                     headers = excluded.headers, body = excluded.body, \
                     stored_at = excluded.stored_at, expires_at = excluded.expires_at"
            ),
            answer: format!(
                "SELECT status, headers, body FROM proxy_answers \
                 WHERE namespace = $2 AND run_key = $3 AND expires_at > {now}"
            ),
            replay: format!(
                "SELECT status, headers, body FROM proxy_answers \
                 WHERE namespace = $2 AND run_key = $3 AND expires_at > {now} \
                     AND EXISTS (SELECT 1 FROM runs WHERE namespace = $2 AND run_key = $3 \
                         AND state = '{completed}' AND payload_hash = $4)",
                completed = RunState::Completed.as_str(),
            ),
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
