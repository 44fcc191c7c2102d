//! PostgreSQL's single-statement claim of a new key.
//!
//! The general claim ([`crate::db::tx::ledger`]) is a transaction:
//! `BEGIN`, the claim upsert, the audit append, `COMMIT`: four statements,
//! each a round trip and a full pass through the server's protocol and
//! executor, where raw `pgbench` runs one. A *new* key needs none of that:
//! every field of its first audit entry is known before the insert (version
//! 1, sequence 1, no previous state or hash), so the entry's hash is
//! computed first and the run and its audit entry are inserted by one
//! autocommitted statement (a data-modifying CTE), atomic like any
//! statement. The entry's time is this node's clock at the claim; lease
//! times stay the database's.
//!
//! `ON CONFLICT DO NOTHING` covers every unique index. When the key
//! exists, the same statement returns the run that holds it if no claim
//! could win it now (a duplicate's answer, in the same round trip); a run
//! to reclaim or a taken business key returns nothing, and the caller goes
//! on to the general path, which answers it exactly as before.

use serde_json::json;

use crate::audit::AuditEntry;
use crate::db::exec::{FromRow, Reader, Row};
use crate::db::rows::RunRow;
use crate::db::sql::RUN_COLUMNS;
use crate::db::tx::ledger::claim_args;
use crate::ledger::storage::Result;
use crate::ledger::{
    reclaimable_sql, ClaimOutcome, ClaimRequest, Lease, LeaseOwner, Move, RunState,
};

/// The statement. Binds: now, namespace, key, business_key, payload_hash,
/// lease_owner, lease_ms, operation, correlation_id, workflow_version,
/// source_url, execution_ref, requested_by, claimed_by (as the general
/// claim), then the audit entry's hash, detail and time.
fn statement() -> String {
    format!(
        "WITH claimed AS ( \
             INSERT INTO runs (namespace, run_key, business_key, state, payload_hash, lease_owner, \
                 lease_expires_at, lease_started_at, version, attempts, operation, correlation_id, \
                 workflow_version, source_url, execution_ref, requested_by, claimed_by, audit_seq, \
                 audit_head, created_at, updated_at) \
             VALUES ($2, $3, $4, 'processing', $5, $6, og_now_ms($1) + $7, og_now_ms($1), 1, 1, \
                 $8, $9, $10, $11, $12, $13, $14, 1, $15, og_now_ms($1), og_now_ms($1)) \
             ON CONFLICT DO NOTHING \
             RETURNING {RUN_COLUMNS}), \
         logged AS ( \
             INSERT INTO audit_events (namespace, run_key, seq, kind, actor, from_state, \
                 to_state, version, detail, prev_hash, hash, created_at) \
             SELECT namespace, run_key, 1, '{kind}', claimed_by, NULL, '{state}', 1, $16, NULL, \
                 $15, $17 FROM claimed) \
         SELECT {RUN_COLUMNS}, TRUE AS fresh FROM claimed \
         UNION ALL \
         SELECT {RUN_COLUMNS}, FALSE AS fresh FROM runs \
         WHERE namespace = $2 AND run_key = $3 AND NOT EXISTS (SELECT 1 FROM claimed) \
             AND NOT ({settled})",
        kind = Move::Claim.as_str(),
        state = RunState::Processing.as_str(),
        settled = reclaimable_sql(str::to_owned, "$5", "og_now_ms($1)"),
    )
}

/// A claimed row, or the settled row that holds the key.
struct Answer {
    run: RunRow,
    fresh: bool,
}

impl FromRow for Answer {
    fn from_row(row: &dyn Row) -> Result<Self> {
        Ok(Self {
            run: RunRow::from_row(row)?,
            fresh: row.get("fresh")?,
        })
    }
}

/// Claims `req` if its key is new, or answers it from the run that holds
/// the key when no claim could win it now (a duplicate: the same test as
/// the general path's `settled_claim`). `None` (nothing written) leaves
/// the rest to the general claim: a run to reclaim, a taken business key,
/// or a key committed by another claim while this statement ran.
///
/// `pool.now` is bound as the general claim binds it (`None`: the
/// database's clock); `pool.clock_now` is the audit entry's time.
///
/// # Errors
/// [`super::StoreError::Database`] on database failure.
pub(crate) async fn claim_new(
    pool: &Reader<'_>,
    req: &ClaimRequest,
) -> Result<Option<ClaimOutcome>> {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let sql = SQL.get_or_init(statement);
    let owner = LeaseOwner::generate();
    let meta = &req.metadata;
    let correlation_id = meta
        .correlation_id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let entry = AuditEntry {
        namespace: req.namespace.to_string(),
        key: req.key.to_string(),
        seq: 1,
        kind: Move::Claim.as_str().into(),
        actor: req.claimed_by.clone(),
        from_state: None,
        to_state: Some(RunState::Processing.as_str().into()),
        version: Some(1),
        // The general claim's detail for a first attempt, field for field.
        detail: json!({
            "attempt": 1,
            "payload_hash": req.payload_hash.as_str(),
            "execution_ref": meta.execution_ref,
            "lease_ms": req.lease_ms,
        }),
        created_at: pool.clock_now,
    };
    let hash = entry.chain_hash(None);
    let owner_hex = owner.to_hex();
    let args = claim_args(pool.now, req, &owner_hex, &correlation_id)
        .bind(&hash)
        .bind(entry.detail.to_string())
        .bind(entry.created_at);
    // One autocommitted statement on the pool (PostgreSQL's pool may write).
    let row: Option<Answer> = pool.optional(sql, args).await?;
    let Some(Answer { run: row, fresh }) = row else {
        return Ok(None);
    };
    let run = row.to_run()?;
    if !fresh {
        return Ok(Some(ClaimOutcome::for_existing(run, &req.payload_hash)));
    }
    let lease = Lease {
        owner,
        version: run.version,
    };
    Ok(Some(ClaimOutcome::Claimed {
        run,
        lease,
        reclaimed_from: None,
    }))
}
