//! The ledger's transactions: the claim, the owner's moves by
//! compare-and-set, and the run reads; and the [`LedgerStore`] port.

use async_trait::async_trait;
use serde_json::{json, Value};

use super::chain::{record, record_foreseen, Foreseen};
use super::outbox::insert_effect;
use super::Owned;
use crate::audit::AuditEntry;
use crate::clock::Millis;
use crate::db::exec::{Args, Reader, Tx};
use crate::db::rows::RunRow;
use crate::db::sql::console::search_sql;
use crate::db::sql::Statements;
use crate::db::{Backend, Db, Finish};
use crate::ledger::port::{LedgerStore, RunSearch};
use crate::ledger::storage::{Result, StoreError};
use crate::ledger::{
    explain_lost, ClaimOutcome, ClaimRequest, FencingVersion, IdempotencyKey, Lease, LeaseOwner,
    Move, Moved, Namespace, OwnerCall, OwnerMove, Run, RunState,
};
use crate::outbox::NewEffect;

/// What the claim statement did inside its transaction.
pub(crate) enum Attempt {
    /// The caller owns the run; the claim's audit entry is written.
    Won {
        run: Box<Run>,
        lease: Lease,
        /// The state the claim took the run over from (`None`: a new key).
        reclaimed_from: Option<RunState>,
    },
    /// The key exists and is not reclaimable.
    Lost,
    /// Another run holds the business key (the transaction is aborted).
    BusinessKeyTaken(StoreError),
}

impl Attempt {
    /// Keeps a won claim; undoes anything else.
    pub(crate) fn finish(self) -> Finish<Self> {
        match self {
            Self::Won { .. } => Finish::Commit(self),
            _ => Finish::Rollback(self),
        }
    }
}

/// The claim statement and, when it wins, the claim's audit entry.
pub(crate) async fn try_claim(tx: &mut Tx<'_>, req: &ClaimRequest) -> Result<Attempt> {
    try_claim_foreseen(tx, req, None).await
}

/// A new key's first audit entry, hashed before the claim is written (at
/// `at`, this node's clock when the claim arrived).
pub(crate) fn first_entry(st: &Statements, req: &ClaimRequest, at: Millis) -> Foreseen {
    let entry = AuditEntry {
        namespace: req.namespace.to_string(),
        key: req.key.to_string(),
        seq: 1,
        kind: Move::Claim.as_str().into(),
        actor: req.claimed_by.clone(),
        from_state: None,
        to_state: Some(RunState::Processing.as_str().into()),
        version: Some(FencingVersion::FIRST.get()),
        detail: claim_detail(req, 1),
        created_at: at,
    };
    Foreseen::new(st, entry, None)
}

/// The claim's audit detail for attempt `attempt`.
fn claim_detail(req: &ClaimRequest, attempt: i64) -> Value {
    json!({
        "attempt": attempt,
        "payload_hash": req.payload_hash.as_str(),
        "execution_ref": req.metadata.execution_ref,
        "lease_ms": req.lease_ms,
    })
}

/// [`try_claim`], appending `first` when the claim inserted a new run.
pub(crate) async fn try_claim_foreseen(
    tx: &mut Tx<'_>,
    req: &ClaimRequest,
    first: Option<&Foreseen>,
) -> Result<Attempt> {
    let owner = LeaseOwner::generate();
    let meta = &req.metadata;
    let correlation_id = meta
        .correlation_id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let owner_hex = owner.to_hex();
    let args = claim_args(tx.now, req, &owner_hex, &correlation_id);
    let st = tx.st;
    let attempt = tx.optional::<RunRow>(&st.runs.claim, args).await;
    match attempt {
        Ok(Some(row)) => {
            let run = row.to_run()?;
            let kind = if run.prev_state.is_some() {
                Move::Reclaim
            } else {
                Move::Claim
            };
            let detail = claim_detail(req, run.attempts);
            record_foreseen(tx, &row, &run, kind, first, &req.claimed_by, detail).await?;
            let lease = Lease {
                owner,
                version: run.version,
            };
            Ok(Attempt::Won {
                reclaimed_from: run.prev_state,
                run: Box::new(run),
                lease,
            })
        }
        Ok(None) => Ok(Attempt::Lost),
        // The only unique index the claim can hit besides its conflict
        // target is the business key's.
        Err(err) if err.is_unique_violation() => Ok(Attempt::BusinessKeyTaken(err)),
        Err(err) => Err(err),
    }
}

/// The claim's 14 parameters (PostgreSQL's single-statement claim binds
/// the same ones first).
pub(crate) fn claim_args<'a>(
    now: Option<i64>,
    req: &'a ClaimRequest,
    owner: &'a str,
    correlation_id: &'a str,
) -> Args<'a> {
    let meta = &req.metadata;
    Args::new()
        .bind(now)
        .bind(req.namespace.as_str())
        .bind(req.key.as_str())
        .bind(req.business_key.as_ref().map(|b| b.as_str()))
        .bind(req.payload_hash.as_str())
        .bind(owner)
        .bind(req.lease_ms)
        .bind(&meta.operation)
        .bind(correlation_id)
        .bind(&meta.workflow_version)
        .bind(&meta.source_url)
        .bind(&meta.execution_ref)
        .bind(&meta.requested_by)
        .bind(&req.claimed_by)
}

/// The answer for a claim, after its transaction ended: the won claim, or
/// the committed row that holds the key (or its business key).
pub(crate) async fn answer(
    rd: &Reader<'_>,
    req: &ClaimRequest,
    attempt: Attempt,
) -> Result<ClaimOutcome> {
    match attempt {
        Attempt::Won {
            run,
            lease,
            reclaimed_from,
        } => Ok(ClaimOutcome::Claimed {
            run: *run,
            lease,
            reclaimed_from,
        }),
        Attempt::Lost => {
            let existing = fetch(rd, &req.namespace, &req.key)
                .await?
                .ok_or_else(|| StoreError::Corrupt("claimed row vanished".into()))?;
            Ok(ClaimOutcome::for_existing(existing, &req.payload_hash))
        }
        Attempt::BusinessKeyTaken(err) => {
            let business_key = req.business_key.as_ref().map(|b| b.as_str());
            let holder: Option<RunRow> = rd
                .optional(
                    &rd.st.runs.fetch_by_business_key,
                    Args::new().bind(business_key),
                )
                .await?;
            match holder {
                Some(row) => Ok(ClaimOutcome::DuplicateOf(row.to_run()?)),
                None => Err(err),
            }
        }
    }
}

/// The answer to a claim that cannot win, read from committed rows
/// without a write: the key exists and is not reclaimable by this payload
/// now (the claim statement's own condition, negated). `None` means only
/// the claim statement can answer. (SQLite answers duplicates this way, so
/// they never wait for a group commit; PostgreSQL folds the same test into
/// its single-statement claim.)
pub(crate) async fn settled_claim(
    rd: &Reader<'_>,
    req: &ClaimRequest,
) -> Result<Option<ClaimOutcome>> {
    let args = Args::new()
        .bind(rd.now)
        .bind(req.namespace.as_str())
        .bind(req.key.as_str())
        .bind(req.payload_hash.as_str());
    let row: Option<RunRow> = rd.optional(&rd.st.runs.settled, args).await?;
    match row {
        Some(row) => Ok(Some(ClaimOutcome::for_existing(
            row.to_run()?,
            &req.payload_hash,
        ))),
        None => Ok(None),
    }
}

/// One run.
pub(crate) async fn fetch(
    rd: &Reader<'_>,
    namespace: &Namespace,
    key: &IdempotencyKey,
) -> Result<Option<Run>> {
    let args = Args::new().bind(namespace.as_str()).bind(key.as_str());
    rd.optional::<RunRow>(&rd.st.runs.fetch, args)
        .await?
        .map(|row| row.to_run())
        .transpose()
}

/// One run, inside a transaction.
pub(crate) async fn fetch_in(tx: &mut Tx<'_>, namespace: &str, key: &str) -> Result<Option<Run>> {
    let st = tx.st;
    tx.optional::<RunRow>(&st.runs.fetch, Args::new().bind(namespace).bind(key))
        .await?
        .map(|row| row.to_run())
        .transpose()
}

/// Moves a just-claimed run on to `approved` under its new lease (an
/// ingress accept, an operator's replacement).
pub(crate) async fn approve_claimed(
    tx: &mut Tx<'_>,
    run: &Run,
    lease: &Lease,
    actor: &str,
    detail: Value,
) -> Result<Run> {
    approve_claimed_foreseen(tx, run, lease, actor, detail, None).await
}

/// [`approve_claimed`], appending `entry` when the approval is the one
/// foreseen.
pub(crate) async fn approve_claimed_foreseen(
    tx: &mut Tx<'_>,
    run: &Run,
    lease: &Lease,
    actor: &str,
    detail: Value,
    entry: Option<&Foreseen>,
) -> Result<Run> {
    let st = tx.st;
    let args = owner_args(
        tx.now,
        run.namespace.as_str(),
        run.key.as_str(),
        lease,
        MoveFields::default(),
    );
    let row = tx
        .optional::<RunRow>(&st.runs.finish[&Move::Approve], args)
        .await?
        .ok_or_else(|| StoreError::Corrupt("a just-claimed run refused approval".into()))?;
    let approved = row.to_run()?;
    record_foreseen(tx, &row, &approved, Move::Approve, entry, actor, detail).await?;
    Ok(approved)
}

/// What an owner move writes besides the state.
#[derive(Debug, Default)]
pub(crate) struct MoveFields<'a> {
    pub(crate) result: Option<String>,
    pub(crate) error: Option<&'a str>,
    pub(crate) reason: Option<&'a str>,
}

/// The parameters of an owner move: the guard, then the fields.
fn owner_args<'a>(
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
async fn conclude(
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
    record(tx, &row, &run, kind, &call.actor, detail).await?;
    for effect in effects {
        insert_effect(tx, &run, effect).await?;
    }
    tx.before_commit();
    let lease = run.lease;
    Ok(Finish::Commit(Owned::Done(Moved { run, lease })))
}

async fn renew(
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

async fn finish(tx: &mut Tx<'_>, call: &OwnerCall, mv: &OwnerMove) -> Result<Finish<Owned<Moved>>> {
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

impl<B: Backend> Db<B> {
    /// The outcome of an owner call: its move, or why its lease lost the run.
    pub(crate) async fn owned<T>(&self, call: &OwnerCall, owned: Owned<T>) -> Result<T> {
        match owned {
            Owned::Done(value) => Ok(value),
            Owned::Lost => {
                let rd = self.reader();
                let current = fetch(&rd, &call.namespace, &call.key).await?;
                let why = explain_lost(current.as_ref(), &call.lease, rd.clock_now);
                Err(StoreError::LostOwnership {
                    current: current.map(Box::new),
                    why,
                })
            }
        }
    }
}

#[async_trait]
impl<B: Backend> LedgerStore for Db<B> {
    async fn claim(&self, req: &ClaimRequest) -> Result<ClaimOutcome> {
        if let Some(answer) = self.backend().claim_first(req).await? {
            return Ok(answer);
        }
        let owned = req.clone();
        // Hashed here, beside the request, not inside the write.
        let first = first_entry(
            self.backend().statements(),
            req,
            self.backend().clock().now_ms(),
        );
        let attempt = self
            .write(move |tx| {
                Box::pin(async move {
                    let attempt = try_claim_foreseen(tx, &owned, Some(&first)).await?;
                    if matches!(attempt, Attempt::Won { .. }) {
                        tx.before_commit();
                    }
                    Ok(attempt.finish())
                })
            })
            .await?;
        answer(&self.reader(), req, attempt).await
    }

    async fn renew(&self, call: &OwnerCall, lease_ms: i64, max_life_ms: i64) -> Result<Moved> {
        let owned = call.clone();
        let moved = self
            .write(move |tx| {
                Box::pin(async move { renew(tx, &owned, lease_ms, max_life_ms).await })
            })
            .await?;
        self.owned(call, moved).await
    }

    async fn finish(&self, call: &OwnerCall, mv: &OwnerMove) -> Result<Moved> {
        let (owned, mv) = (call.clone(), mv.clone());
        let moved = self
            .write(move |tx| Box::pin(async move { finish(tx, &owned, &mv).await }))
            .await?;
        self.owned(call, moved).await
    }

    async fn get_run(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Option<Run>> {
        fetch(&self.reader(), namespace, key).await
    }

    async fn search_runs(&self, search: &RunSearch) -> Result<Vec<Run>> {
        let rd = self.reader();
        let (sql, args) = search_sql(rd.st.dialect, search);
        rd.all::<RunRow>(&sql, args)
            .await?
            .iter()
            .map(RunRow::to_run)
            .collect()
    }
}
