//! The SQL both backends run, written once.
//!
//! Statements use `$N` placeholders, which sqlx accepts on SQLite and
//! PostgreSQL alike. They differ in two spellings only, supplied by
//! [`Dialect`]: the current time (`$1` bound from the injected clock on
//! SQLite; `og_now_ms($1)` on PostgreSQL, which is the database's `now()`
//! unless a test binds a time) and the two-argument minimum.
//!
//! The [`ledger_ops!`](crate::ledger_ops) macro expands the transaction
//! logic for one concrete sqlx database type; each backend instantiates it.

use std::collections::HashMap;

use crate::clock::Millis;
use crate::ledger::{Lease, Move, Run, RunState};

/// The spellings that differ between backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite 3.35 or later.
    Sqlite,
    /// PostgreSQL 12 or later.
    Postgres,
}

impl Dialect {
    pub(crate) fn now(self) -> &'static str {
        match self {
            Self::Sqlite => "$1",
            Self::Postgres => "og_now_ms($1)",
        }
    }

    /// Rows read from a JSON array of objects bound as `param`, as a
    /// table `v` with the given `(column, PostgreSQL type)`s: each
    /// object's keys are the column names. One statement then writes a
    /// whole batch (SQLite `json_each`, PostgreSQL `jsonb_to_recordset`).
    /// Name the columns so that none clashes with the table the statement
    /// writes (a `v_` prefix), or unqualified names become ambiguous.
    pub(crate) fn json_rows(self, param: &str, columns: &[(&str, &str)]) -> String {
        match self {
            Self::Sqlite => {
                let cols: Vec<String> = columns
                    .iter()
                    .map(|(c, _)| format!("value->>'{c}' AS {c}"))
                    .collect();
                format!("(SELECT {} FROM json_each({param})) AS v", cols.join(", "))
            }
            Self::Postgres => {
                let cols: Vec<String> = columns.iter().map(|(c, t)| format!("{c} {t}")).collect();
                format!(
                    "jsonb_to_recordset({param}::jsonb) AS v({})",
                    cols.join(", ")
                )
            }
        }
    }

    /// `column` in a condition that must not pick the index: a planner
    /// would otherwise walk a state index (every `pending` effect, every
    /// `approved` run) instead of looking a batch's rows up by key. SQLite
    /// does so always; PostgreSQL when the table's statistics lag behind
    /// it (a fresh table, a burst before autovacuum's next ANALYZE). A
    /// unary `+` (SQLite) or an expression (PostgreSQL) keeps it off.
    pub(crate) fn unindexed(self, column: &str) -> String {
        match self {
            Self::Sqlite => format!("+{column}"),
            Self::Postgres => format!("({column} || '')"),
        }
    }

    fn least(self) -> &'static str {
        match self {
            Self::Sqlite => "MIN",
            Self::Postgres => "LEAST",
        }
    }
}

/// The `runs` columns every statement returns, in [`super::row::RunRow`] order.
pub(crate) const RUN_COLUMNS: &str =
    "namespace, run_key, business_key, state, prev_state, payload_hash, \
    lease_owner, lease_expires_at, lease_started_at, version, attempts, result, last_error, \
    reason, operation, correlation_id, workflow_version, source_url, execution_ref, \
    requested_by, claimed_by, audit_seq, audit_head, created_at, updated_at, archived_at";

/// The `effects` columns statements return, in [`super::row::EffectRow`] order.
pub(crate) const EFFECT_COLUMNS: &str =
    "id, namespace, run_key, operation, effect_type, target, method, url, \
    headers, body, idempotency_key, spec, state, not_before, next_attempt_at, attempts, \
    external_ref, last_status, last_class, last_error, first_sent_at, created_at";

/// Every statement of the ledger, spelled for one backend.
#[derive(Debug, Clone)]
pub struct Statements {
    /// The atomic claim. Binds: now, namespace, key, business_key,
    /// payload_hash, lease_owner, lease_ms, operation, correlation_id,
    /// workflow_version, source_url, execution_ref, requested_by, claimed_by.
    pub claim: String,
    /// One run, only when a claim of it could not win now (a duplicate's
    /// answer, read without the writer). Binds: now, namespace, key,
    /// payload_hash.
    pub settled: String,
    /// One run. Binds: namespace, key.
    pub fetch: String,
    /// The run holding a business key. Binds: business_key.
    pub fetch_by_business_key: String,
    /// Lease renewal. Binds: now, namespace, key, owner, version, lease_ms, max_life_ms.
    pub renew: String,
    /// Owner moves out of `processing`, per move. Binds: now, namespace,
    /// key, owner, version, result, last_error, reason.
    pub finish: HashMap<Move, String>,
    /// Appends an audit entry (12 binds, in [`crate::audit::AuditEntry`] order).
    pub insert_audit: String,
    /// Moves a run's audit chain head. Binds: namespace, key, hash.
    pub set_audit_head: String,
    /// Appends an audit entry and moves its run's chain head to it, in one
    /// round trip (the binds of `insert_audit`).
    pub append_audit: String,
    /// `append_audit` for many runs at once (one entry per run). Binds: a
    /// JSON array of [`AuditBatchRow`](super::row::AuditBatchRow).
    pub append_audits: String,
    /// One run's audit trail. Binds: namespace, key.
    pub audit_trail: String,
    /// Stored token digests.
    pub tokens: String,
    /// Inserts an effect unless the same (run, effect_type, target) exists.
    /// Binds: id, namespace, key, operation, effect_type, target, method,
    /// url, headers, body, idempotency_key, spec, not_before, now.
    pub insert_effect: String,
    /// One run's effects. Binds: namespace, key.
    pub effects_of: String,
    /// Stores a raw delivery. Binds: id, source, event_id, event_type,
    /// status, payload_hash, content_type, headers, body, received_at.
    pub insert_raw_event: String,
    /// Stores a token digest. Binds: digest, subject, scopes, roles, created_at.
    pub insert_token: String,
    /// The outbox's statements.
    pub outbox: super::outbox_sql::OutboxStatements,
    /// The scrape-time gauges' statements (ops/metrics).
    pub ops: super::ops_sql::OpsStatements,
    /// Dead letters and replay jobs (issue 6, branch dlq).
    pub deadletter: super::deadletter_sql::DeadLetterStatements,
    // Audit integrity, retention and redaction (issue 6: audit).
    /// Checkpoint, verification and retention statements.
    pub audit: super::audit_sql::AuditStatements,
    /// The redaction rules every write applies before storage. Carried with
    /// the statements because every write path already receives them.
    pub redactor: std::sync::Arc<crate::audit::Redactor>,
    /// The approval gate's statements.
    pub approval: super::approval_sql::ApprovalStatements,
}

impl Statements {
    /// The statements spelled for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        let now = dialect.now();
        let least = dialect.least();
        let reclaimable = "runs.payload_hash = excluded.payload_hash AND runs.archived_at IS NULL \
             AND (runs.state = 'failed_retryable' \
                  OR (runs.state = 'processing' AND runs.lease_expires_at <= excluded.lease_started_at))";
        let claim = format!(
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
                 attempts = runs.attempts + 1, claimed_by = excluded.claimed_by, \
                 execution_ref = COALESCE(excluded.execution_ref, runs.execution_ref), \
                 workflow_version = COALESCE(excluded.workflow_version, runs.workflow_version), \
                 audit_seq = runs.audit_seq + 1, updated_at = excluded.updated_at \
             WHERE {reclaimable} \
             RETURNING {RUN_COLUMNS}"
        );
        let owner_guard = format!(
            "namespace = $2 AND run_key = $3 AND lease_owner = $4 AND version = $5 \
             AND lease_expires_at > {now}"
        );
        let renew = format!(
            "UPDATE runs SET version = version + 1, prev_state = state, \
                 lease_expires_at = {least}({now} + $6, lease_started_at + $7), \
                 audit_seq = audit_seq + 1, updated_at = {now} \
             WHERE {owner_guard} AND state IN {guard} AND lease_started_at + $7 > {now} \
             RETURNING {RUN_COLUMNS}",
            guard = Move::Renew.sql_guard()
        );
        let finish = [
            Move::Approve,
            Move::Complete,
            Move::FailRetryable,
            Move::FailTerminal,
            Move::Gate,
        ]
        .into_iter()
        // `lease_started_at` stays: with `updated_at` it tells how long the
        // run spent in processing (a metric); no guard reads it outside
        // `processing`, and the next claim sets it afresh.
        .map(|mv| {
            let sql = format!(
                "UPDATE runs SET state = '{to}', prev_state = state, version = version + 1, \
                         result = $6, last_error = $7, reason = $8, lease_owner = NULL, \
                         lease_expires_at = NULL, \
                         audit_seq = audit_seq + 1, updated_at = {now} \
                     WHERE {owner_guard} AND state IN {guard} \
                     RETURNING {RUN_COLUMNS}",
                to = mv.to_state().as_str(),
                guard = mv.sql_guard()
            );
            (mv, sql)
        })
        .collect();
        let settled = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE namespace = $2 AND run_key = $3 \
             AND NOT (payload_hash = $4 AND archived_at IS NULL \
                 AND (state = 'failed_retryable' \
                      OR (state = 'processing' AND lease_expires_at <= {now})))"
        );
        let insert_audit = "INSERT INTO audit_events (namespace, run_key, seq, kind, actor, \
             from_state, to_state, version, detail, prev_hash, hash, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";
        let move_head = "UPDATE runs SET audit_head = $11 WHERE namespace = $1 AND run_key = $2";
        let append_audit = match dialect {
            // sqlx runs each statement of a SQLite query string in turn,
            // binding `$N` by number in each.
            Dialect::Sqlite => format!("{insert_audit}; {move_head}"),
            Dialect::Postgres => format!("WITH appended AS ({insert_audit}) {move_head}"),
        };
        let audit_rows = dialect.json_rows(
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
        let insert_audits = format!(
            "INSERT INTO audit_events (namespace, run_key, seq, kind, actor, from_state, to_state, \
                 version, detail, prev_hash, hash, created_at) \
             SELECT v_ns, v_key, v_seq, v_kind, v_actor, v_from, v_to, v_version, v_detail, v_prev, \
                 v_hash, v_at FROM {audit_rows}"
        );
        let move_heads = format!(
            "UPDATE runs AS r SET audit_head = v.v_hash FROM {audit_rows} \
             WHERE r.namespace = v.v_ns AND r.run_key = v.v_key"
        );
        let append_audits = match dialect {
            Dialect::Sqlite => format!("{insert_audits}; {move_heads}"),
            Dialect::Postgres => format!("WITH appended AS ({insert_audits}) {move_heads}"),
        };
        Self {
            claim,
            settled,
            append_audit,
            append_audits,
            fetch: format!("SELECT {RUN_COLUMNS} FROM runs WHERE namespace = $1 AND run_key = $2"),
            fetch_by_business_key: format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE business_key = $1"
            ),
            renew,
            finish,
            insert_audit: insert_audit.into(),
            set_audit_head: "UPDATE runs SET audit_head = $3 WHERE namespace = $1 AND run_key = $2"
                .into(),
            audit_trail: "SELECT namespace, run_key, seq, kind, actor, from_state, to_state, \
                 version, detail, prev_hash, hash, created_at FROM audit_events \
                 WHERE namespace = $1 AND run_key = $2 ORDER BY seq"
                .into(),
            tokens: "SELECT digest, subject, scopes, roles FROM api_tokens ORDER BY created_at"
                .into(),
            insert_effect: "INSERT INTO effects (id, namespace, run_key, operation, effect_type, target, method, \
                     url, headers, body, idempotency_key, spec, state, not_before, next_attempt_at, \
                     attempts, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'pending', $13, \
                     COALESCE($13, $14), 0, $14, $14) \
                 ON CONFLICT (namespace, run_key, effect_type, target) DO NOTHING"
                .into(),
            effects_of: format!(
                "SELECT {EFFECT_COLUMNS} FROM effects WHERE namespace = $1 AND run_key = $2 \
                 ORDER BY created_at, id"
            ),
            insert_raw_event: "INSERT INTO raw_events (id, source, event_id, event_type, status, \
                 payload_hash, content_type, headers, body, received_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING"
                .into(),
            outbox: super::outbox_sql::OutboxStatements::new(dialect),
            ops: super::ops_sql::OpsStatements::new(dialect),
            deadletter: super::deadletter_sql::DeadLetterStatements::new(dialect),
            audit: super::audit_sql::AuditStatements::new(dialect),
            redactor: std::sync::Arc::new(crate::audit::Redactor::none()),
            approval: super::approval_sql::ApprovalStatements::new(dialect),
            insert_token: "INSERT INTO api_tokens (digest, subject, scopes, roles, created_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (digest) DO NOTHING"
                .into(),
        }
    }
}

/// Says, for the caller, why its lease no longer owns the run.
pub fn explain_lost(current: Option<&Run>, lease: &Lease, now: Millis) -> String {
    let Some(run) = current else {
        return "no run exists with this namespace and key".into();
    };
    if run.state != RunState::Processing {
        return format!("the run is {} and no longer owned by a lease", run.state);
    }
    match run.lease {
        Some(current) if current.owner != lease.owner => {
            "another owner reclaimed the run after this lease expired".into()
        }
        Some(current) if current.version != lease.version => format!(
            "the lease is stale: version {} was superseded by version {}",
            lease.version, current.version
        ),
        _ if run.lease_expires_at.is_some_and(|at| at <= now) => {
            "the lease expired; claim the key again".into()
        }
        _ => "the lease reached its maximum total life; finish or fail the run".into(),
    }
}

/// Expands the ledger's transaction logic for one sqlx database type.
///
/// Written as a macro rather than generic code because sqlx's executor
/// bounds cannot be named once and implied; the body is ordinary Rust.
///
/// The expansion site names where writes go: `Writer` (with an async
/// `begin()`) and `WriteTx` (what `begin()` returns: `commit()`,
/// `rollback()`, and a deref to the connection). SQLite's are the
/// [group-commit executor](super::group_commit) and its turn; PostgreSQL's
/// the pool and its transaction. Every write runs in a `WriteTx`
/// (`let mut tx = cx.write.begin().await?; …; tx.commit().await?`), so a
/// new operation written this way is group-committed on SQLite for free.
#[macro_export]
#[doc(hidden)]
macro_rules! ledger_ops {
    ($db:ty) => {
        use serde_json::{json, Value};
        use sqlx::Pool;

        use $crate::audit::{AuditEntry, AuditRecord};
        use $crate::clock::Millis;
        use $crate::ledger::{
            ClaimOutcome, ClaimRequest, IdempotencyKey, Lease, LeaseOwner, Move, Moved, Namespace,
            OwnerCall, OwnerMove, Run,
        };
        use $crate::ingress::RawEvent;
        use $crate::outbox::{Effect, NewEffect};
        use $crate::store::row::{AuditRow, EffectRow, RunRow, TokenRow};
        use $crate::store::sql::{explain_lost, Statements};
        use $crate::store::{Result, StoreError, StoredToken};

        /// One call's view of the database: where writes go (`Writer`:
        /// the group-commit executor on SQLite, the pool on PostgreSQL;
        /// each write begins a `WriteTx` there), the read pool, the
        /// statements, and the time (`now` is bound into statements; `None`
        /// lets PostgreSQL use its own clock; `clock_now` explains refusals).
        pub(crate) struct Cx<'a> {
            pub(crate) write: &'a Writer,
            pub(crate) read: &'a Pool<$db>,
            pub(crate) st: &'a Statements,
            pub(crate) now: Option<Millis>,
            pub(crate) clock_now: Millis,
        }

        /// Appends the audit entry for a move and advances the chain head.
        pub(crate) async fn record(
            tx: &mut WriteTx,
            st: &Statements,
            row: &RunRow,
            run: &Run,
            kind: Move,
            actor: &str,
            detail: Value,
        ) -> Result<()> {
            let entry = audit_entry(st, row, run, kind, actor, detail);
            append_audit(tx, st, row, &entry).await
        }

        /// The audit entry for a move, its detail redacted, at the sequence
        /// number the statement that returned `row` reserved.
        pub(crate) fn audit_entry(
            st: &Statements,
            row: &RunRow,
            run: &Run,
            kind: Move,
            actor: &str,
            mut detail: Value,
        ) -> AuditEntry {
            st.redactor.value(run.namespace.as_str(), &mut detail);
            AuditEntry {
                namespace: run.namespace.to_string(),
                key: run.key.to_string(),
                seq: row.audit_seq,
                kind: kind.as_str().into(),
                actor: actor.into(),
                from_state: run.prev_state.map(|s| s.as_str().to_owned()),
                to_state: Some(run.state.as_str().to_owned()),
                version: Some(run.version.get()),
                detail,
                created_at: run.updated_at,
            }
        }

        /// Appends an audit entry at the sequence number the statement that
        /// returned `row` reserved, and advances the run's chain head.
        pub(crate) async fn append_audit(
            tx: &mut WriteTx,
            st: &Statements,
            row: &RunRow,
            entry: &AuditEntry,
        ) -> Result<()> {
            let hash = entry.chain_hash(row.audit_head.as_deref());
            sqlx::query(&st.append_audit)
                .bind(&entry.namespace)
                .bind(&entry.key)
                .bind(entry.seq)
                .bind(&entry.kind)
                .bind(&entry.actor)
                .bind(&entry.from_state)
                .bind(&entry.to_state)
                .bind(entry.version)
                .bind(entry.detail.to_string())
                .bind(row.audit_head.as_deref())
                .bind(&hash)
                .bind(entry.created_at)
                .execute(&mut **tx)
                .await?;
            Ok(())
        }

        pub(crate) async fn fetch(
            pool: &Pool<$db>,
            st: &Statements,
            namespace: &Namespace,
            key: &IdempotencyKey,
        ) -> Result<Option<Run>> {
            sqlx::query_as::<_, RunRow>(&st.fetch)
                .bind(namespace.as_str())
                .bind(key.as_str())
                .fetch_optional(pool)
                .await?
                .map(|row| row.to_run())
                .transpose()
        }

        fn is_unique_violation(err: &sqlx::Error) -> bool {
            matches!(err, sqlx::Error::Database(db) if db.is_unique_violation())
        }

        /// What the claim statement did inside its transaction.
        enum Attempt {
            /// The caller owns the run; the claim's audit entry is written.
            Won { run: Box<Run>, lease: Lease },
            /// The key exists and is not reclaimable.
            Lost,
            /// Another run holds the business key (the transaction is aborted).
            BusinessKeyTaken(sqlx::Error),
        }

        async fn try_claim(
            tx: &mut WriteTx,
            cx: &Cx<'_>,
            req: &ClaimRequest,
        ) -> Result<Attempt> {
            let owner = LeaseOwner::generate();
            let meta = &req.metadata;
            let correlation_id = meta
                .correlation_id
                .clone()
                .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
            let attempt = sqlx::query_as::<_, RunRow>(&cx.st.claim)
                .bind(cx.now)
                .bind(req.namespace.as_str())
                .bind(req.key.as_str())
                .bind(req.business_key.as_ref().map(|b| b.as_str()))
                .bind(req.payload_hash.as_str())
                .bind(owner.to_hex())
                .bind(req.lease_ms)
                .bind(&meta.operation)
                .bind(&correlation_id)
                .bind(&meta.workflow_version)
                .bind(&meta.source_url)
                .bind(&meta.execution_ref)
                .bind(&meta.requested_by)
                .bind(&req.claimed_by)
                .fetch_optional(&mut **tx)
                .await;
            match attempt {
                Ok(Some(row)) => {
                    let run = row.to_run()?;
                    let kind = if run.prev_state.is_some() { Move::Reclaim } else { Move::Claim };
                    let detail = json!({
                        "attempt": run.attempts,
                        "payload_hash": run.payload_hash.as_str(),
                        "execution_ref": meta.execution_ref,
                        "lease_ms": req.lease_ms,
                    });
                    record(tx, cx.st, &row, &run, kind, &req.claimed_by, detail).await?;
                    let lease = Lease { owner, version: run.version };
                    Ok(Attempt::Won { run: Box::new(run), lease })
                }
                Ok(None) => Ok(Attempt::Lost),
                // The only unique index the claim can hit besides its
                // conflict target is the business key's.
                Err(err) if is_unique_violation(&err) => Ok(Attempt::BusinessKeyTaken(err)),
                Err(err) => Err(err.into()),
            }
        }

        /// The answer for a claim that did not win, after its rollback.
        async fn lost_answer(cx: &Cx<'_>, req: &ClaimRequest, attempt: Attempt) -> Result<ClaimOutcome> {
            match attempt {
                Attempt::Won { run, lease } => {
                    let reclaimed_from = run.prev_state;
                    Ok(ClaimOutcome::Claimed { run: *run, lease, reclaimed_from })
                }
                Attempt::Lost => {
                    let existing = fetch(cx.read, cx.st, &req.namespace, &req.key)
                        .await?
                        .ok_or_else(|| StoreError::Corrupt("claimed row vanished".into()))?;
                    Ok(ClaimOutcome::for_existing(existing, &req.payload_hash))
                }
                Attempt::BusinessKeyTaken(err) => {
                    let holder = sqlx::query_as::<_, RunRow>(&cx.st.fetch_by_business_key)
                        .bind(req.business_key.as_ref().map(|b| b.as_str()))
                        .fetch_optional(cx.read)
                        .await?;
                    match holder {
                        Some(row) => Ok(ClaimOutcome::DuplicateOf(row.to_run()?)),
                        None => Err(StoreError::Database(err)),
                    }
                }
            }
        }

        /// The answer to a claim that cannot win, read from committed
        /// rows without a write: the key exists and is not reclaimable by
        /// this payload now (the claim statement's own condition, negated).
        /// `None` means only the claim statement can answer. (SQLite answers
        /// duplicates this way, so they never wait for a group commit;
        /// PostgreSQL folds the same test into its single-statement claim.)
        #[allow(dead_code)]
        pub(crate) async fn settled_claim(cx: &Cx<'_>, req: &ClaimRequest) -> Result<Option<ClaimOutcome>> {
            let row = sqlx::query_as::<_, RunRow>(&cx.st.settled)
                .bind(cx.now)
                .bind(req.namespace.as_str())
                .bind(req.key.as_str())
                .bind(req.payload_hash.as_str())
                .fetch_optional(cx.read)
                .await?;
            match row {
                Some(row) => Ok(Some(ClaimOutcome::for_existing(row.to_run()?, &req.payload_hash))),
                None => Ok(None),
            }
        }

        pub(crate) async fn claim(cx: &Cx<'_>, req: &ClaimRequest) -> Result<ClaimOutcome> {
            let mut tx = cx.write.begin().await?;
            let attempt = try_claim(&mut tx, cx, req).await?;
            if matches!(attempt, Attempt::Won { .. }) {
                $crate::chaos::before_commit::<$db>();
                tx.commit().await?;
            } else {
                tx.rollback().await?;
            }
            lost_answer(cx, req, attempt).await
        }

        /// Claims an ingress run and, in the same transaction, moves it to
        /// `approved`, stores the raw event and inserts the forward effect.
        pub(crate) async fn accept_event(
            cx: &Cx<'_>,
            req: &ClaimRequest,
            event: &RawEvent,
            forward: &NewEffect,
        ) -> Result<ClaimOutcome> {
            let mut tx = cx.write.begin().await?;
            let attempt = try_claim(&mut tx, cx, req).await?;
            let Attempt::Won { run, lease } = attempt else {
                tx.rollback().await?;
                return lost_answer(cx, req, attempt).await;
            };
            // Inside the accept transaction: a crash here rolls the claim back.
            $crate::chaos::point("after_claim");
            let reclaimed_from = run.prev_state;
            let row = sqlx::query_as::<_, RunRow>(&cx.st.finish[&Move::Approve])
                .bind(cx.now)
                .bind(run.namespace.as_str())
                .bind(run.key.as_str())
                .bind(lease.owner.to_hex())
                .bind(lease.version.get())
                .bind(None::<String>)
                .bind(None::<String>)
                .bind(None::<String>)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::Corrupt("a just-claimed run refused approval".into()))?;
            let approved = row.to_run()?;
            let detail = json!({ "effects": [forward.effect_type], "raw_event_id": event.id });
            record(&mut tx, cx.st, &row, &approved, Move::Approve, &req.claimed_by, detail).await?;
            insert_effect(&mut tx, cx, &approved, forward).await?;
            insert_raw_event(&mut tx, cx.st, event).await?;
            $crate::chaos::before_commit::<$db>();
            tx.commit().await?;
            Ok(ClaimOutcome::Claimed { run: approved, lease, reclaimed_from })
        }

        pub(crate) async fn insert_effect(
            tx: &mut WriteTx,
            cx: &Cx<'_>,
            run: &Run,
            effect: &NewEffect,
        ) -> Result<()> {
            let headers = serde_json::to_string(&effect.headers)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let spec = serde_json::to_string(&effect.spec).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            sqlx::query(&cx.st.insert_effect)
                .bind(uuid::Uuid::now_v7().to_string())
                .bind(run.namespace.as_str())
                .bind(run.key.as_str())
                .bind(&effect.operation)
                .bind(&effect.effect_type)
                .bind(&effect.target)
                .bind(&effect.method)
                .bind(&effect.url)
                .bind(headers)
                .bind(effect.body.as_deref())
                .bind(&effect.idempotency_key)
                .bind(spec)
                .bind(effect.not_before)
                .bind(run.updated_at)
                .execute(&mut **tx)
                .await?;
            Ok(())
        }

        async fn insert_raw_event(
            tx: &mut WriteTx,
            st: &Statements,
            event: &RawEvent,
        ) -> Result<()> {
            let headers =
                serde_json::to_string(&event.headers).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            // The stored delivery is evidence: redacted when rules apply
            // (the forward effect carries the verbatim bytes to deliver).
            let redacted = st.redactor.body(&event.source, &event.body);
            sqlx::query(&st.insert_raw_event)
                .bind(&event.id)
                .bind(&event.source)
                .bind(&event.event_id)
                .bind(&event.event_type)
                .bind(event.status.as_str())
                .bind(event.payload_hash.as_str())
                .bind(&event.content_type)
                .bind(headers)
                .bind(redacted.as_deref().unwrap_or(&event.body))
                .bind(event.received_at)
                .execute(&mut **tx)
                .await?;
            Ok(())
        }

        /// Stores a conflicting delivery as evidence and records its dead letter.
        pub(crate) async fn quarantine_event(cx: &Cx<'_>, event: &RawEvent, run: &Run) -> Result<()> {
            let mut tx = cx.write.begin().await?;
            insert_raw_event(&mut tx, cx.st, event).await?;
            let detail = json!({
                "event_type": event.event_type,
                "stored_payload_hash": run.payload_hash.as_str(),
                "offered_payload_hash": event.payload_hash.as_str(),
                "run_state": run.state.as_str(),
            });
            let mut input = $crate::deadletter::DeadLetterInput::new(
                $crate::deadletter::DeadLetterClass::PayloadConflict,
                "the same event id arrived with a different body; it was quarantined, never forwarded",
                detail.clone(),
            );
            input.evidence = Some(detail);
            input.raw_event_id = Some(event.id.clone());
            deadletter::record_dead_letter(&mut tx, cx.st, run, &input, event.received_at).await?;
            tx.commit().await?;
            Ok(())
        }

        pub(crate) async fn effects_of(
            pool: &Pool<$db>,
            st: &Statements,
            namespace: &Namespace,
            key: &IdempotencyKey,
        ) -> Result<Vec<Effect>> {
            sqlx::query_as::<_, EffectRow>(&st.effects_of)
                .bind(namespace.as_str())
                .bind(key.as_str())
                .fetch_all(pool)
                .await?
                .into_iter()
                .map(EffectRow::into_effect)
                .collect()
        }

        /// Finishes an owner call: audit and commit on success, otherwise
        /// explain to the caller why its lease lost the run.
        async fn conclude(
            cx: &Cx<'_>,
            mut tx: WriteTx,
            call: &OwnerCall,
            updated: Option<RunRow>,
            kind: Move,
            detail: Value,
            effects: &[NewEffect],
        ) -> Result<Moved> {
            let st = cx.st;
            let Some(row) = updated else {
                return Err(lost(cx, tx, call).await);
            };
            let run = row.to_run()?;
            record(&mut tx, st, &row, &run, kind, &call.actor, detail).await?;
            for effect in effects {
                insert_effect(&mut tx, cx, &run, effect).await?;
            }
            $crate::chaos::before_commit::<$db>();
            tx.commit().await?;
            let lease = run.lease;
            Ok(Moved { run, lease })
        }

        /// Rolls back an owner call whose compare-and-set found no row and
        /// explains to the caller why its lease lost the run.
        pub(crate) async fn lost(cx: &Cx<'_>, tx: WriteTx, call: &OwnerCall) -> StoreError {
            if let Err(err) = tx.rollback().await {
                return err.into();
            }
            match fetch(cx.read, cx.st, &call.namespace, &call.key).await {
                Ok(current) => {
                    let why = explain_lost(current.as_ref(), &call.lease, cx.clock_now);
                    StoreError::LostOwnership { current: current.map(Box::new), why }
                }
                Err(err) => err,
            }
        }

        pub(crate) async fn renew(
            cx: &Cx<'_>,
            call: &OwnerCall,
            lease_ms: i64,
            max_life_ms: i64,
        ) -> Result<Moved> {
            let mut tx = cx.write.begin().await?;
            let updated = sqlx::query_as::<_, RunRow>(&cx.st.renew)
                .bind(cx.now)
                .bind(call.namespace.as_str())
                .bind(call.key.as_str())
                .bind(call.lease.owner.to_hex())
                .bind(call.lease.version.get())
                .bind(lease_ms)
                .bind(max_life_ms)
                .fetch_optional(&mut *tx)
                .await?;
            let detail = json!({ "lease_ms": lease_ms });
            conclude(cx, tx, call, updated, Move::Renew, detail, &[]).await
        }

        pub(crate) async fn finish(cx: &Cx<'_>, call: &OwnerCall, mv: &OwnerMove) -> Result<Moved> {
            let (result, error, reason) = match mv {
                OwnerMove::Complete { result } => (result.as_ref().map(Value::to_string), None, None),
                OwnerMove::FailRetryable { error } => (None, Some(error.as_str()), None),
                OwnerMove::FailTerminal { error } => (None, Some(error.as_str()), Some(error.as_str())),
            };
            let detail = json!({ "error": error, "has_result": result.is_some() });
            let fields = MoveFields { result, error, reason };
            owner_move(cx, call, mv.as_move(), fields, detail, &[]).await
        }

        /// What an owner move writes besides the state.
        pub(crate) struct MoveFields<'a> {
            pub(crate) result: Option<String>,
            pub(crate) error: Option<&'a str>,
            pub(crate) reason: Option<&'a str>,
        }

        /// An owner's move out of `processing` by compare-and-set, with its
        /// audit entry and any effects it permits, in one transaction.
        pub(crate) async fn owner_move(
            cx: &Cx<'_>,
            call: &OwnerCall,
            kind: Move,
            fields: MoveFields<'_>,
            detail: Value,
            effects: &[NewEffect],
        ) -> Result<Moved> {
            let mut fields = fields;
            if let Some(result) = &fields.result {
                if cx.st.redactor.applies(call.namespace.as_str()) {
                    if let Ok(mut value) = serde_json::from_str::<Value>(result) {
                        cx.st.redactor.value(call.namespace.as_str(), &mut value);
                        fields.result = Some(value.to_string());
                    }
                }
            }
            let mut tx = cx.write.begin().await?;
            let updated = sqlx::query_as::<_, RunRow>(&cx.st.finish[&kind])
                .bind(cx.now)
                .bind(call.namespace.as_str())
                .bind(call.key.as_str())
                .bind(call.lease.owner.to_hex())
                .bind(call.lease.version.get())
                .bind(fields.result)
                .bind(fields.error)
                .bind(fields.reason)
                .fetch_optional(&mut *tx)
                .await?;
            conclude(cx, tx, call, updated, kind, detail, effects).await
        }

        pub(crate) async fn audit_trail(
            pool: &Pool<$db>,
            st: &Statements,
            namespace: &Namespace,
            key: &IdempotencyKey,
        ) -> Result<Vec<AuditRecord>> {
            sqlx::query_as::<_, AuditRow>(&st.audit_trail)
                .bind(namespace.as_str())
                .bind(key.as_str())
                .fetch_all(pool)
                .await?
                .into_iter()
                .map(AuditRow::into_record)
                .collect()
        }

        pub(crate) async fn stored_tokens(pool: &Pool<$db>, st: &Statements) -> Result<Vec<StoredToken>> {
            let rows = sqlx::query_as::<_, TokenRow>(&st.tokens).fetch_all(pool).await?;
            Ok(rows.into_iter().map(StoredToken::from).collect())
        }

        pub(crate) async fn insert_token(cx: &Cx<'_>, token: &StoredToken) -> Result<()> {
            let mut tx = cx.write.begin().await?;
            sqlx::query(&cx.st.insert_token)
                .bind(&token.digest)
                .bind(&token.subject)
                .bind(token.scopes.join(","))
                .bind(token.roles.join(","))
                .bind(cx.clock_now)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(())
        }
    };
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn dialects_differ_only_in_time_and_min() {
        let lite = Statements::new(Dialect::Sqlite);
        let pg = Statements::new(Dialect::Postgres);
        assert_eq!(as_pg_time(&lite.claim), pg.claim);
        assert_eq!(as_pg_time(&lite.renew).replace("MIN(", "LEAST("), pg.renew);
        assert!(lite.finish[&Move::Complete].contains("state IN ('processing')"));
    }
}
