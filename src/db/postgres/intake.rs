//! PostgreSQL's webhook intake of new event ids in one statement, for a
//! whole batch.
//!
//! The general accept ([`crate::db::tx::ingress`]) is a transaction of
//! six statements: the claim, its audit entry, the move to `approved`, its
//! audit entry, the forward effect and the raw event. For a *new* event id
//! every field of all of them is known before anything is written (the
//! run goes in at version 2, already `approved`, with the claim's and the
//! approval's audit entries at sequence 1 and 2, hashed in advance), so one
//! autocommitted statement writes every row for every intake of a batch
//! ([`super::batch`]): verification and parsing happened before, outside
//! any writer. The audit entries' time is this node's clock at the intake;
//! lease and row times stay the database's.
//!
//! As for claims, a key that exists is answered from its run when no claim
//! could win it now, and anything else (a reclaim, a taken business key,
//! a race) goes on to the general accept.

use super::claim::Prepared;
use crate::audit::Redactor;
use crate::db::sql::RUN_COLUMNS;
use crate::db::tx::ingress::{approval_detail, intake_approval_entry};
use crate::db::tx::to_json;
use crate::ingress::RawEvent;
use crate::ledger::storage::Result;
use crate::ledger::{ClaimRequest, Move, RunState};
use crate::outbox::{EffectState, NewEffect};

/// What an intake brings to its batch besides its claim: the approval's
/// audit entry, the forward effect and the raw event, as stored.
pub(crate) struct PreparedIntake {
    /// The approval entry's hash (the run's chain head).
    pub(crate) head: String,
    pub(crate) detail: String,
    pub(crate) effect_id: String,
    pub(crate) forward: NewEffect,
    pub(crate) effect_headers: String,
    pub(crate) effect_spec: String,
    pub(crate) event: RawEvent,
    pub(crate) event_headers: String,
    /// The stored copy: redacted when rules apply.
    pub(crate) event_body: Vec<u8>,
}

impl PreparedIntake {
    /// The approval entry chained onto the claim's, and the rows to store.
    ///
    /// # Errors
    /// A header map or spec does not serialize.
    pub(crate) fn new(
        req: &ClaimRequest,
        claim: &Prepared,
        event: &RawEvent,
        forward: &NewEffect,
        redactor: &Redactor,
    ) -> Result<Self> {
        let mut detail = approval_detail(event, forward);
        redactor.value(req.namespace.as_str(), &mut detail);
        let entry = intake_approval_entry(req, detail, claim.created_at);
        Ok(Self {
            head: entry.chain_hash(Some(&claim.hash)),
            detail: entry.detail.to_string(),
            effect_id: uuid::Uuid::now_v7().to_string(),
            effect_headers: to_json(&forward.headers)?,
            effect_spec: to_json(&forward.spec)?,
            forward: forward.clone(),
            event_headers: to_json(&event.headers)?,
            event_body: redactor
                .body(&event.source, &event.body)
                .unwrap_or_else(|| event.body.clone()),
            event: event.clone(),
        })
    }
}

/// The batch statement. Binds: now, then one array per column, in key
/// order: namespace, key, business_key, payload_hash, operation,
/// correlation_id, workflow_version, source_url, execution_ref,
/// requested_by, claimed_by; the claim entry's hash and detail, the
/// approval entry's hash and detail, their time; the effect's id,
/// operation, type, target, method, url, headers, body, idempotency key,
/// spec, not_before, role; the raw event's id, source, event id, type,
/// status, payload hash, content type, headers, body, arrival. Returns each
/// accepted run (`fresh`) and each settled run that holds one of the keys.
pub fn statement_for_batch() -> String {
    let now = "og_now_ms($1)";
    let columns = [
        "v_ns",
        "v_key",
        "v_business_key",
        "v_hash",
        "v_operation",
        "v_correlation_id",
        "v_workflow_version",
        "v_source_url",
        "v_execution_ref",
        "v_requested_by",
        "v_claimed_by",
        "v_h1",
        "v_d1",
        "v_h2",
        "v_d2",
        "v_logged_at",
        "v_eid",
        "v_eop",
        "v_etype",
        "v_etarget",
        "v_emethod",
        "v_eurl",
        "v_eheaders",
        "v_ebody",
        "v_ekey",
        "v_espec",
        "v_enot_before",
        "v_erole",
        "v_rid",
        "v_rsource",
        "v_revent",
        "v_rtype",
        "v_rstatus",
        "v_rhash",
        "v_rct",
        "v_rheaders",
        "v_rbody",
        "v_rat",
    ];
    let types = |c: &str| match c {
        "v_logged_at" | "v_enot_before" | "v_rat" => "bigint[]",
        "v_ebody" | "v_rbody" => "bytea[]",
        _ => "text[]",
    };
    let arrays: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!("${}::{}", i + 2, types(c)))
        .collect();
    format!(
        "WITH input AS ( \
             SELECT * FROM unnest({arrays}) AS i({names})), \
         claimed AS ( \
             INSERT INTO runs (namespace, run_key, business_key, state, prev_state, payload_hash, \
                 lease_owner, lease_expires_at, lease_started_at, version, attempts, operation, \
                 correlation_id, workflow_version, source_url, execution_ref, requested_by, \
                 claimed_by, audit_seq, audit_head, created_at, updated_at) \
             SELECT v_ns, v_key, v_business_key, '{approved}', '{processing}', v_hash, NULL, NULL, \
                 {now}, 2, 1, v_operation, v_correlation_id, v_workflow_version, v_source_url, \
                 v_execution_ref, v_requested_by, v_claimed_by, 2, v_h2, {now}, {now} \
             FROM input ORDER BY v_ns, v_key \
             ON CONFLICT DO NOTHING \
             RETURNING {RUN_COLUMNS}), \
         accepted AS ( \
             SELECT i.* FROM claimed c JOIN input i ON i.v_ns = c.namespace AND i.v_key = c.run_key), \
         logged AS ( \
             INSERT INTO audit_events (namespace, run_key, seq, kind, actor, from_state, \
                 to_state, version, detail, prev_hash, hash, created_at) \
             SELECT v_ns, v_key, 1, '{claim}', v_claimed_by, NULL, '{processing}', 1, v_d1, NULL, \
                 v_h1, v_logged_at FROM accepted \
             UNION ALL \
             SELECT v_ns, v_key, 2, '{approve}', v_claimed_by, '{processing}', '{approved}', 2, \
                 v_d2, v_h1, v_h2, v_logged_at FROM accepted), \
         queued AS ( \
             INSERT INTO effects (id, namespace, run_key, operation, effect_type, target, method, \
                 url, headers, body, idempotency_key, spec, state, not_before, next_attempt_at, \
                 attempts, created_at, updated_at, role) \
             SELECT v_eid, v_ns, v_key, v_eop, v_etype, v_etarget, v_emethod, v_eurl, v_eheaders, \
                 v_ebody, v_ekey, v_espec, '{pending}', v_enot_before, \
                 COALESCE(v_enot_before, {now}), 0, {now}, {now}, v_erole FROM accepted \
             ON CONFLICT (namespace, run_key, effect_type, target) DO NOTHING), \
         stored AS ( \
             INSERT INTO raw_events (id, source, event_id, event_type, status, payload_hash, \
                 content_type, headers, body, received_at) \
             SELECT v_rid, v_rsource, v_revent, v_rtype, v_rstatus, v_rhash, v_rct, v_rheaders, \
                 v_rbody, v_rat FROM accepted \
             ON CONFLICT DO NOTHING) \
         {answers}",
        arrays = arrays.join(", "),
        names = columns.join(", "),
        approved = RunState::Approved.as_str(),
        processing = RunState::Processing.as_str(),
        claim = Move::Claim.as_str(),
        approve = Move::Approve.as_str(),
        pending = EffectState::Pending.as_str(),
        answers = super::claim::answers(now),
    )
}
