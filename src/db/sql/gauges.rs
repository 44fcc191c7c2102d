//! The read-only queries behind the scrape-time gauges and the console's
//! dashboard counts, written once for both backends.
//!
//! Both stay cheap as tables grow. Stale runs: `state = 'processing'` walks
//! the `runs (state, updated_at)` index, so only runs in processing (the
//! work in flight, not the history) are read. Dead letters: the partial
//! index `dead_letters_open … WHERE resolved_at IS NULL` holds only the
//! unresolved ones. So no new index (and no migration) is needed.

use super::Dialect;

/// The gauges' statements, spelled for one backend.
#[derive(Debug, Clone)]
pub struct GaugeStatements {
    /// Expired leases of runs still in `processing`, per namespace. Binds: now.
    pub stale_processing: String,
    /// Unresolved dead letters per namespace with their oldest age. Binds: now.
    pub open_dead_letters: String,
    /// Effects waiting per target and state.
    pub backlog: String,
    /// How long people took to decide the challenges decided since `$1`,
    /// newest first. Binds: since, limit.
    pub gate_waits: String,
    /// Dead letters per hour since `$1`. Binds: since.
    pub dead_letters_by_hour: String,
    /// Challenges waiting for a decision.
    pub pending_challenges: String,
}

impl GaugeStatements {
    /// The statements spelled for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        let now = dialect.now();
        Self {
            stale_processing: format!(
                "SELECT namespace, COUNT(*) FROM runs \
                 WHERE state = 'processing' AND lease_expires_at <= {now} \
                 GROUP BY namespace"
            ),
            open_dead_letters: format!(
                "SELECT namespace, COUNT(*) AS count, {now} - MIN(created_at) AS oldest_age_ms \
                 FROM dead_letters WHERE resolved_at IS NULL GROUP BY namespace"
            ),
            backlog: "SELECT target, state, COUNT(*) FROM effects \
                 WHERE state IN ('pending', 'sending', 'unknown') GROUP BY target, state"
                .into(),
            // Walks `challenges_due (state, expires_at)`: a challenge decided
            // after `since` expires after it too.
            gate_waits: "SELECT decided_at - created_at FROM challenges \
                 WHERE state IN ('approved', 'rejected') AND expires_at >= $1 AND decided_at >= $1 \
                 ORDER BY decided_at DESC LIMIT $2"
                .into(),
            // Walks `dead_letters_page (created_at, id)`.
            dead_letters_by_hour: "SELECT (created_at - $1) / 3600000 AS hour, COUNT(*) AS count \
                 FROM dead_letters WHERE created_at >= $1 GROUP BY 1 ORDER BY 1"
                .into(),
            pending_challenges: "SELECT COUNT(*) FROM challenges WHERE state = 'pending'".into(),
        }
    }
}
