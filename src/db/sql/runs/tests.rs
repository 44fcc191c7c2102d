//! The run statements, checked across dialects.

use super::*;

/// Spells SQLite's `$1` (not `$10`…) as PostgreSQL's clock call.
fn as_pg_time(sql: &str) -> String {
    let mut out = String::new();
    let mut rest = sql;
    while let Some(at) = rest.find("$1") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        if after.starts_with(|c: char| c.is_ascii_digit()) {
            out.push_str("$1");
        } else {
            out.push_str("og_now_ms($1)");
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The dialects differ only in the clock, the two-argument minimum and
/// how a column is kept off its index (`Dialect::unindexed`).
#[test]
fn dialects_differ_only_in_time_min_and_unindexed_state() {
    let lite = RunStatements::new(Dialect::Sqlite);
    let pg = RunStatements::new(Dialect::Postgres);
    assert_eq!(as_pg_time(&lite.claim), pg.claim);
    let renew = as_pg_time(&lite.renew)
        .replace("MIN(", "LEAST(")
        .replace("+state", "(state || '')");
    assert_eq!(renew, pg.renew);
    assert!(lite.finish[&Move::Complete].contains("+state IN ('processing')"));
}

#[test]
fn the_recovery_moves_repeat_their_rules_and_a_release_restarts_the_budget() {
    let st = RunStatements::new(Dialect::Sqlite);
    assert!(st.exhaust.contains("+state IN ('failed_retryable')"));
    assert!(st.exhaust.contains("reclaims >= $5"), "{}", st.exhaust);
    assert!(st
        .strand
        .contains("version = $5 AND +state IN ('processing')"));
    assert!(
        st.strand.contains("lease_expires_at + $6 <= $1"),
        "{}",
        st.strand
    );
    let release = &st.operator_move[&Move::ReplayRelease];
    assert!(
        release.contains("reclaims = 0, budget_started_at = $1"),
        "{release}"
    );
    assert!(!st.operator_move[&Move::ReplayUngated].contains("reclaims = 0"));
    assert!(st.claim.contains("reclaims = runs.reclaims + 1"));
    assert!(st.claim.contains("runs.reclaims >= $15"), "{}", st.claim);
}
