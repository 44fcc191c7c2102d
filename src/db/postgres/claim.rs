//! PostgreSQL's claim of new keys in one statement, for a whole batch.
//!
//! The general claim ([`crate::db::tx::ledger`]) is a transaction:
//! `BEGIN`, the claim upsert, the audit append, `COMMIT`: four statements,
//! each a round trip and a full pass through the server's protocol and
//! executor, where raw `pgbench` runs one. A *new* key needs none of that:
//! every field of its first audit entry is known before the insert (version
//! 1, sequence 1, no previous state or hash), so the entry's hash is
//! computed first ([`Prepared`]) and the runs and their audit entries are
//! inserted by one autocommitted statement (a data-modifying CTE over
//! `unnest` of one array per column), atomic like any statement, for every
//! claim of a batch ([`super::batch`]). The entry's time is this node's
//! clock at the claim; lease times stay the database's.
//!
//! `ON CONFLICT DO NOTHING` covers every unique index. When a key exists,
//! the same statement returns the run that holds it if no claim could win
//! it now (a duplicate's answer, in the same round trip); a run to reclaim
//! or a taken business key returns nothing, and the caller goes on to the
//! general path, which answers it exactly as before.

use crate::audit::Redactor;
use crate::db::sql::RUN_COLUMNS;
use crate::db::tx::ledger::{claim_detail, first_claim_entry};
use crate::ledger::{
    reclaimable_sql, ClaimRequest, FencingVersion, Lease, LeaseOwner, Move, RunState,
};

/// What a claim brings to its batch, computed before it queues: its owner,
/// correlation id and first audit entry.
pub(crate) struct Prepared {
    owner: LeaseOwner,
    pub(crate) owner_hex: String,
    pub(crate) correlation_id: String,
    /// The first audit entry's hash (also the run's chain head).
    pub(crate) hash: String,
    /// The first audit entry's detail, as stored.
    pub(crate) detail: String,
    /// The first audit entry's time (this node's clock).
    pub(crate) created_at: i64,
}

impl Prepared {
    /// The claim's owner and first audit entry, at `clock_now`, its detail
    /// redacted as the general claim's is.
    pub(crate) fn new(req: &ClaimRequest, clock_now: i64, redactor: &Redactor) -> Self {
        let owner = LeaseOwner::generate();
        let correlation_id = req.correlation_id();
        // The general claim's detail for a first attempt, field for field.
        let mut detail = claim_detail(req, 1);
        redactor.value(req.namespace.as_str(), &mut detail);
        let entry = first_claim_entry(req, detail, clock_now);
        Self {
            owner_hex: owner.to_hex(),
            owner,
            correlation_id,
            hash: entry.chain_hash(None),
            detail: entry.detail.to_string(),
            created_at: clock_now,
        }
    }

    /// The lease of the claim, once won (a new key's first version).
    pub(crate) fn lease(&self) -> Lease {
        Lease {
            owner: self.owner,
            version: FencingVersion::FIRST,
        }
    }
}

/// The batch statement. Binds: now, then one array per column, in key
/// order: namespace, key, business_key, payload_hash, lease_owner,
/// lease_ms, operation, correlation_id, workflow_version, source_url,
/// execution_ref, requested_by, claimed_by (as the general claim), then
/// each audit entry's hash, detail and time. Returns each claimed run
/// (`fresh`) and each settled run that holds one of the keys.
pub fn statement_for_batch() -> String {
    format!(
        "WITH input AS ( \
             SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], \
                 $7::bigint[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], \
                 $13::text[], $14::text[], $15::text[], $16::text[], $17::bigint[]) \
             AS i(v_ns, v_key, v_business_key, v_hash, v_owner, v_lease_ms, v_operation, \
                 v_correlation_id, v_workflow_version, v_source_url, v_execution_ref, \
                 v_requested_by, v_claimed_by, v_head, v_detail, v_logged_at)), \
         claimed AS ( \
             INSERT INTO runs (namespace, run_key, business_key, state, payload_hash, lease_owner, \
                 lease_expires_at, lease_started_at, version, attempts, operation, correlation_id, \
                 workflow_version, source_url, execution_ref, requested_by, claimed_by, audit_seq, \
                 audit_head, created_at, updated_at) \
             SELECT v_ns, v_key, v_business_key, 'processing', v_hash, v_owner, \
                 og_now_ms($1) + v_lease_ms, og_now_ms($1), 1, 1, v_operation, v_correlation_id, \
                 v_workflow_version, v_source_url, v_execution_ref, v_requested_by, v_claimed_by, \
                 1, v_head, og_now_ms($1), og_now_ms($1) \
             FROM input ORDER BY v_ns, v_key \
             ON CONFLICT DO NOTHING \
             RETURNING {RUN_COLUMNS}), \
         logged AS ( \
             INSERT INTO audit_events (namespace, run_key, seq, kind, actor, from_state, \
                 to_state, version, detail, prev_hash, hash, created_at) \
             SELECT c.namespace, c.run_key, 1, '{kind}', c.claimed_by, NULL, '{state}', 1, \
                 i.v_detail, NULL, i.v_head, i.v_logged_at \
             FROM claimed c JOIN input i ON i.v_ns = c.namespace AND i.v_key = c.run_key) \
         {answers}",
        kind = Move::Claim.as_str(),
        state = RunState::Processing.as_str(),
        answers = answers("og_now_ms($1)"),
    )
}

/// The end of a batched claim or intake: each run this statement claimed
/// (`fresh`), and each settled run that holds one of the keys.
pub(super) fn answers(now: &str) -> String {
    format!(
        "SELECT {RUN_COLUMNS}, TRUE AS fresh FROM claimed \
         UNION ALL \
         SELECT {RUN_COLUMNS}, FALSE AS fresh FROM runs JOIN input \
             ON namespace = v_ns AND run_key = v_key \
         WHERE NOT EXISTS (SELECT 1 FROM claimed c \
                 WHERE c.namespace = v_ns AND c.run_key = v_key) \
             AND NOT ({settled})",
        settled = reclaimable_sql(str::to_owned, "v_hash", now, None),
    )
}
