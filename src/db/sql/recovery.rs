//! The recovery sweeper's reads: the runs its rules may move, one
//! selection (a namespace's rules) at a time. The moves themselves are in
//! [`super::runs`] (`strand`, `exhaust`), which repeat the rule.

use super::{Dialect, RUN_COLUMNS};
use crate::ledger::port::{RecoveryKind, RecoverySelection};
use crate::ledger::{budget_spent_sql, stranded_sql, BudgetSql};

/// The runs `kind` may move under `sel`, oldest first. Binds: now, then
/// for `Stranded` the stranded window and the limit, for
/// `BudgetExhausted` max_reclaims, the retry window and the limit; then
/// the namespace (`only`) or each excluded namespace.
pub fn candidates(dialect: Dialect, sel: &RecoverySelection, kind: RecoveryKind) -> String {
    let now = dialect.now();
    let (rule, order, limit) = match kind {
        RecoveryKind::Stranded => (
            stranded_sql(str::to_owned, now, "$2"),
            "lease_expires_at",
            3,
        ),
        RecoveryKind::BudgetExhausted => (
            budget_spent_sql(
                str::to_owned,
                now,
                BudgetSql {
                    max_reclaims: "$2",
                    retry_window_ms: "$3",
                },
            ),
            "updated_at",
            4,
        ),
    };
    let first = limit + 1;
    let namespaces = match (&sel.only, sel.exclude.len()) {
        (Some(_), _) => format!("AND namespace = ${first}"),
        (None, 0) => String::new(),
        (None, n) => format!("AND namespace NOT IN ({})", super::placeholders(first, n)),
    };
    format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE {rule} {namespaces} \
         ORDER BY {order}, namespace, run_key LIMIT ${limit}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Recovery;

    #[test]
    fn each_selection_binds_its_namespaces_after_the_limit() {
        let sel = RecoverySelection {
            only: None,
            exclude: vec!["a".into(), "b".into()],
            rules: Recovery::default(),
            limit: 10,
        };
        let sql = candidates(Dialect::Sqlite, &sel, RecoveryKind::Stranded);
        assert!(sql.contains("lease_expires_at + $2 <= $1"), "{sql}");
        assert!(sql.contains("namespace NOT IN ($4, $5)"), "{sql}");
        assert!(sql.ends_with("LIMIT $3"), "{sql}");
        let only = RecoverySelection {
            only: Some("a".into()),
            ..sel
        };
        let sql = candidates(Dialect::Postgres, &only, RecoveryKind::BudgetExhausted);
        assert!(sql.contains("reclaims >= $2"), "{sql}");
        assert!(sql.contains("namespace = $5"), "{sql}");
        assert!(sql.ends_with("LIMIT $4"), "{sql}");
    }
}
