//! A claim inside a write transaction: the attempt, its audit entry, the
//! answer, and the claim that approves a parked run.

use super::super::chain::{record_foreseen, Foreseen};
use super::fetch;
use super::owner::{owner_args, MoveFields};
use crate::audit::AuditEntry;
use crate::clock::Millis;
use crate::db::exec::{Args, Reader, Tx};
use crate::db::rows::RunRow;
use crate::db::sql::Statements;
use crate::db::Finish;
use crate::ledger::storage::{Result, StoreError};
use crate::ledger::{
    ClaimOutcome, ClaimRequest, FencingVersion, Lease, LeaseOwner, Move, Run, RunState,
};
use serde_json::{json, Value};

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
    /// The key was `failed_retryable` past its reclaim budget: the claim
    /// moved it to `dead_lettered` with its dead letter (committed).
    Exhausted(Box<Run>),
    /// Another run holds the business key (the transaction is aborted).
    BusinessKeyTaken(StoreError),
}

impl Attempt {
    /// Keeps a won claim; undoes anything else.
    pub(crate) fn finish(self) -> Finish<Self> {
        match self {
            Self::Won { .. } | Self::Exhausted(_) => Finish::Commit(self),
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
    Foreseen::new(st, first_claim_entry(req, claim_detail(req, 1), at), None)
}

/// A new key's first audit entry with `detail` (every other field is known
/// before the insert: version 1, sequence 1, no previous state).
pub(crate) fn first_claim_entry(req: &ClaimRequest, detail: Value, at: Millis) -> AuditEntry {
    AuditEntry {
        namespace: req.namespace.to_string(),
        key: req.key.to_string(),
        seq: 1,
        kind: Move::Claim.as_str().into(),
        actor: req.claimed_by.clone(),
        from_state: None,
        to_state: Some(RunState::Processing.as_str().into()),
        version: Some(FencingVersion::FIRST.get()),
        detail,
        created_at: at,
    }
}

/// The claim's audit detail for attempt `attempt`.
pub(crate) fn claim_detail(req: &ClaimRequest, attempt: i64) -> Value {
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
    let correlation_id = req.correlation_id();
    let owner_hex = owner.to_hex();
    let st = tx.st;
    let rules = st.ledger.recovery(req.namespace.as_str());
    let args = claim_args(tx.now, req, &owner_hex, &correlation_id)
        .bind(rules.max_reclaims)
        .bind(rules.retry_window_ms);
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
        // Not claimable: if only its spent budget stood in the way, the
        // run goes to an operator now, in this transaction (one more
        // statement, never on a new key's path).
        Ok(None) => {
            let (ns, key) = (req.namespace.as_str(), req.key.as_str());
            let hash = Some(req.payload_hash.as_str());
            match super::recovery::exhaust(tx, ns, key, None, hash, "claim").await? {
                Some(run) => Ok(Attempt::Exhausted(Box::new(run))),
                None => Ok(Attempt::Lost),
            }
        }
        // The only unique index the claim can hit besides its conflict
        // target is the business key's.
        Err(err) if err.is_unique_violation() => Ok(Attempt::BusinessKeyTaken(err)),
        Err(err) => Err(err),
    }
}

/// The claim's first 14 parameters (the namespace's budget follows).
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
        Attempt::Exhausted(run) => Ok(ClaimOutcome::Exhausted(*run)),
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
                    Args::new().bind(req.namespace.as_str()).bind(business_key),
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
