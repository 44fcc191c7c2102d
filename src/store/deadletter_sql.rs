//! The SQL of dead letters, replacement links and bulk replay jobs, written
//! once for both backends (see [`super::sql`]). As there, `$1` is the time
//! slot wherever a statement reads the clock.

use super::sql::{Dialect, RUN_COLUMNS};
use crate::deadletter::DeadLetterFilter;
use crate::ledger::Move;

/// The `dead_letters` columns read back, joined with the run's current
/// state, in [`super::deadletter_rows::DeadLetterRow`] order.
const DL_SELECT: &str = "SELECT d.id, d.namespace, d.run_key, d.class, d.component, \
     d.raw_event_id, d.detail, d.created_at, d.resolved_at, d.resolution, d.event_id, \
     d.correlation_id, d.operation, d.workflow_version, d.schema_version, d.payload_ref, \
     d.payload_hash, d.error, d.attempts, d.last_evidence, d.run_state, d.next_action, \
     d.previous_id, d.owner, d.retain_until, d.replay_count, d.resolved_by, d.resolution_note, \
     d.replaced_by_namespace, d.replaced_by_key, r.state AS current_state \
     FROM dead_letters d LEFT JOIN runs r ON r.namespace = d.namespace AND r.run_key = d.run_key";

const JOB_SELECT: &str = "SELECT j.id, j.state, j.created_by, j.reason, j.rate_per_sec, \
     j.selection, j.summary, j.total, j.lease_owner, j.lease_expires_at, j.changed_by, \
     j.created_at, j.updated_at, j.finished_at, \
     (SELECT COUNT(*) FROM replay_job_items i WHERE i.job_id = j.id AND i.state = 'replayed') AS replayed, \
     (SELECT COUNT(*) FROM replay_job_items i WHERE i.job_id = j.id AND i.state = 'refused') AS refused \
     FROM replay_jobs j";

const ITEM_COLUMNS: &str = "job_id, seq, dead_letter_id, state, outcome, finished_at";

/// A value bound into a list query built at call time.
#[derive(Debug, Clone, PartialEq)]
pub enum Bind {
    /// Text.
    Text(String),
    /// An integer.
    Int(i64),
}

/// The dead-letter statements, spelled for one backend.
#[derive(Debug, Clone)]
pub struct DeadLetterStatements {
    /// Records a dead letter (22 binds, see `record_dead_letter`).
    pub insert: String,
    /// Earlier records of a run that were replayed, newest first. Binds: namespace, key.
    pub replayed_before: String,
    /// The accepted raw delivery of an ingress run. Binds: source, event_id.
    pub accepted_raw_event: String,
    /// A raw delivery's payload hash. Binds: id.
    pub raw_event_hash: String,
    /// A raw delivery. Binds: id.
    pub raw_event: String,
    /// One record with its run's state. Binds: id.
    pub fetch: String,
    /// Ends an open record. Binds: now, id, resolution, actor, note,
    /// retain_ms, replay increment, replaced_by namespace, replaced_by key.
    pub resolve: String,
    /// Assigns an owner. Binds: id, owner.
    pub assign: String,
    /// Operator moves of a run without a lease, per move. Binds: now,
    /// namespace, key, reason.
    pub operator_move: Vec<(Move, String)>,
    /// Failure reports by execution ref, per move. Binds: now,
    /// execution_ref, last_error, reason.
    pub fail_by_execution: Vec<(Move, String)>,
    /// Runs holding an execution ref. Binds: execution_ref.
    pub runs_by_execution: String,
    /// A run's effects. Binds: namespace, key.
    pub count_effects: String,
    /// Puts a replayed run's unfinished effects back to `pending` with a
    /// fresh attempt budget and the same keys. Binds: now, namespace, key.
    pub requeue_effects: String,
    /// Advances a run's audit sequence for an entry that moves nothing.
    /// Binds: namespace, key.
    pub bump_audit: String,
    /// Records a replacement link. Binds: namespace, key, replaced_by_ns,
    /// replaced_by_key, dead_letter_id, actor, reason, created_at.
    pub insert_link: String,
    /// Links from or to a run. Binds: namespace, key.
    pub links: String,
    /// The job statements.
    pub jobs: JobStatements,
}

/// The bulk replay job statements.
#[derive(Debug, Clone)]
pub struct JobStatements {
    /// Binds: now, id, created_by, reason, rate, selection, summary, total.
    pub insert: String,
    /// Binds: job_id, seq, dead_letter_id.
    pub insert_item: String,
    /// One job with counts. Binds: id.
    pub fetch: String,
    /// Newest jobs first. Binds: limit.
    pub list: String,
    /// Items after a position. Binds: job_id, after_seq, limit.
    pub items: String,
    /// `running → stopped`, dropping the lease. Binds: now, id, actor.
    pub stop: String,
    /// `stopped → running`. Binds: now, id, actor.
    pub resume: String,
    /// Leases the oldest runnable job that is free, expired or already the
    /// caller's. Binds: now, owner, lease_ms.
    pub lease: String,
    /// Extends the caller's lease on a running job. Binds: now, id, owner, lease_ms.
    pub renew: String,
    /// The next pending item. Binds: job_id.
    pub next_item: String,
    /// Marks a pending item. Binds: now, job_id, seq, state, outcome.
    pub mark_item: String,
    /// Completes a running job with no pending item. Binds: now, id, owner.
    pub complete: String,
    /// Drops the caller's lease. Binds: id, owner.
    pub release: String,
}

impl DeadLetterStatements {
    /// The statements spelled for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        let now = dialect.now();
        let operator_move = [
            Move::Resolve,
            Move::ReplayUngated,
            Move::ReplayRelease,
            Move::ReplayGated,
        ]
        .into_iter()
        .map(|mv| {
            let sql = format!(
                "UPDATE runs SET state = '{to}', prev_state = state, version = version + 1, \
                         reason = $4, lease_owner = NULL, lease_expires_at = NULL, \
                         lease_started_at = NULL, audit_seq = audit_seq + 1, updated_at = {now} \
                     WHERE namespace = $2 AND run_key = $3 AND state IN {guard} \
                     RETURNING {RUN_COLUMNS}",
                to = mv.to_state().as_str(),
                guard = mv.sql_guard()
            );
            (mv, sql)
        })
        .collect();
        let fail_by_execution = [Move::ExecutionFailed, Move::WorkflowError]
            .into_iter()
            .map(|mv| {
                let sql = format!(
                    "UPDATE runs SET state = '{to}', prev_state = state, version = version + 1, \
                         last_error = $3, reason = $4, lease_owner = NULL, lease_expires_at = NULL, \
                         lease_started_at = NULL, audit_seq = audit_seq + 1, updated_at = {now} \
                     WHERE execution_ref = $2 AND state IN {guard} \
                     RETURNING {RUN_COLUMNS}",
                    to = mv.to_state().as_str(),
                    guard = mv.sql_guard()
                );
                (mv, sql)
            })
            .collect();
        Self {
            insert: "INSERT INTO dead_letters (id, namespace, run_key, class, component, raw_event_id, \
                 detail, created_at, event_id, correlation_id, operation, workflow_version, \
                 schema_version, payload_ref, payload_hash, error, attempts, last_evidence, run_state, \
                 next_action, previous_id, replay_count) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
                 $18, $19, $20, $21, $22)"
                .into(),
            replayed_before: "SELECT id FROM dead_letters WHERE namespace = $1 AND run_key = $2 \
                 AND resolution = 'replayed' ORDER BY created_at DESC, id DESC"
                .into(),
            accepted_raw_event: "SELECT id FROM raw_events WHERE source = $1 AND event_id = $2 \
                 AND status = 'accepted'"
                .into(),
            raw_event_hash: "SELECT payload_hash FROM raw_events WHERE id = $1".into(),
            raw_event: "SELECT id, source, event_id, event_type, status, payload_hash, content_type, \
                 headers, body, received_at FROM raw_events WHERE id = $1"
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
            operator_move,
            fail_by_execution,
            runs_by_execution: format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE execution_ref = $1 ORDER BY namespace, run_key"
            ),
            count_effects: "SELECT COUNT(*) FROM effects WHERE namespace = $1 AND run_key = $2"
                .into(),
            requeue_effects: format!(
                "UPDATE effects SET state = 'pending', attempts = 0, first_sent_at = NULL, \
                     next_attempt_at = {now}, last_status = NULL, last_class = NULL, \
                     last_error = NULL, lease_owner = NULL, lease_expires_at = NULL, \
                     updated_at = {now} \
                 WHERE namespace = $2 AND run_key = $3 AND state IN ('pending', 'failed', 'unknown')"
            ),
            bump_audit: format!(
                "UPDATE runs SET audit_seq = audit_seq + 1 WHERE namespace = $1 AND run_key = $2 \
                 RETURNING {RUN_COLUMNS}"
            ),
            insert_link: "INSERT INTO run_links (namespace, run_key, replaced_by_ns, replaced_by_key, \
                 dead_letter_id, actor, reason, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
                .into(),
            links: "SELECT namespace, run_key, replaced_by_ns, replaced_by_key, dead_letter_id, actor, \
                 reason, created_at FROM run_links \
                 WHERE (namespace = $1 AND run_key = $2) OR (replaced_by_ns = $1 AND replaced_by_key = $2) \
                 ORDER BY created_at"
                .into(),
            jobs: JobStatements::new(dialect),
        }
    }

    /// The list query for `filter` and its binds, oldest first.
    pub fn list(filter: &DeadLetterFilter) -> (String, Vec<Bind>) {
        let mut sql = format!("{DL_SELECT} WHERE 1 = 1");
        let mut binds = Vec::new();
        let mut add = |clause: &str, value: Bind, binds: &mut Vec<Bind>| {
            binds.push(value);
            sql.push_str(&clause.replace('?', &format!("${}", binds.len())));
        };
        if let Some(class) = filter.class {
            add(
                " AND d.class = ?",
                Bind::Text(class.as_str().into()),
                &mut binds,
            );
        }
        if let Some(ns) = &filter.namespace {
            add(" AND d.namespace = ?", Bind::Text(ns.clone()), &mut binds);
        }
        if let Some(state) = filter.state {
            add(
                " AND r.state = ?",
                Bind::Text(state.as_str().into()),
                &mut binds,
            );
        }
        if let Some(before) = filter.created_before {
            add(" AND d.created_at <= ?", Bind::Int(before), &mut binds);
        }
        if let Some(after) = filter.created_after {
            add(" AND d.created_at >= ?", Bind::Int(after), &mut binds);
        }
        if let Some(cursor) = &filter.after {
            binds.push(Bind::Int(cursor.created_at));
            binds.push(Bind::Text(cursor.id.clone()));
            let (a, b) = (binds.len() - 1, binds.len());
            sql.push_str(&format!(
                " AND (d.created_at > ${a} OR (d.created_at = ${a} AND d.id > ${b}))"
            ));
        }
        match filter.resolved {
            Some(true) => sql.push_str(" AND d.resolved_at IS NOT NULL"),
            Some(false) => sql.push_str(" AND d.resolved_at IS NULL"),
            None => {}
        }
        binds.push(Bind::Int(filter.limit));
        sql.push_str(&format!(
            " ORDER BY d.created_at, d.id LIMIT ${}",
            binds.len()
        ));
        (sql, binds)
    }
}

impl JobStatements {
    fn new(dialect: Dialect) -> Self {
        let now = dialect.now();
        // Free: never leased, expired (its runner died), or already ours.
        let free =
            format!("(lease_owner IS NULL OR lease_expires_at <= {now} OR lease_owner = $2)");
        Self {
            insert: format!(
                "INSERT INTO replay_jobs (id, state, created_by, reason, rate_per_sec, selection, \
                     summary, total, changed_by, created_at, updated_at) \
                 VALUES ($2, 'running', $3, $4, $5, $6, $7, $8, $3, {now}, {now})"
            ),
            insert_item: "INSERT INTO replay_job_items (job_id, seq, dead_letter_id, state) \
                 VALUES ($1, $2, $3, 'pending')"
                .into(),
            fetch: format!("{JOB_SELECT} WHERE j.id = $1"),
            list: format!("{JOB_SELECT} ORDER BY j.created_at DESC, j.id DESC LIMIT $1"),
            items: format!(
                "SELECT {ITEM_COLUMNS} FROM replay_job_items WHERE job_id = $1 AND seq > $2 \
                 ORDER BY seq LIMIT $3"
            ),
            stop: format!(
                "UPDATE replay_jobs SET state = 'stopped', lease_owner = NULL, lease_expires_at = NULL, \
                     changed_by = $3, updated_at = {now} WHERE id = $2 AND state = 'running'"
            ),
            resume: format!(
                "UPDATE replay_jobs SET state = 'running', changed_by = $3, updated_at = {now} \
                 WHERE id = $2 AND state = 'stopped'"
            ),
            lease: format!(
                "UPDATE replay_jobs SET lease_owner = $2, lease_expires_at = {now} + $3, \
                     updated_at = {now} \
                 WHERE id = (SELECT id FROM replay_jobs WHERE state = 'running' AND {free} \
                     ORDER BY created_at, id LIMIT 1) \
                   AND state = 'running' AND {free} \
                 RETURNING id"
            ),
            renew: format!(
                "UPDATE replay_jobs SET lease_expires_at = {now} + $4, updated_at = {now} \
                 WHERE id = $2 AND lease_owner = $3 AND state = 'running' RETURNING id"
            ),
            next_item: format!(
                "SELECT {ITEM_COLUMNS} FROM replay_job_items WHERE job_id = $1 AND state = 'pending' \
                 ORDER BY seq LIMIT 1"
            ),
            mark_item: format!(
                "UPDATE replay_job_items SET state = $4, outcome = $5, finished_at = {now} \
                 WHERE job_id = $2 AND seq = $3 AND state = 'pending'"
            ),
            complete: format!(
                "UPDATE replay_jobs SET state = 'completed', finished_at = {now}, lease_owner = NULL, \
                     lease_expires_at = NULL, updated_at = {now} \
                 WHERE id = $2 AND lease_owner = $3 AND state = 'running' \
                   AND NOT EXISTS (SELECT 1 FROM replay_job_items i WHERE i.job_id = $2 \
                       AND i.state = 'pending')"
            ),
            release: "UPDATE replay_jobs SET lease_owner = NULL, lease_expires_at = NULL \
                 WHERE id = $1 AND lease_owner = $2"
                .into(),
        }
    }
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
                created_at: 5,
                id: "x".into(),
            }),
            resolved: Some(false),
            limit: 10,
            ..DeadLetterFilter::default()
        };
        let (sql, binds) = DeadLetterStatements::list(&filter);
        assert!(sql.contains("d.class = $1 AND d.namespace = $2"), "{sql}");
        assert!(
            sql.contains("d.created_at > $3 OR (d.created_at = $3 AND d.id > $4)"),
            "{sql}"
        );
        assert!(sql.ends_with("LIMIT $5"), "{sql}");
        assert_eq!(binds.len(), 5);
        assert!(sql.contains("resolved_at IS NULL"));
    }
}
