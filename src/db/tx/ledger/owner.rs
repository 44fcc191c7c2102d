//! Moves by the lease owner: renew, conclude, finish, each guarded by the
//! owner and fencing version the caller holds.

use super::super::chain::record;
use super::super::outbox::insert_effect;
use super::super::Owned;
use crate::db::exec::{Args, Tx};
use crate::db::rows::RunRow;
use crate::db::Finish;
use crate::ledger::storage::Result;
use crate::ledger::{Lease, Move, Moved, OwnerCall, OwnerMove};
use crate::outbox::seal::add_seals;
use crate::outbox::NewEffect;
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
    if let Some(result) = &fields.result {
        if tx.st.redactor.applies(ns) {
            if let Ok(mut value) = serde_json::from_str::<Value>(result) {
                tx.st.redactor.value(ns, &mut value);
                fields.result = Some(value.to_string());
            }
        }
    }
    let st = tx.st;
    let args = owner_args(tx.now, ns, call.key.as_str(), &call.lease, fields);
    let updated = tx.optional::<RunRow>(&st.runs.finish[&kind], args).await?;
    conclude(tx, call, updated, kind, detail, effects).await
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

pub(super) async fn finish(
    tx: &mut Tx<'_>,
    call: &OwnerCall,
    mv: &OwnerMove,
) -> Result<Finish<Owned<Moved>>> {
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
    owner_move(tx, call, mv.as_move(), fields, detail, &[]).await
}
