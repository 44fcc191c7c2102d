//! The outbox's SQL: effects, their leases and attempts, and the kill
//! switch, written once for both backends. The runs an effect completes
//! or fails are moved by statements in [`super::runs`].

use super::{Dialect, EFFECT_COLUMNS};
use crate::outbox::{EffectMove, EffectRole};

/// The outbox statements, spelled for one backend.
#[derive(Debug, Clone)]
pub struct OutboxStatements {
    /// Inserts an effect unless the same (run, effect_type, target) exists.
    /// Binds: id, namespace, key, operation, effect_type, target, method,
    /// url, headers, body, idempotency_key, spec, not_before, now, role,
    /// schema_version.
    pub insert_effect: String,
    /// One run's effects. Binds: namespace, key.
    pub effects_of: String,
    /// How many effects a run has. Binds: namespace, key.
    pub count_effects: String,
    /// Puts a replayed run's unfinished effects back to `pending` with a
    /// fresh attempt budget and the same keys. Binds: now, namespace, key.
    pub requeue_effects: String,
    /// Replay after a fix: an unfinished effect's corrected body and key,
    /// before its run's effects are re-queued. Binds: now, id, namespace,
    /// key, body, idempotency_key.
    pub correct_effect: String,
    /// Leases one target's due effects of approved runs (and notifications,
    /// whatever their run's state) while the target is enabled,
    /// one statement per state so each walks the `(state, target,
    /// next_attempt_at)` index in order instead of sorting every due row:
    /// `unknown` ones (reconciliation, few) first, then `pending`.
    /// Binds: now, owner, lease_ms, limit, target.
    pub lease: [String; 2],
    /// Run first in a lease transaction (PostgreSQL): plan the lease as a
    /// walk of the due index in order. With statistics that lag behind the
    /// queue (a fresh table, a burst before autovacuum's next ANALYZE) the
    /// planner otherwise reads every due effect and sorts them for each
    /// lease of 64: 30 ms instead of 1 ms with 10,000 due.
    pub lease_plan: Option<String>,
    /// The run fields the sends of one lease need. Binds: owner.
    pub runs_for_send: String,
    /// Records a batch of verdicts, each by compare-and-set on its lease;
    /// returns the effects written (a lost lease returns nothing). Binds:
    /// now, a JSON array of [`VerdictBatchRow`](crate::db::rows::VerdictBatchRow).
    pub record_batch: String,
    /// Run first in a record transaction (PostgreSQL): look a batch's
    /// effects and runs up by key. With lagging statistics the planner
    /// otherwise scans every run (or every `approved` one) and hashes the
    /// batch against it.
    pub record_plan: Option<String>,
    /// Appends attempts' evidence (at most one per effect). Binds: a JSON
    /// array of [`AttemptBatchRow`](crate::db::rows::AttemptBatchRow).
    pub insert_attempts: String,
    /// `sending` effects whose lease expired become `unknown`. Binds: now.
    pub expire: String,
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
}

impl OutboxStatements {
    /// The statements spelled for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        let now = dialect.now();
        // An effect found by its id or its run is never looked for through
        // `effects_due`: with no statistics yet, a state's constant ties
        // the two, and that plan walks every effect in the state.
        let keyed_state = dialect.unindexed("state");
        let skip_locked = match dialect {
            Dialect::Sqlite => "",
            Dialect::Postgres => "FOR UPDATE OF e SKIP LOCKED",
        };
        Self {
            insert_effect: "INSERT INTO effects (id, namespace, run_key, operation, effect_type, \
                     target, method, url, headers, body, idempotency_key, spec, state, not_before, \
                     next_attempt_at, attempts, created_at, updated_at, role, schema_version) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'pending', $13, \
                     COALESCE($13, $14), 0, $14, $14, $15, $16) \
                 ON CONFLICT (namespace, run_key, effect_type, target) DO NOTHING"
                .into(),
            effects_of: format!(
                "SELECT {EFFECT_COLUMNS} FROM effects WHERE namespace = $1 AND run_key = $2 \
                 ORDER BY created_at, id"
            ),
            count_effects: "SELECT COUNT(*) FROM effects WHERE namespace = $1 AND run_key = $2"
                .into(),
            requeue_effects: format!(
                "UPDATE effects SET state = {to}, attempts = 0, first_sent_at = NULL, \
                     next_attempt_at = {now}, last_status = NULL, last_class = NULL, \
                     last_error = NULL, lease_owner = NULL, lease_expires_at = NULL, \
                     updated_at = {now} \
                 WHERE namespace = $2 AND run_key = $3 AND {keyed_state} IN {from}",
                to = EffectMove::Requeue.rule().sql_target(),
                from = EffectMove::Requeue.rule().sql_guard(),
            ),
            correct_effect: format!(
                "UPDATE effects SET body = $5, idempotency_key = $6, updated_at = {now} \
                 WHERE id = $2 AND namespace = $3 AND run_key = $4 AND {keyed_state} IN {from}",
                from = EffectMove::Requeue.rule().sql_guard(),
            ),
            lease_plan: dialect.planner_off(&["enable_sort", "enable_bitmapscan"]),
            record_plan: dialect.planner_off(&["enable_seqscan", "enable_bitmapscan"]),
            lease: ["unknown", "pending"].map(|state| {
                let due = format!(
                    "SELECT e.id AS picked_id FROM effects e \
                         JOIN runs r ON r.namespace = e.namespace AND r.run_key = e.run_key \
                         WHERE e.state = '{state}' AND e.target = $5 AND e.next_attempt_at <= {now} \
                           AND (e.not_before IS NULL OR e.not_before <= {now}) \
                           AND (r.state = 'approved' OR e.role = '{notify}') \
                           AND NOT EXISTS (SELECT 1 FROM action_switches s WHERE s.enabled = 0 \
                               AND (s.scope = '*' OR s.scope = e.target)) \
                         ORDER BY e.next_attempt_at LIMIT $4 {skip_locked}",
                    notify = EffectRole::Notify.as_str(),
                );
                // PostgreSQL may run a `LIMIT … SKIP LOCKED` subquery of an
                // `IN` more than once, each time skipping what the last run
                // locked, and so lease more than the limit: the picked ids
                // are materialized once.
                let picked = match dialect {
                    Dialect::Sqlite => format!("picked AS ({due})"),
                    Dialect::Postgres => format!("picked AS MATERIALIZED ({due})"),
                };
                format!(
                    "WITH {picked} \
                     UPDATE effects SET state = {sending}, lease_owner = $2, \
                         lease_expires_at = {now} + $3, updated_at = {now} \
                     WHERE id IN (SELECT picked_id FROM picked) AND state = '{state}' \
                     RETURNING {EFFECT_COLUMNS}",
                    sending = EffectMove::Lease.rule().sql_target(),
                )
            }),
            runs_for_send: "SELECT DISTINCT r.namespace, r.run_key, r.version, r.correlation_id \
                 FROM effects e JOIN runs r ON r.namespace = e.namespace AND r.run_key = e.run_key \
                 WHERE e.state = 'sending' AND e.lease_owner = $1"
                .into(),
            record_batch: format!(
                "UPDATE effects AS e SET state = v.v_state, \
                     next_attempt_at = COALESCE(v.v_next_at, e.next_attempt_at), \
                     attempts = e.attempts + v.v_sent, \
                     external_ref = COALESCE(v.v_external_ref, e.external_ref), \
                     last_status = COALESCE(v.v_status, e.last_status), \
                     last_class = COALESCE(v.v_class, e.last_class), last_error = v.v_error, \
                     first_sent_at = CASE WHEN v.v_sent > 0 \
                         THEN COALESCE(e.first_sent_at, v.v_started_at) ELSE e.first_sent_at END, \
                     lease_owner = NULL, lease_expires_at = NULL, updated_at = {now} \
                 FROM {verdicts} \
                 WHERE e.id = v.v_id AND e.lease_owner = v.v_owner AND {state} = 'sending' \
                 RETURNING {EFFECT_COLUMNS}",
                state = dialect.unindexed("e.state"),
                verdicts = dialect.json_rows(
                    "$2",
                    &[
                        ("v_id", "text"),
                        ("v_owner", "text"),
                        ("v_state", "text"),
                        ("v_next_at", "bigint"),
                        ("v_sent", "bigint"),
                        ("v_external_ref", "text"),
                        ("v_status", "bigint"),
                        ("v_class", "text"),
                        ("v_error", "text"),
                        ("v_started_at", "bigint"),
                    ],
                ),
            ),

            insert_attempts: format!(
                "INSERT INTO effect_attempts (effect_id, attempt, dispatcher, started_at, \
                     finished_at, class, status, error, evidence) \
                 SELECT v_id, (SELECT COUNT(*) + 1 FROM effect_attempts a WHERE a.effect_id = v_id), \
                     v_owner, v_started_at, v_finished_at, v_class, v_status, v_error, v_evidence \
                 FROM {attempts}",
                attempts = dialect.json_rows(
                    "$1",
                    &[
                        ("v_id", "text"),
                        ("v_owner", "text"),
                        ("v_started_at", "bigint"),
                        ("v_finished_at", "bigint"),
                        ("v_class", "text"),
                        ("v_status", "bigint"),
                        ("v_error", "text"),
                        ("v_evidence", "text"),
                    ],
                ),
            ),
            expire: format!(
                "UPDATE effects SET state = {to}, last_class = 'lost', next_attempt_at = {now}, \
                     last_error = 'the dispatcher holding the lease stopped before recording', \
                     lease_owner = NULL, lease_expires_at = NULL, updated_at = {now} \
                 WHERE state IN {from} AND lease_expires_at <= {now}",
                to = EffectMove::Expire.rule().sql_target(),
                from = EffectMove::Expire.rule().sql_guard(),
            ),



            cancel: format!(
                "UPDATE effects SET state = {to}, updated_at = {now} \
                 WHERE id = $2 AND {keyed_state} IN {from} RETURNING {EFFECT_COLUMNS}",
                to = EffectMove::Cancel.rule().sql_target(),
                from = EffectMove::Cancel.rule().sql_guard(),
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


        }
    }
}
