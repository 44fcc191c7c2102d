//! Moves by the lease owner: renew, conclude, finish, each guarded by the
//! owner and fencing version the caller holds.

use super::super::chain::{record, Foreseen};
use super::super::outbox::insert_effect;
use super::super::Owned;
use crate::audit::AuditEntry;
use crate::clock::Millis;
use crate::db::exec::{Args, Tx};
use crate::db::rows::RunRow;
use crate::db::sql::Statements;
use crate::db::Finish;
use crate::ledger::storage::Result;
use crate::ledger::{Lease, Move, Moved, OwnerCall, OwnerMove, RunState};
use crate::outbox::seal::add_seals;
use crate::outbox::NewEffect;
use crate::proxy::Answer;
use serde_json::{json, Value};

/// What an owner move writes besides the state.
#[derive(Debug, Default)]
pub(crate) struct MoveFields<'a> {
    pub(crate) result: Option<String>,
    pub(crate) error: Option<&'a str>,
    pub(crate) reason: Option<&'a str>,
}

/// The parameters of an owner move: the guard, then the fields.
pub(super) fn owner_args<'a>(
    now: Option<i64>,
    namespace: &'a str,
    key: &'a str,
    lease: &Lease,
    fields: MoveFields<'a>,
) -> Args<'a> {
    Args::new()
        .bind(now)
        .bind(namespace)
        .bind(key)
        .bind(lease.owner.to_hex())
        .bind(lease.version.get())
        .bind(fields.result)
        .bind(fields.error)
        .bind(fields.reason)
}

/// The guard of an owner call that moves nothing (`owner_touch`).
pub(crate) fn owner_guard<'a>(now: Option<i64>, call: &'a OwnerCall) -> Args<'a> {
    Args::new()
        .bind(now)
        .bind(call.namespace.as_str())
        .bind(call.key.as_str())
        .bind(call.lease.owner.to_hex())
        .bind(call.lease.version.get())
}

/// An owner's move out of `processing` by compare-and-set, with its audit
/// entry and any effects it permits; `Lost` (nothing written) when the
/// lease is not the run's live one.
pub(crate) async fn owner_move(
    tx: &mut Tx<'_>,
    call: &OwnerCall,
    kind: Move,
    mut fields: MoveFields<'_>,
    detail: Value,
    effects: &[NewEffect],
) -> Result<Finish<Owned<Moved>>> {
    let ns = call.namespace.as_str();
    redact_result(tx.st, ns, &mut fields.result);
    let st = tx.st;
    let args = owner_args(tx.now, ns, call.key.as_str(), &call.lease, fields);
    let updated = tx.optional::<RunRow>(&st.runs.finish[&kind], args).await?;
    conclude(tx, call, updated, kind, detail, effects).await
}

/// An owner's completion as a backend's one-statement path takes it
/// ([`Backend::complete_first`](crate::db::Backend::complete_first)).
pub struct Completion<'a> {
    /// The run's result, as stored (redacted).
    pub(crate) result: Option<String>,
    /// The audit entry's detail, as the general move would record it.
    pub(crate) detail: Value,
    /// The proxy's answer, kept for its window (milliseconds).
    pub(crate) answer: Option<(&'a Answer, Millis)>,
}

impl<'a> Completion<'a> {
    /// The completion of `call` with `result` (redacted here) and the
    /// audit `detail`.
    pub(crate) fn new(
        st: &Statements,
        call: &OwnerCall,
        mut result: Option<String>,
        detail: Value,
        answer: Option<(&'a Answer, Millis)>,
    ) -> Self {
        redact_result(st, call.namespace.as_str(), &mut result);
        Self {
            result,
            detail,
            answer,
        }
    }
}

/// A run's result as it is stored: redacted by the namespace's rules.
pub(crate) fn redact_result(st: &Statements, namespace: &str, result: &mut Option<String>) {
    if let Some(text) = result {
        if st.redactor.applies(namespace) {
            if let Ok(mut value) = serde_json::from_str::<Value>(text) {
                st.redactor.value(namespace, &mut value);
                *text = value.to_string();
            }
        }
    }
}

/// The audit entry of an owner's completion at a known chain head (`seq`,
/// `head`): the entry [`record`] would append after the `finish` move of
/// [`Move::Complete`], at this node's time, hashed before the statement.
pub(crate) fn completion_at_head(
    st: &Statements,
    call: &OwnerCall,
    seq: i64,
    head: &str,
    detail: Value,
    at: Millis,
) -> Foreseen {
    let entry = AuditEntry {
        namespace: call.namespace.to_string(),
        key: call.key.to_string(),
        seq: seq + 1,
        kind: Move::Complete.as_str().into(),
        actor: call.actor.clone(),
        from_state: Some(RunState::Processing.as_str().into()),
        to_state: Some(Move::Complete.to_state().as_str().into()),
        version: Some(call.lease.version.get() + 1),
        detail,
        created_at: at,
    };
    Foreseen::new(st, entry, Some(head.to_owned()))
}

/// Ends an owner call: audit and effects on success, `Lost` otherwise.
pub(super) async fn conclude(
    tx: &mut Tx<'_>,
    call: &OwnerCall,
    updated: Option<RunRow>,
    kind: Move,
    detail: Value,
    effects: &[NewEffect],
) -> Result<Finish<Owned<Moved>>> {
    let Some(row) = updated else {
        return Ok(Finish::Rollback(Owned::Lost));
    };
    let run = row.to_run()?;
    let mut detail = detail;
    add_seals(&mut detail, effects);
    record(tx, &row, &run, kind, &call.actor, detail).await?;
    for effect in effects {
        insert_effect(tx, &run, effect).await?;
    }
    tx.before_commit();
    let lease = run.lease;
    Ok(Finish::Commit(Owned::Done(Moved { run, lease })))
}

pub(super) async fn renew(
    tx: &mut Tx<'_>,
    call: &OwnerCall,
    lease_ms: i64,
    max_life_ms: i64,
) -> Result<Finish<Owned<Moved>>> {
    let st = tx.st;
    let args = owner_guard(tx.now, call).bind(lease_ms).bind(max_life_ms);
    let updated = tx.optional::<RunRow>(&st.runs.renew, args).await?;
    let detail = json!({ "lease_ms": lease_ms });
    conclude(tx, call, updated, Move::Renew, detail, &[]).await
}

/// What an owner's finish writes: its fields and its audit detail.
pub(super) fn finish_parts(mv: &OwnerMove) -> (MoveFields<'_>, Value) {
    let (result, error, reason) = match mv {
        OwnerMove::Complete { result } => (result.as_ref().map(Value::to_string), None, None),
        OwnerMove::FailRetryable { error } => (None, Some(error.as_str()), None),
        OwnerMove::FailTerminal { error } => (None, Some(error.as_str()), Some(error.as_str())),
    };
    let detail = json!({ "error": error, "has_result": result.is_some() });
    let fields = MoveFields {
        result,
        error,
        reason,
    };
    (fields, detail)
}

pub(super) async fn finish(
    tx: &mut Tx<'_>,
    call: &OwnerCall,
    mv: &OwnerMove,
) -> Result<Finish<Owned<Moved>>> {
    let (fields, detail) = finish_parts(mv);
    owner_move(tx, call, mv.as_move(), fields, detail, &[]).await
}
