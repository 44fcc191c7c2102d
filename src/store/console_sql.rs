//! The operator console's statements, written once for both backends.
//!
//! Which index each run search walks (the filters choose the order, see
//! [`RunSearch::order`]):
//!
//! | filters | order | index |
//! | --- | --- | --- |
//! | execution ref (+ anything) | namespace, key | `runs_execution_ref` |
//! | key prefix (+ namespace, state) | key, namespace | `runs_key` (migration 0007) |
//! | namespace (+ state) | namespace, key | the primary key |
//! | state alone | `updated_at` descending | `runs_state_updated` |
//! | nothing | namespace, key | the primary key |
//!
//! Pages are keyset pages: the next one starts after the last row's sort
//! fields, so a page costs the same however deep it is. A key prefix is a
//! range in byte order (`prefix ≤ key < prefix + U+007F`; keys are visible
//! ASCII), spelled with the "C" collation on PostgreSQL so the database's
//! own collation cannot change what "starts with" means.
//!
//! The dashboard's queries: gate waits walk `challenges_due (state,
//! expires_at)` (a challenge decided after `since` expires after it too);
//! dead letters per hour walk `dead_letters_page (created_at, id)`; the
//! pending count walks `challenges_due`.

use super::console::{RunSearch, SearchOrder};
use super::deadletter_sql::Bind;
use super::sql::{Dialect, RUN_COLUMNS};

/// Sorts after every byte a key may hold.
const KEY_CEILING: char = '\u{7f}';

/// People's decision times since `$1`, newest first. Binds: since, limit.
pub const GATE_WAITS: &str = "SELECT decided_at - created_at FROM challenges \
     WHERE state IN ('approved', 'rejected') AND expires_at >= $1 AND decided_at >= $1 \
     ORDER BY decided_at DESC LIMIT $2";

/// Dead letters per hour since `$1`. Binds: since.
pub const DEAD_LETTER_HOURS: &str =
    "SELECT (created_at - $1) / 3600000 AS hour, COUNT(*) AS count FROM dead_letters \
     WHERE created_at >= $1 GROUP BY 1 ORDER BY 1";

/// Challenges waiting for a decision.
pub const PENDING_CHALLENGES: &str = "SELECT COUNT(*) FROM challenges WHERE state = 'pending'";

/// The statement and binds of one page of a run search.
pub fn search_sql(dialect: Dialect, search: &RunSearch) -> (String, Vec<Bind>) {
    let bytes = |col: &str| match dialect {
        Dialect::Sqlite => col.to_owned(),
        Dialect::Postgres => format!("{col} COLLATE \"C\""),
    };
    let (key, ns) = (bytes("run_key"), bytes("namespace"));
    let mut sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE 1 = 1");
    let mut binds = Vec::new();
    let mut param = |value: Bind| {
        binds.push(value);
        format!("${}", binds.len())
    };
    if let Some(r) = &search.execution_ref {
        sql += &format!(" AND execution_ref = {}", param(Bind::Text(r.clone())));
    }
    if let Some(n) = &search.namespace {
        sql += &format!(" AND namespace = {}", param(Bind::Text(n.clone())));
    }
    if let Some(prefix) = &search.key_prefix {
        let low = param(Bind::Text(prefix.clone()));
        let high = param(Bind::Text(format!("{prefix}{KEY_CEILING}")));
        sql += &format!(" AND {key} >= {low} AND {key} < {high}");
    }
    if let Some(state) = search.state {
        sql += &format!(" AND state = {}", param(Bind::Text(state.as_str().into())));
    }
    let order = search.order();
    if let Some(after) = &search.after {
        let n = param(Bind::Text(after.namespace.clone()));
        let k = param(Bind::Text(after.key.clone()));
        sql += &match order {
            SearchOrder::Identity => format!(" AND (namespace, run_key) > ({n}, {k})"),
            SearchOrder::Key => format!(" AND ({key}, {ns}) > ({k}, {n})"),
            SearchOrder::Recent => {
                let u = param(Bind::Int(after.updated_at));
                format!(" AND (updated_at, namespace, run_key) < ({u}, {n}, {k})")
            }
        };
    }
    sql += &match order {
        SearchOrder::Identity => " ORDER BY namespace, run_key".to_owned(),
        SearchOrder::Key => format!(" ORDER BY {key}, {ns}"),
        SearchOrder::Recent => " ORDER BY updated_at DESC, namespace DESC, run_key DESC".to_owned(),
    };
    sql += &format!(" LIMIT {}", param(Bind::Int(search.limit)));
    (sql, binds)
}

/// Expands the console's queries inside a backend's `ops` module, as a
/// child module `console`; `$dialect` spells the search for the backend.
#[macro_export]
#[doc(hidden)]
macro_rules! console_ops {
    ($db:ty, $dialect:expr) => {
        pub(crate) mod console {
            use sqlx::Pool;
            use $crate::ledger::Run;
            use $crate::store::console::{HourCount, RunSearch};
            use $crate::store::console_sql::{
                search_sql, DEAD_LETTER_HOURS, GATE_WAITS, PENDING_CHALLENGES,
            };
            use $crate::store::deadletter_sql::Bind;
            use $crate::store::row::RunRow;
            use $crate::store::Result;

            pub(crate) async fn search_runs(
                pool: &Pool<$db>,
                search: &RunSearch,
            ) -> Result<Vec<Run>> {
                let (sql, binds) = search_sql($dialect, search);
                let mut query = sqlx::query_as::<_, RunRow>(&sql);
                for bind in binds {
                    query = match bind {
                        Bind::Text(t) => query.bind(t),
                        Bind::Int(i) => query.bind(i),
                    };
                }
                query
                    .fetch_all(pool)
                    .await?
                    .iter()
                    .map(RunRow::to_run)
                    .collect()
            }

            pub(crate) async fn gate_waits(
                pool: &Pool<$db>,
                since: i64,
                limit: i64,
            ) -> Result<Vec<i64>> {
                Ok(sqlx::query_scalar(GATE_WAITS)
                    .bind(since)
                    .bind(limit)
                    .fetch_all(pool)
                    .await?)
            }

            pub(crate) async fn dead_letters_by_hour(
                pool: &Pool<$db>,
                since: i64,
            ) -> Result<Vec<HourCount>> {
                Ok(sqlx::query_as(DEAD_LETTER_HOURS)
                    .bind(since)
                    .fetch_all(pool)
                    .await?)
            }

            pub(crate) async fn pending_challenges(pool: &Pool<$db>) -> Result<i64> {
                Ok(sqlx::query_scalar(PENDING_CHALLENGES)
                    .fetch_one(pool)
                    .await?)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::RunState;
    use crate::store::console::RunCursor;

    #[test]
    fn a_key_search_is_a_byte_range_on_postgres() {
        let search = RunSearch {
            key_prefix: Some("ord".into()),
            after: Some(RunCursor {
                updated_at: 1,
                namespace: "crm".into(),
                key: "ord-1".into(),
            }),
            limit: 10,
            ..RunSearch::default()
        };
        let (sql, binds) = search_sql(Dialect::Postgres, &search);
        assert!(sql.contains("run_key COLLATE \"C\" >= $1 AND run_key COLLATE \"C\" < $2"));
        assert!(sql.contains("ORDER BY run_key COLLATE \"C\", namespace COLLATE \"C\" LIMIT $5"));
        assert_eq!(binds[1], Bind::Text("ord\u{7f}".into()));
        let (sql, _) = search_sql(Dialect::Sqlite, &search);
        assert!(sql.contains("(run_key, namespace) > ($4, $3)"), "{sql}");
    }

    #[test]
    fn a_state_search_pages_by_recency() {
        let search = RunSearch {
            state: Some(RunState::Processing),
            after: Some(RunCursor {
                updated_at: 7,
                namespace: "crm".into(),
                key: "k".into(),
            }),
            limit: 3,
            ..RunSearch::default()
        };
        let (sql, binds) = search_sql(Dialect::Sqlite, &search);
        assert!(sql.contains("state = $1"));
        assert!(
            sql.contains("(updated_at, namespace, run_key) < ($4, $2, $3)"),
            "{sql}"
        );
        assert!(sql.ends_with("ORDER BY updated_at DESC, namespace DESC, run_key DESC LIMIT $5"));
        assert_eq!(binds.len(), 5);
    }
}
