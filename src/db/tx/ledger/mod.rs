//! The ledger's transactions: the claim, the owner's moves by
//! compare-and-set, and the run reads; and the [`LedgerStore`] port.

mod claim;
mod owner;
mod recovery;

pub(crate) use claim::{
    answer, approve_claimed, approve_claimed_foreseen, claim_detail, first_claim_entry,
    first_entry, settled_claim, try_claim, try_claim_foreseen, Attempt,
};
pub(crate) use owner::{completion_at_head, owner_guard, owner_move, Completion, MoveFields};
use owner::{finish, finish_parts, renew};

use async_trait::async_trait;

use super::Owned;
use crate::db::exec::{Args, Reader, Tx};
use crate::db::rows::RunRow;
use crate::db::sql::console::search_sql;
use crate::db::{Backend, Db};
use crate::ledger::port::{LedgerStore, RunSearch};
use crate::ledger::storage::{Result, StoreError};
use crate::ledger::{
    explain_lost, ClaimOutcome, ClaimRequest, IdempotencyKey, Moved, Namespace, OwnerCall,
    OwnerMove, Run,
};

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
        if let OwnerMove::Complete { .. } = mv {
            let done = || {
                let (fields, detail) = finish_parts(mv);
                let st = self.backend().statements();
                Completion::new(st, call, fields.result, detail, None)
            };
            if let Some(moved) = self.backend().complete_first(call, done).await? {
                return Ok(moved);
            }
        }
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
