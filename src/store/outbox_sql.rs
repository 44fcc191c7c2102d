//! The outbox's SQL, written once for both backends (see [`super::sql`]).

use super::sql::{Dialect, EFFECT_COLUMNS, RUN_COLUMNS};

/// The outbox statements, spelled for one backend.
#[derive(Debug, Clone)]
pub struct OutboxStatements {
    /// Leases due effects of approved runs (and decision callbacks,
    /// whatever their run's state) on enabled targets, one
    /// statement per state so each walks the `(state, next_attempt_at)`
    /// index in order instead of sorting every due row: `unknown` ones
    /// (reconciliation, few) first, then `pending`.
    /// Binds: now, owner, lease_ms, limit.
    pub lease: [String; 2],
    /// The run fields the sends of one lease need. Binds: owner.
    pub runs_for_send: String,
    /// Records a verdict by compare-and-set on the lease. Binds: now, id,
    /// owner, state, next_attempt_at, sent (0/1), external_ref, status,
    /// class, error, started_at.
    pub record: String,
    /// Appends an attempt's evidence. Binds: effect_id, dispatcher,
    /// started_at, finished_at, class, status, error, evidence.
    pub insert_attempt: String,
    /// `sending` effects whose lease expired become `unknown`. Binds: now.
    pub expire: String,
    /// Completes an approved run with no outstanding effect (callbacks do
    /// not count). Binds: now, namespace, key.
    pub complete_run: String,
    /// Moves an approved run to `$4` with reason `$5`. Binds: now, namespace, key, state, reason.
    pub fail_run: String,
    /// Cancels a pending effect. Binds: now, id.
    pub cancel: String,
    /// One effect. Binds: id.
    pub effect: String,
    /// An effect's attempts. Binds: effect_id.
    pub attempts: String,
    /// Sets a kill-switch scope. Binds: scope, enabled, actor, now.
    pub set_switch: String,
    /// Every kill-switch scope.
    pub switches: String,
    /// The last audit entry of a system key. Binds: namespace, key.
    pub last_audit: String,
    /// Effects waiting per target and state, for metrics.
    pub backlog: String,
}

impl OutboxStatements {
    /// The statements spelled for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        let now = dialect.now();
        let skip_locked = match dialect {
            Dialect::Sqlite => "",
            Dialect::Postgres => "FOR UPDATE OF e SKIP LOCKED",
        };
        Self {
            lease: ["unknown", "pending"].map(|state| {
                format!(
                    "UPDATE effects SET state = 'sending', lease_owner = $2, \
                         lease_expires_at = {now} + $3, updated_at = {now} \
                     WHERE id IN (SELECT e.id FROM effects e \
                         JOIN runs r ON r.namespace = e.namespace AND r.run_key = e.run_key \
                         WHERE e.state = '{state}' AND e.next_attempt_at <= {now} \
                           AND (e.not_before IS NULL OR e.not_before <= {now}) \
                           AND (r.state = 'approved' OR e.operation = '{callback}') \
                           AND NOT EXISTS (SELECT 1 FROM action_switches s WHERE s.enabled = 0 \
                               AND (s.scope = '*' OR s.scope = e.target)) \
                         ORDER BY e.next_attempt_at LIMIT $4 {skip_locked}) \
                       AND state = '{state}' \
                     RETURNING {EFFECT_COLUMNS}",
                    callback = crate::approval::CALLBACK_OPERATION,
                )
            }),
            runs_for_send: "SELECT DISTINCT r.namespace, r.run_key, r.version, r.correlation_id \
                 FROM effects e JOIN runs r ON r.namespace = e.namespace AND r.run_key = e.run_key \
                 WHERE e.state = 'sending' AND e.lease_owner = $1"
                .into(),
            record: format!(
                "UPDATE effects SET state = $4, next_attempt_at = COALESCE($5, next_attempt_at), \
                     attempts = attempts + $6, external_ref = COALESCE($7, external_ref), \
                     last_status = COALESCE($8, last_status), last_class = COALESCE($9, last_class), \
                     last_error = $10, \
                     first_sent_at = CASE WHEN $6 > 0 THEN COALESCE(first_sent_at, $11) ELSE first_sent_at END, \
                     lease_owner = NULL, lease_expires_at = NULL, updated_at = {now} \
                 WHERE id = $2 AND lease_owner = $3 AND state = 'sending' \
                 RETURNING {EFFECT_COLUMNS}"
            ),
            insert_attempt: "INSERT INTO effect_attempts (effect_id, attempt, dispatcher, started_at, \
                 finished_at, class, status, error, evidence) \
                 VALUES ($1, (SELECT COUNT(*) + 1 FROM effect_attempts WHERE effect_id = $1), \
                     $2, $3, $4, $5, $6, $7, $8)"
                .into(),
            expire: format!(
                "UPDATE effects SET state = 'unknown', last_class = 'lost', next_attempt_at = {now}, \
                     last_error = 'the dispatcher holding the lease stopped before recording', \
                     lease_owner = NULL, lease_expires_at = NULL, updated_at = {now} \
                 WHERE state = 'sending' AND lease_expires_at <= {now}"
            ),
            complete_run: format!(
                "UPDATE runs SET state = 'completed', prev_state = state, version = version + 1, \
                     audit_seq = audit_seq + 1, updated_at = {now} \
                 WHERE namespace = $2 AND run_key = $3 AND state = 'approved' \
                   AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.namespace = $2 AND e.run_key = $3 \
                       AND e.state NOT IN ('completed', 'cancelled') \
                       AND e.operation <> '{callback}') \
                 RETURNING {RUN_COLUMNS}",
                callback = crate::approval::CALLBACK_OPERATION,
            ),
            fail_run: format!(
                "UPDATE runs SET state = $4, prev_state = state, version = version + 1, \
                     reason = $5, last_error = $5, audit_seq = audit_seq + 1, updated_at = {now} \
                 WHERE namespace = $2 AND run_key = $3 AND state = 'approved' \
                 RETURNING {RUN_COLUMNS}"
            ),
            cancel: format!(
                "UPDATE effects SET state = 'cancelled', updated_at = {now} \
                 WHERE id = $2 AND state = 'pending' RETURNING {EFFECT_COLUMNS}"
            ),
            effect: format!("SELECT {EFFECT_COLUMNS} FROM effects WHERE id = $1"),
            attempts: "SELECT attempt, dispatcher, started_at, finished_at, class, status, error, evidence \
                 FROM effect_attempts WHERE effect_id = $1 ORDER BY attempt"
                .into(),
            set_switch: "INSERT INTO action_switches (scope, enabled, changed_by, changed_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (scope) DO UPDATE SET enabled = excluded.enabled, \
                 changed_by = excluded.changed_by, changed_at = excluded.changed_at"
                .into(),
            switches: "SELECT scope, enabled, changed_by, changed_at FROM action_switches ORDER BY scope"
                .into(),
            last_audit: "SELECT seq, hash FROM audit_events WHERE namespace = $1 AND run_key = $2 \
                 ORDER BY seq DESC LIMIT 1"
                .into(),
            backlog: "SELECT target, state, COUNT(*) FROM effects \
                 WHERE state IN ('pending', 'sending', 'unknown') GROUP BY target, state"
                .into(),
        }
    }
}
