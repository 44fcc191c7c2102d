//! The audit append, single and batched: an entry inserted and its run's
//! chain head moved to it, in one round trip. Here, under [`super`],
//! because it writes `runs` (the head, never the state).

use crate::db::sql::Dialect;

/// The single and batched audit appends: the entry inserted and its run's
/// chain head moved, in one round trip.
pub(super) fn statements(dialect: Dialect) -> (String, String) {
    let insert = crate::db::sql::audit::INSERT_AUDIT;
    let move_head = "UPDATE runs SET audit_head = $11 WHERE namespace = $1 AND run_key = $2";
    let rows = dialect.json_rows(
        "$1",
        &[
            ("v_ns", "text"),
            ("v_key", "text"),
            ("v_seq", "bigint"),
            ("v_kind", "text"),
            ("v_actor", "text"),
            ("v_from", "text"),
            ("v_to", "text"),
            ("v_version", "bigint"),
            ("v_detail", "text"),
            ("v_prev", "text"),
            ("v_hash", "text"),
            ("v_at", "bigint"),
        ],
    );
    let insert_many = format!(
        "INSERT INTO audit_events (namespace, run_key, seq, kind, actor, from_state, to_state, \
             version, detail, prev_hash, hash, created_at) \
         SELECT v_ns, v_key, v_seq, v_kind, v_actor, v_from, v_to, v_version, v_detail, v_prev, \
             v_hash, v_at FROM {rows}"
    );
    let move_heads = format!(
        "UPDATE runs AS r SET audit_head = v.v_hash FROM {rows} \
         WHERE r.namespace = v.v_ns AND r.run_key = v.v_key"
    );
    match dialect {
        // sqlx runs each statement of a SQLite query string in turn,
        // binding `$N` by number in each.
        Dialect::Sqlite => (
            format!("{insert}; {move_head}"),
            format!("{insert_many}; {move_heads}"),
        ),
        Dialect::Postgres => (
            format!("WITH appended AS ({insert}) {move_head}"),
            format!("WITH appended AS ({insert_many}) {move_heads}"),
        ),
    }
}
