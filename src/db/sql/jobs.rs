//! The SQL of bulk replay jobs and their frozen items, written once for
//! both backends. As everywhere, `$1` is the time slot wherever a
//! statement reads the clock.

use super::Dialect;
use crate::deadletter::JobMove;

const JOB_SELECT: &str = "SELECT j.id, j.state, j.created_by, j.reason, j.rate_per_sec, \
     j.selection, j.summary, j.total, j.lease_owner, j.lease_expires_at, j.changed_by, \
     j.created_at, j.updated_at, j.finished_at, j.four_eyes, j.started_by, \
     (SELECT COUNT(*) FROM replay_job_items i WHERE i.job_id = j.id AND i.state = 'replayed') AS replayed, \
     (SELECT COUNT(*) FROM replay_job_items i WHERE i.job_id = j.id AND i.state = 'refused') AS refused \
     FROM replay_jobs j";

const ITEM_COLUMNS: &str = "job_id, seq, dead_letter_id, state, outcome, finished_at";

/// The bulk replay job statements.
#[derive(Debug, Clone)]
pub struct JobStatements {
    /// A running job, or a stopped one waiting for its second operator
    /// (`four_eyes` = 1). Binds: now, id, created_by, reason, rate,
    /// selection, summary, total, four_eyes.
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
    /// `stopped → running`; a four-eyes job never by its creator, and its
    /// first starter is recorded. Binds: now, id, actor.
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

impl JobStatements {
    /// The statements spelled for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        let now = dialect.now();
        // Free: never leased, expired (its runner died), or already ours.
        let free =
            format!("(lease_owner IS NULL OR lease_expires_at <= {now} OR lease_owner = $2)");
        Self {
            insert: format!(
                "INSERT INTO replay_jobs (id, state, created_by, reason, rate_per_sec, selection, \
                     summary, total, changed_by, created_at, updated_at, four_eyes) \
                 VALUES ($2, CASE WHEN $9 = 1 THEN 'stopped' ELSE 'running' END, $3, $4, $5, $6, \
                     $7, $8, $3, {now}, {now}, $9)"
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
                "UPDATE replay_jobs SET state = {to}, lease_owner = NULL, lease_expires_at = NULL, \
                     changed_by = $3, updated_at = {now} WHERE id = $2 AND state IN {from}",
                to = JobMove::Stop.rule().sql_target(),
                from = JobMove::Stop.rule().sql_guard(),
            ),
            resume: format!(
                "UPDATE replay_jobs SET state = {to}, changed_by = $3, updated_at = {now}, \
                     started_by = CASE WHEN four_eyes = 1 AND started_by IS NULL THEN $3 \
                         ELSE started_by END \
                 WHERE id = $2 AND state IN {from} \
                   AND (four_eyes = 0 OR created_by <> $3)",
                to = JobMove::Resume.rule().sql_target(),
                from = JobMove::Resume.rule().sql_guard(),
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
                 WHERE job_id = $2 AND seq = $3 AND state IN {from}",
                from = JobMove::item().sql_guard(),
            ),
            complete: format!(
                "UPDATE replay_jobs SET state = {to}, finished_at = {now}, lease_owner = NULL, \
                     lease_expires_at = NULL, updated_at = {now} \
                 WHERE id = $2 AND lease_owner = $3 AND state IN {from} \
                   AND NOT EXISTS (SELECT 1 FROM replay_job_items i WHERE i.job_id = $2 \
                       AND i.state = 'pending')",
                to = JobMove::Complete.rule().sql_target(),
                from = JobMove::Complete.rule().sql_guard(),
            ),
            release: "UPDATE replay_jobs SET lease_owner = NULL, lease_expires_at = NULL \
                 WHERE id = $1 AND lease_owner = $2"
                .into(),
        }
    }
}
