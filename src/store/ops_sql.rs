//! The read-only queries behind the scrape-time gauges (see
//! [`crate::ops`]), written once for both backends.
//!
//! Both stay cheap as tables grow. Stale runs: `state = 'processing'` walks
//! the `runs (state, updated_at)` index, so only runs in processing (the
//! work in flight, not the history) are read. Dead letters: the partial
//! index `dead_letters_open … WHERE resolved_at IS NULL` holds only the
//! unresolved ones. So no new index (and no migration) is needed.

use super::sql::Dialect;

/// Unresolved dead letters of one namespace.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct OpenDeadLetters {
    /// The runs' namespace.
    pub namespace: String,
    /// How many are unresolved.
    pub count: i64,
    /// Age of the oldest, in milliseconds.
    pub oldest_age_ms: i64,
}

/// The gauges' statements, spelled for one backend.
#[derive(Debug, Clone)]
pub struct OpsStatements {
    /// Expired leases of runs still in `processing`, per namespace. Binds: now.
    pub stale_processing: String,
    /// Unresolved dead letters per namespace with their oldest age. Binds: now.
    pub open_dead_letters: String,
}

impl OpsStatements {
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
        }
    }
}

/// Expands the gauge queries inside a backend's `ops` module, as a child
/// module `gauges` that reuses the ledger's [`Cx`](crate::ledger_ops).
#[macro_export]
#[doc(hidden)]
macro_rules! gauge_ops {
    ($db:ty) => {
        pub(crate) mod gauges {
            use super::Cx;
            use $crate::store::ops_sql::OpenDeadLetters;
            use $crate::store::Result;

            pub(crate) async fn stale_processing(cx: &Cx<'_>) -> Result<Vec<(String, i64)>> {
                Ok(sqlx::query_as(&cx.st.ops.stale_processing)
                    .bind(cx.now)
                    .fetch_all(cx.read)
                    .await?)
            }

            pub(crate) async fn open_dead_letters(cx: &Cx<'_>) -> Result<Vec<OpenDeadLetters>> {
                Ok(sqlx::query_as(&cx.st.ops.open_dead_letters)
                    .bind(cx.now)
                    .fetch_all(cx.read)
                    .await?)
            }
        }
    };
}
