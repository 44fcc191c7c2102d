//! The SQL of dead letters and replacement links, written
//! once for both backends. As everywhere, `$1` is the time slot wherever
//! a statement reads the clock.

use super::Dialect;
use crate::db::exec::{Arg, Args};
use crate::deadletter::DeadLetterFilter;

/// The `dead_letters` columns read back, joined with the run's current
/// state, in [`crate::db::rows::DeadLetterRow`] order.
const DL_SELECT: &str = "SELECT d.id, d.namespace, d.run_key, d.class, d.component, \
     d.raw_event_id, d.detail, d.created_at, d.resolved_at, d.resolution, d.event_id, \
     d.correlation_id, d.operation, d.workflow_version, d.schema_version, d.payload_ref, \
     d.payload_hash, d.error, d.attempts, d.last_evidence, d.run_state, d.next_action, \
     d.previous_id, d.owner, d.retain_until, d.replay_count, d.resolved_by, d.resolution_note, \
     d.replaced_by_namespace, d.replaced_by_key, d.last_request, r.state AS current_state \
     FROM dead_letters d LEFT JOIN runs r ON r.namespace = d.namespace AND r.run_key = d.run_key";

/// The dead-letter statements, spelled for one backend.
#[derive(Debug, Clone)]
pub struct DeadLetterStatements {
    /// Records a dead letter (23 binds, see `record_dead_letter`).
    pub insert: String,
    /// Earlier records of a run that were replayed, newest first. Binds: namespace, key.
    pub replayed_before: String,
    /// One record with its run's state. Binds: id.
    pub fetch: String,
    /// Ends an open record. Binds: now, id, resolution, actor, note,
    /// retain_ms, replay increment, replaced_by namespace, replaced_by key.
    pub resolve: String,
    /// Assigns an owner. Binds: id, owner.
    pub assign: String,
    /// Records a replacement link. Binds: namespace, key, replaced_by_ns,
    /// replaced_by_key, dead_letter_id, actor, reason, created_at.
    pub insert_link: String,
    /// Links from or to a run. Binds: namespace, key.
    pub links: String,
}

impl DeadLetterStatements {
    /// The statements spelled for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        let now = dialect.now();
        Self {
            insert: "INSERT INTO dead_letters (id, namespace, run_key, class, component, raw_event_id, \
                 detail, created_at, event_id, correlation_id, operation, workflow_version, \
                 schema_version, payload_ref, payload_hash, error, attempts, last_evidence, run_state, \
                 next_action, previous_id, replay_count, last_request) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
                 $18, $19, $20, $21, $22, $23)"
                .into(),
            replayed_before: "SELECT id FROM dead_letters WHERE namespace = $1 AND run_key = $2 \
                 AND resolution = 'replayed' ORDER BY created_at DESC, id DESC"
                .into(),



            fetch: format!("{DL_SELECT} WHERE d.id = $1"),
            resolve: format!(
                "UPDATE dead_letters SET resolution = $3, resolved_at = {now}, resolved_by = $4, \
                     resolution_note = $5, retain_until = {now} + $6, next_action = NULL, \
                     replay_count = replay_count + $7, replaced_by_namespace = $8, \
                     replaced_by_key = $9 \
                 WHERE id = $2 AND resolved_at IS NULL"
            ),
            assign: "UPDATE dead_letters SET owner = $2 WHERE id = $1".into(),






            insert_link: "INSERT INTO run_links (namespace, run_key, replaced_by_ns, replaced_by_key, \
                 dead_letter_id, actor, reason, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
                .into(),
            links: "SELECT namespace, run_key, replaced_by_ns, replaced_by_key, dead_letter_id, actor, \
                 reason, created_at FROM run_links \
                 WHERE (namespace = $1 AND run_key = $2) OR (replaced_by_ns = $1 AND replaced_by_key = $2) \
                 ORDER BY created_at"
                .into(),

        }
    }

    /// The list query for `filter` and its parameters, oldest first.
    pub fn list(filter: &DeadLetterFilter) -> (String, Args<'static>) {
        let mut sql = format!("{DL_SELECT} WHERE 1 = 1");
        let mut args = Args::new();
        let mut add = |clause: &str, value: Arg<'static>, args: &mut Args<'static>| {
            args.push(value);
            sql.push_str(&clause.replace('?', &format!("${}", args.len())));
        };
        if let Some(class) = filter.class {
            add(" AND d.class = ?", text(class.as_str()), &mut args);
        }
        if let Some(ns) = &filter.namespace {
            add(" AND d.namespace = ?", text(ns), &mut args);
        }
        if let Some(state) = filter.state {
            add(" AND r.state = ?", text(state.as_str()), &mut args);
        }
        if let Some(before) = filter.created_before {
            add(" AND d.created_at <= ?", Arg::Int(Some(before)), &mut args);
        }
        if let Some(after) = filter.created_after {
            add(" AND d.created_at >= ?", Arg::Int(Some(after)), &mut args);
        }
        if let Some(cursor) = &filter.after {
            args.push(cursor.at);
            args.push(cursor.id.clone());
            let (a, b) = (args.len() - 1, args.len());
            sql.push_str(&format!(
                " AND (d.created_at > ${a} OR (d.created_at = ${a} AND d.id > ${b}))"
            ));
        }
        match filter.resolved {
            Some(true) => sql.push_str(" AND d.resolved_at IS NOT NULL"),
            Some(false) => sql.push_str(" AND d.resolved_at IS NULL"),
            None => {}
        }
        args.push(filter.limit);
        sql.push_str(&format!(
            " ORDER BY d.created_at, d.id LIMIT ${}",
            args.len()
        ));
        (sql, args)
    }
}

/// An owned text parameter.
pub(crate) fn text(value: &str) -> Arg<'static> {
    Arg::Text(Some(value.to_owned().into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deadletter::{Cursor, DeadLetterClass};

    #[test]
    fn list_numbers_its_binds_in_order() {
        let filter = DeadLetterFilter {
            class: Some(DeadLetterClass::Permanent),
            namespace: Some("crm".into()),
            after: Some(Cursor {
                at: 5,
                id: "x".into(),
            }),
            resolved: Some(false),
            limit: 10,
            ..DeadLetterFilter::default()
        };
        let (sql, args) = DeadLetterStatements::list(&filter);
        assert!(sql.contains("d.class = $1 AND d.namespace = $2"), "{sql}");
        assert!(
            sql.contains("d.created_at > $3 OR (d.created_at = $3 AND d.id > $4)"),
            "{sql}"
        );
        assert!(sql.ends_with("LIMIT $5"), "{sql}");
        assert_eq!(args.len(), 5);
        assert!(sql.contains("resolved_at IS NULL"));
    }
}
