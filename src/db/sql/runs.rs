//! Every statement that writes `runs`, and the run reads.
//!
//! Each move is a guarded `UPDATE … WHERE state IN <the move's start
//! states> …`, the guard spelled by [`Move::sql_guard`] from the one move
//! table, and every move advances the run's audit sequence so its audit
//! entry can be appended at the reserved number. The reclaim condition is
//! the ledger's ([`reclaimable_sql`]).

use std::collections::HashMap;

use super::{Dialect, RUN_COLUMNS};
use crate::ledger::{budget_spent_sql, reclaimable_sql, stranded_sql, BudgetSql, Move};
use crate::outbox::EffectRole;

/// The run statements, spelled for one backend.
#[derive(Debug, Clone)]
pub struct RunStatements {
    /// The atomic claim. Binds: now, namespace, key, business_key,
    /// payload_hash, lease_owner, lease_ms, operation, correlation_id,
    /// workflow_version, source_url, execution_ref, requested_by,
    /// claimed_by, then the namespace's budget: max_reclaims,
    /// retry_window_ms.
    pub claim: String,
    /// `failed_retryable → dead_lettered` for a run past its reclaim
    /// budget (`Move::ReclaimBudgetExhausted`), the budget rule repeated.
    /// Binds: now, namespace, key, reason, max_reclaims, retry_window_ms,
    /// version, payload_hash (NULL: any; the claim path binds no version,
    /// its claim statement having just found the run unclaimable inside
    /// the same transaction, and its payload hash, so a conflicting
    /// payload moves nothing; the sweeper binds the version it read).
    pub exhaust: String,
    /// `processing → dead_lettered` for a stranded run (`Move::Stranded`),
    /// by compare-and-set on the version the sweeper read, the stranded
    /// rule repeated: a concurrent reclaim changes the version and wins.
    /// Binds: now, namespace, key, reason, version, stranded_after_ms.
    pub strand: String,
    /// One run, only when a claim of it could not win now (a duplicate's
    /// answer, read without the writer). Binds: now, namespace, key,
    /// payload_hash.
    pub settled: String,
    /// One run. Binds: namespace, key.
    pub fetch: String,
    /// The run of a namespace holding a business key. Binds: namespace, business_key.
    pub fetch_by_business_key: String,
    /// Lease renewal. Binds: now, namespace, key, owner, version, lease_ms, max_life_ms.
    pub renew: String,
    /// Owner moves out of `processing`, per move. Binds: now, namespace,
    /// key, owner, version, result, last_error, reason.
    pub finish: HashMap<Move, String>,
    /// Advances an owned run's audit chain without moving it. Binds: now,
    /// namespace, key, owner, version.
    pub owner_touch: String,
    /// Advances a run's audit chain without moving it. Binds: namespace, key.
    pub touch: String,
    /// Completes an approved run with no outstanding effect (notifications do
    /// not count). Binds: now, namespace, key.
    pub complete_run: String,
    /// `complete_run` for a set of runs; returns those it completed.
    /// Binds: now, a JSON array of [`RunKeyBatchRow`](crate::db::rows::RunKeyBatchRow).
    pub complete_runs: String,
    /// Moves an approved run to `$4` with reason `$5`. Binds: now, namespace, key, state, reason.
    pub fail_run: String,
    /// Locks the runs of a batch of verdicts before it is recorded, in
    /// key order (PostgreSQL; SQLite has one writer). Two batches that
    /// hold the last effects of one run then record one after the other,
    /// and the second sees the first's effects completed and completes the
    /// run; without it each would see the other's effect still `sending`.
    /// Binds: a JSON array of [`RunKeyBatchRow`](crate::db::rows::RunKeyBatchRow).
    pub lock_runs: Option<String>,
    /// Moves a run out of `awaiting_human` without a lease, per move.
    /// Binds: now, namespace, key, reason.
    pub system_move: HashMap<Move, String>,
    /// Operator moves of a run without a lease, per move. Binds: now,
    /// namespace, key, reason.
    pub operator_move: HashMap<Move, String>,
    /// Failure reports by execution ref, per move. Binds: now,
    /// execution_ref, last_error, reason, claimed_by (NULL: any claimer).
    pub fail_by_execution: HashMap<Move, String>,
    /// Runs holding an execution ref, of one claimer unless NULL. Binds:
    /// execution_ref, claimed_by.
    pub runs_by_execution: String,
    /// Slims a run to its tombstone. Binds: namespace, key, version, now.
    pub slim: String,
    /// Deletes one tombstone. Binds: namespace, key, cutoff.
    pub delete_tombstone: String,
    /// Moves a run's audit chain head. Binds: namespace, key, hash.
    pub set_audit_head: String,
    /// Appends an audit entry and moves its run's chain head to it, in one
    /// round trip (the binds of `AuditStatements::insert_audit`).
    pub append_audit: String,
    /// `append_audit` for many runs at once (one entry per run). Binds: a
    /// JSON array of [`AuditBatchRow`](crate::db::rows::AuditBatchRow).
    pub append_audits: String,
}

/// Terminal states retention may touch; nothing else is ever selected.
pub(crate) const TERMINAL: &str = "('completed', 'failed_terminal', 'dead_lettered')";

impl RunStatements {
    /// The statements spelled for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        let now = dialect.now();
        // A run found by its key is never looked for through the state
        // index: with no statistics yet, a state's constant ties the two,
        // and that plan walks every run in the state.
        let keyed_state = dialect.unindexed("state");
        let keyed = |column: &str| match column {
            "state" => keyed_state.clone(),
            other => other.to_owned(),
        };
        let owner_guard = owner_guard(now);
        let (append_audit, append_audits) = append::statements(dialect);
        let budget = BudgetSql {
            max_reclaims: "$5",
            retry_window_ms: "$6",
        };
        Self {
            claim: claim(now),
            exhaust: format!(
                "UPDATE runs SET state = '{to}', prev_state = state, version = version + 1, \
                     reason = $4, last_error = COALESCE(last_error, $4), lease_owner = NULL, \
                     lease_expires_at = NULL, audit_seq = audit_seq + 1, updated_at = {now} \
                 WHERE namespace = $2 AND run_key = $3 AND {keyed_state} IN {guard} \
                   AND (CAST($7 AS BIGINT) IS NULL OR version = $7) \
                   AND (CAST($8 AS TEXT) IS NULL OR payload_hash = $8) AND {spent} \
                 RETURNING {RUN_COLUMNS}",
                to = Move::ReclaimBudgetExhausted.to_state().as_str(),
                guard = Move::ReclaimBudgetExhausted.sql_guard(),
                spent = budget_spent_sql(keyed, now, budget),
            ),
            strand: format!(
                "UPDATE runs SET state = '{to}', prev_state = state, version = version + 1, \
                     reason = $4, lease_owner = NULL, lease_expires_at = NULL, \
                     audit_seq = audit_seq + 1, updated_at = {now} \
                 WHERE namespace = $2 AND run_key = $3 AND version = $5 AND {keyed_state} IN {guard} \
                   AND {stranded} \
                 RETURNING {RUN_COLUMNS}",
                to = Move::Stranded.to_state().as_str(),
                guard = Move::Stranded.sql_guard(),
                stranded = stranded_sql(keyed, now, "$6"),
            ),
            settled: format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE namespace = $2 AND run_key = $3 \
                 AND NOT ({})",
                reclaimable_sql(str::to_owned, "$4", now, None)
            ),
            fetch: format!("SELECT {RUN_COLUMNS} FROM runs WHERE namespace = $1 AND run_key = $2"),
            fetch_by_business_key: format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE namespace = $1 AND business_key = $2"
            ),
            renew: format!(
                "UPDATE runs SET version = version + 1, prev_state = state, \
                     lease_expires_at = {least}({now} + $6, lease_started_at + $7), \
                     audit_seq = audit_seq + 1, updated_at = {now} \
                 WHERE {owner_guard} AND {keyed_state} IN {guard} AND lease_started_at + $7 > {now} \
                 RETURNING {RUN_COLUMNS}",
                least = dialect.least(),
                guard = Move::Renew.sql_guard()
            ),
            // `lease_started_at` stays: with `updated_at` it tells how long
            // the run spent in processing (a metric); no guard reads it
            // outside `processing`, and the next claim sets it afresh.
            finish: moves(
                &[
                    Move::Approve,
                    Move::Complete,
                    Move::FailRetryable,
                    Move::FailTerminal,
                    Move::Gate,
                    Move::OutcomeUnknown,
                ],
                |to, guard| owner_finish(dialect, to, guard, false),
            ),
            owner_touch: format!(
                "UPDATE runs SET audit_seq = audit_seq + 1, updated_at = {now} \
                 WHERE {owner_guard} AND {keyed_state} = 'processing' \
                 RETURNING {RUN_COLUMNS}"
            ),
            touch: format!(
                "UPDATE runs SET audit_seq = audit_seq + 1 WHERE namespace = $1 AND run_key = $2 \
                 RETURNING {RUN_COLUMNS}"
            ),
            complete_run: format!(
                "UPDATE runs SET state = 'completed', prev_state = state, version = version + 1, \
                     audit_seq = audit_seq + 1, updated_at = {now} \
                 WHERE namespace = $2 AND run_key = $3 AND {keyed_state} = 'approved' \
                   AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.namespace = $2 AND e.run_key = $3 \
                       AND e.state NOT IN ('completed', 'cancelled') \
                       AND e.role = '{act}') \
                 RETURNING {RUN_COLUMNS}",
                act = EffectRole::Act.as_str(),
            ),
            complete_runs: format!(
                "UPDATE runs SET state = 'completed', prev_state = state, version = version + 1, \
                     audit_seq = audit_seq + 1, updated_at = {now} \
                 WHERE (namespace, run_key) IN (SELECT v_ns, v_key FROM {keys}) \
                   AND {keyed_state} = 'approved' \
                   AND NOT EXISTS (SELECT 1 FROM effects e \
                       WHERE e.namespace = runs.namespace AND e.run_key = runs.run_key \
                       AND e.state NOT IN ('completed', 'cancelled') \
                       AND e.role = '{act}') \
                 RETURNING {RUN_COLUMNS}",
                keys = run_keys(dialect, "$2"),
                act = EffectRole::Act.as_str(),
            ),
            fail_run: format!(
                "UPDATE runs SET state = $4, prev_state = state, version = version + 1, \
                     reason = $5, last_error = $5, audit_seq = audit_seq + 1, updated_at = {now} \
                 WHERE namespace = $2 AND run_key = $3 AND {keyed_state} = 'approved' \
                 RETURNING {RUN_COLUMNS}"
            ),
            lock_runs: match dialect {
                Dialect::Sqlite => None,
                Dialect::Postgres => Some(format!(
                    "SELECT 1 FROM runs WHERE (namespace, run_key) IN (SELECT v_ns, v_key FROM {}) \
                     ORDER BY namespace, run_key FOR UPDATE",
                    run_keys(dialect, "$1")
                )),
            },
            system_move: moves(
                &[
                    Move::ApprovalConsumed,
                    Move::ApprovalRejected,
                    Move::ApprovalExpired,
                ],
                |to, guard| {
                    format!(
                        "UPDATE runs SET state = '{to}', prev_state = state, version = version + 1, \
                             reason = $4, last_error = CASE WHEN $4 IS NULL THEN last_error ELSE $4 END, \
                             audit_seq = audit_seq + 1, updated_at = {now} \
                         WHERE namespace = $2 AND run_key = $3 AND {keyed_state} IN {guard} \
                         RETURNING {RUN_COLUMNS}"
                    )
                },
            ),
            operator_move: moves(
                &[
                    Move::Resolve,
                    Move::ReplayUngated,
                    Move::ReplayRelease,
                    Move::ReplayGated,
                ],
                |to, guard| {
                    // A release back to the workflow's re-run restarts the
                    // reclaim budget, or the next claim would find it spent.
                    let reset = if to == Move::ReplayRelease.to_state().as_str() {
                        format!("reclaims = 0, budget_started_at = {now}, ")
                    } else {
                        String::new()
                    };
                    format!(
                        "UPDATE runs SET state = '{to}', prev_state = state, version = version + 1, \
                             reason = $4, lease_owner = NULL, lease_expires_at = NULL, {reset}\
                             lease_started_at = NULL, audit_seq = audit_seq + 1, updated_at = {now} \
                         WHERE namespace = $2 AND run_key = $3 AND {keyed_state} IN {guard} \
                         RETURNING {RUN_COLUMNS}"
                    )
                },
            ),
            fail_by_execution: moves(&[Move::ExecutionFailed, Move::WorkflowError], |to, guard| {
                format!(
                    "UPDATE runs SET state = '{to}', prev_state = state, version = version + 1, \
                         last_error = $3, reason = $4, lease_owner = NULL, lease_expires_at = NULL, \
                         lease_started_at = NULL, audit_seq = audit_seq + 1, updated_at = {now} \
                     WHERE execution_ref = $2 AND {keyed_state} IN {guard} \
                       AND (CAST($5 AS TEXT) IS NULL OR claimed_by = $5) \
                     RETURNING {RUN_COLUMNS}"
                )
            }),
            runs_by_execution: format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE execution_ref = $1 \
                   AND (CAST($2 AS TEXT) IS NULL OR claimed_by = $2) ORDER BY namespace, run_key"
            ),
            slim: format!(
                "UPDATE runs SET archived_at = $4, prev_state = NULL, result = NULL, \
                     last_error = NULL, reason = NULL, operation = NULL, workflow_version = NULL, \
                     source_url = NULL, execution_ref = NULL, requested_by = NULL \
                 WHERE namespace = $1 AND run_key = $2 AND version = $3 AND archived_at IS NULL \
                   AND state IN {TERMINAL} \
                   AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.namespace = runs.namespace \
                       AND d.run_key = runs.run_key AND d.resolved_at IS NULL) \
                   AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.namespace = runs.namespace \
                       AND e.run_key = runs.run_key AND e.state IN ('pending', 'sending', 'unknown'))"
            ),
            delete_tombstone: format!(
                "DELETE FROM runs WHERE namespace = $1 AND run_key = $2 \
                 AND archived_at IS NOT NULL AND updated_at < $3 AND state IN {TERMINAL}"
            ),
            set_audit_head: "UPDATE runs SET audit_head = $3 WHERE namespace = $1 AND run_key = $2"
                .into(),
            append_audit,
            append_audits,
        }
    }
}

/// The claim: insert, or take over a reclaimable run (new owner, version + 1).
fn claim(now: &str) -> String {
    // The offered hash is the new row's; the claim's time its lease start.
    let reclaimable = reclaimable_sql(
        |c| format!("runs.{c}"),
        "excluded.payload_hash",
        "excluded.lease_started_at",
        Some(BudgetSql {
            max_reclaims: "$15",
            retry_window_ms: "$16",
        }),
    );
    format!(
        "INSERT INTO runs (namespace, run_key, business_key, state, payload_hash, lease_owner, \
             lease_expires_at, lease_started_at, version, attempts, operation, correlation_id, \
             workflow_version, source_url, execution_ref, requested_by, claimed_by, audit_seq, \
             created_at, updated_at) \
         VALUES ($2, $3, $4, 'processing', $5, $6, {now} + $7, {now}, 1, 1, $8, $9, $10, $11, \
             $12, $13, $14, 1, {now}, {now}) \
         ON CONFLICT (namespace, run_key) DO UPDATE SET \
             state = 'processing', prev_state = runs.state, \
             lease_owner = excluded.lease_owner, lease_expires_at = excluded.lease_expires_at, \
             lease_started_at = excluded.lease_started_at, version = runs.version + 1, \
             attempts = runs.attempts + 1, reclaims = runs.reclaims + 1, \
             claimed_by = excluded.claimed_by, \
             execution_ref = COALESCE(excluded.execution_ref, runs.execution_ref), \
             workflow_version = COALESCE(excluded.workflow_version, runs.workflow_version), \
             audit_seq = runs.audit_seq + 1, updated_at = excluded.updated_at \
         WHERE {reclaimable} \
         RETURNING {RUN_COLUMNS}"
    )
}

/// The guard of an owner move: the caller's lease is the run's live one.
/// Binds: now, namespace, key, owner, version.
fn owner_guard(now: &str) -> String {
    format!(
        "namespace = $2 AND run_key = $3 AND lease_owner = $4 AND version = $5 \
         AND lease_expires_at > {now}"
    )
}

/// An owner's move out of `processing` to `to` (the `finish` statements).
/// `at_head`: also guarded by the chain's last number and head ($9, $10),
/// and moving the head to the entry hashed onto it ($11), for the one
/// statement that completes a run whose chain this node knows
/// ([`crate::db::postgres::complete`]). Binds: now, namespace, key, owner,
/// version, result, last_error, reason.
pub(crate) fn owner_finish(dialect: Dialect, to: &str, guard: &str, at_head: bool) -> String {
    let (head, chain) = if at_head {
        (
            "audit_head = $11, ",
            " AND audit_seq = $9 AND audit_head = $10",
        )
    } else {
        ("", "")
    };
    format!(
        "UPDATE runs SET state = '{to}', prev_state = state, version = version + 1, \
             result = $6, last_error = $7, reason = $8, lease_owner = NULL, \
             lease_expires_at = NULL, audit_seq = audit_seq + 1, {head}updated_at = {now} \
         WHERE {guard_owner} AND {state} IN {guard}{chain} \
         RETURNING {RUN_COLUMNS}",
        now = dialect.now(),
        guard_owner = owner_guard(dialect.now()),
        state = dialect.unindexed("state"),
    )
}

/// One statement per move, from the move's target and start states.
fn moves(list: &[Move], sql: impl Fn(&str, &str) -> String) -> HashMap<Move, String> {
    list.iter()
        .map(|mv| (*mv, sql(mv.to_state().as_str(), &mv.sql_guard())))
        .collect()
}

/// A batch of run keys bound as a JSON array at `param`.
fn run_keys(dialect: Dialect, param: &str) -> String {
    dialect.json_rows(param, &[("v_ns", "text"), ("v_key", "text")])
}

mod append;
#[cfg(test)]
mod tests;
