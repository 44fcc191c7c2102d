//! The operator console's run search, written once for both backends.
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

use super::deadletter::text;
use super::{Dialect, RUN_COLUMNS};
use crate::db::exec::{Arg, Args};
use crate::ledger::port::{RunSearch, SearchOrder};

/// Sorts after every byte a key may hold.
const KEY_CEILING: char = '\u{7f}';

/// The statement and binds of one page of a run search.
pub fn search_sql(dialect: Dialect, search: &RunSearch) -> (String, Args<'static>) {
    let (key, ns) = (dialect.bytewise("run_key"), dialect.bytewise("namespace"));
    let mut sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE 1 = 1");
    let mut args = Args::new();
    let mut param = |value: Arg<'static>| {
        args.push(value);
        format!("${}", args.len())
    };
    if let Some(r) = &search.execution_ref {
        sql += &format!(" AND execution_ref = {}", param(text(r)));
    }
    if let Some(n) = &search.namespace {
        sql += &format!(" AND namespace = {}", param(text(n)));
    }
    if let Some(prefix) = &search.key_prefix {
        let low = param(text(prefix));
        let high = param(Arg::Text(Some(format!("{prefix}{KEY_CEILING}").into())));
        sql += &format!(" AND {key} >= {low} AND {key} < {high}");
    }
    if let Some(state) = search.state {
        sql += &format!(" AND state = {}", param(text(state.as_str())));
    }
    let order = search.order();
    if let Some(after) = &search.after {
        let n = param(text(&after.namespace));
        let k = param(text(&after.key));
        sql += &match order {
            SearchOrder::Identity => format!(" AND (namespace, run_key) > ({n}, {k})"),
            SearchOrder::Key => format!(" AND ({key}, {ns}) > ({k}, {n})"),
            SearchOrder::Recent => {
                let u = param(Arg::Int(Some(after.updated_at)));
                format!(" AND (updated_at, namespace, run_key) < ({u}, {n}, {k})")
            }
        };
    }
    sql += &match order {
        SearchOrder::Identity => " ORDER BY namespace, run_key".to_owned(),
        SearchOrder::Key => format!(" ORDER BY {key}, {ns}"),
        SearchOrder::Recent => " ORDER BY updated_at DESC, namespace DESC, run_key DESC".to_owned(),
    };
    sql += &format!(" LIMIT {}", param(Arg::Int(Some(search.limit))));
    (sql, args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::port::RunCursor;
    use crate::ledger::RunState;

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
        let (sql, args) = search_sql(Dialect::Postgres, &search);
        assert!(sql.contains("run_key COLLATE \"C\" >= $1 AND run_key COLLATE \"C\" < $2"));
        assert!(sql.contains("ORDER BY run_key COLLATE \"C\", namespace COLLATE \"C\" LIMIT $5"));
        assert_eq!(args.clone().into_inner()[1], text("ord\u{7f}"));
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
        let (sql, args) = search_sql(Dialect::Sqlite, &search);
        assert!(sql.contains("state = $1"));
        assert!(
            sql.contains("(updated_at, namespace, run_key) < ($4, $2, $3)"),
            "{sql}"
        );
        assert!(sql.ends_with("ORDER BY updated_at DESC, namespace DESC, run_key DESC LIMIT $5"));
        assert_eq!(args.len(), 5);
    }
}
