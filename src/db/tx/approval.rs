//! The approval gate's transactions: a run gated with its challenge, a
//! decision consumed with the run's move and the outbox insert in one
//! transaction or not at all, expiry and escalation; and the
//! [`ApprovalStore`] port.

use async_trait::async_trait;
use serde_json::{json, Value};

use super::chain::{note, record};
use super::deadletter::record_dead_letter;
use super::ledger::{owner_guard, owner_move, MoveFields};
use super::outbox::insert_effect;
use super::{to_json, Owned};
use crate::approval::port::{ApprovalStore, Decided};
use crate::approval::{Challenge, ChallengeState, NewChallenge, StagedEffect, Verdict};
use crate::db::exec::{Args, Tx};
use crate::db::rows::{ChallengeRow, RunRow};
use crate::db::{Backend, Db, Finish};
use crate::deadletter::{DeadLetterClass, DeadLetterInput};
use crate::ledger::storage::{Result, StoreError};
use crate::ledger::{Move, Moved, OwnerCall, Run};
use crate::outbox::seal::add_seals;
use crate::outbox::NewEffect;

/// The actor of the expiry sweeper's moves.
const SWEEPER: &str = "oncegate:approval-sweeper";

/// Stores a challenge for `run`, its effects staged on it.
pub(crate) async fn insert_challenge(
    tx: &mut Tx<'_>,
    run: &Run,
    c: &NewChallenge,
    created_at: i64,
) -> Result<()> {
    let st = tx.st;
    let staged: Vec<StagedEffect> = c.effects.iter().map(StagedEffect::from).collect();
    let args = Args::new()
        .bind(&c.id)
        .bind(run.namespace.as_str())
        .bind(run.key.as_str())
        .bind(c.token_hash.as_deref())
        .bind(&c.operation)
        .bind(to_json(&c.decisions)?)
        .bind(to_json(&c.audience)?)
        .bind(to_json(&c.required_roles)?)
        .bind(c.approver_auth.as_str())
        .bind(ChallengeState::Pending.as_str())
        .bind(to_json(&staged)?)
        .bind(c.callback_url.as_deref())
        .bind(c.callback_target.as_deref())
        .bind(c.card.to_string())
        .bind(c.escalation)
        .bind(created_at)
        .bind(c.expires_at)
        .bind(None::<i64>)
        .bind(None::<String>)
        .bind(None::<String>)
        .bind(None::<String>);
    tx.execute(&st.approval.insert_challenge, args).await?;
    Ok(())
}

/// `processing → awaiting_human` by compare-and-set, with the challenge.
async fn gate(
    tx: &mut Tx<'_>,
    call: &OwnerCall,
    challenge: &NewChallenge,
    detail: Value,
) -> Result<Finish<Owned<Moved>>> {
    let st = tx.st;
    let args = owner_guard(tx.now, call)
        .bind(None::<String>)
        .bind(None::<String>)
        .bind(None::<String>);
    let Some(row) = tx
        .optional::<RunRow>(&st.runs.finish[&Move::Gate], args)
        .await?
    else {
        return Ok(Finish::Rollback(Owned::Lost));
    };
    let run = row.to_run()?;
    record(tx, &row, &run, Move::Gate, &call.actor, detail).await?;
    insert_challenge(tx, &run, challenge, run.updated_at).await?;
    let lease = run.lease;
    Ok(Finish::Commit(Owned::Done(Moved { run, lease })))
}

/// Consume, move and enqueue in one transaction, or nothing (`None`: the
/// challenge was no longer pending or had expired).
async fn decide(tx: &mut Tx<'_>, d: &Decided) -> Result<Finish<Option<Run>>> {
    let st = tx.st;
    let (state, mv) = match d.verdict {
        Verdict::Approve => (ChallengeState::Approved, Move::ApprovalConsumed),
        Verdict::Reject => (ChallengeState::Rejected, Move::ApprovalRejected),
    };
    let args = Args::new()
        .bind(tx.now)
        .bind(&d.challenge_id)
        .bind(state.as_str())
        .bind(&d.approver)
        .bind(&d.auth_method)
        .bind(d.reason.as_deref());
    let Some(consumed) = tx
        .optional::<ChallengeRow>(&st.approval.consume, args)
        .await?
    else {
        return Ok(Finish::Rollback(None));
    };
    let challenge = consumed.into_challenge()?;
    let reason = match d.verdict {
        Verdict::Approve => None,
        Verdict::Reject => Some(format!(
            "rejected by {}: {}",
            d.approver,
            d.reason.as_deref().unwrap_or("no reason given")
        )),
    };
    let args = Args::new()
        .bind(tx.now)
        .bind(&challenge.namespace)
        .bind(&challenge.key)
        .bind(reason.as_deref());
    let row = tx
        .optional::<RunRow>(&st.runs.system_move[&mv], args)
        .await?
        .ok_or_else(|| {
            StoreError::Corrupt(format!(
                "challenge {} is pending but its run is not awaiting_human",
                challenge.new.id
            ))
        })?;
    let run = row.to_run()?;
    let types: Vec<&str> = d.effects.iter().map(|e| e.effect_type.as_str()).collect();
    let mut detail = json!({
        "challenge_id": challenge.new.id,
        "decision": d.verdict.as_str(),
        "approver": d.approver,
        "auth_method": d.auth_method,
        "reason": d.reason,
        "effects": types,
        "waited_ms": run.updated_at - challenge.created_at,
    });
    add_seals(&mut detail, &d.effects);
    record(tx, &row, &run, mv, &d.approver, detail).await?;
    // Consumed and moved, effects not yet inserted: a crash here must undo
    // the consume (one transaction or nothing).
    crate::chaos::point("approval_decide");
    for effect in &d.effects {
        insert_effect(tx, &run, effect).await?;
    }
    if d.verdict == Verdict::Approve {
        // After a gated replay the run's effects exist already (failed or
        // unknown): approval gives them a fresh budget under the same keys.
        let args = Args::new()
            .bind(tx.now)
            .bind(&challenge.namespace)
            .bind(&challenge.key);
        tx.execute(&st.outbox.requeue_effects, args).await?;
    }
    tx.before_commit();
    Ok(Finish::Commit(Some(run)))
}

/// Closes a pending challenge past its expiry.
async fn close_due(tx: &mut Tx<'_>, id: &str, state: ChallengeState) -> Result<Option<Challenge>> {
    let st = tx.st;
    let args = Args::new().bind(tx.now).bind(id).bind(state.as_str());
    tx.optional::<ChallengeRow>(&st.approval.close_due, args)
        .await?
        .map(ChallengeRow::into_challenge)
        .transpose()
}

/// Expires a due challenge: the run `awaiting_human → dead_lettered` with
/// its dead letter, and the callback queued.
async fn expire(tx: &mut Tx<'_>, id: &str, callback: Option<&NewEffect>) -> Result<Finish<bool>> {
    let Some(challenge) = close_due(tx, id, ChallengeState::Expired).await? else {
        return Ok(Finish::Rollback(false));
    };
    let st = tx.st;
    let args = Args::new()
        .bind(tx.now)
        .bind(&challenge.namespace)
        .bind(&challenge.key)
        .bind("approval_expired");
    let moved = tx
        .optional::<RunRow>(&st.runs.system_move[&Move::ApprovalExpired], args)
        .await?;
    if let Some(row) = moved {
        let run = row.to_run()?;
        let mut detail = json!({
            "challenge_id": challenge.new.id,
            "operation": challenge.new.operation,
            "expired_at": challenge.new.expires_at,
            "escalation": challenge.new.escalation,
            "staged_effects": challenge.new.effects.iter().map(|e| e.effect_type.as_str()).collect::<Vec<_>>(),
        });
        add_seals(
            &mut detail,
            callback.map(std::slice::from_ref).unwrap_or_default(),
        );
        record(
            tx,
            &row,
            &run,
            Move::ApprovalExpired,
            SWEEPER,
            detail.clone(),
        )
        .await?;
        let input = DeadLetterInput::new(
            DeadLetterClass::ApprovalExpired,
            "nobody decided the approval before it expired; nothing was sent",
            detail,
        );
        record_dead_letter(tx, &run, &input, run.updated_at).await?;
        if let Some(callback) = callback {
            insert_effect(tx, &run, callback).await?;
        }
    }
    Ok(Finish::Commit(true))
}

/// Replaces a due challenge by its escalation; the run keeps waiting.
async fn escalate(tx: &mut Tx<'_>, id: &str, next: &NewChallenge) -> Result<Finish<bool>> {
    let Some(challenge) = close_due(tx, id, ChallengeState::Escalated).await? else {
        return Ok(Finish::Rollback(false));
    };
    let st = tx.st;
    let args = Args::new().bind(&challenge.namespace).bind(&challenge.key);
    let row: RunRow = tx.one(&st.runs.touch, args).await?;
    let detail = json!({
        "challenge_id": challenge.new.id,
        "escalated_to": next.id,
        "audience": next.audience,
        "expires_at": next.expires_at,
    });
    let at = challenge.new.expires_at.max(tx.clock_now);
    let run = note(tx, &row, "approval_escalated", SWEEPER, detail, at, None).await?;
    insert_challenge(tx, &run, next, at).await?;
    Ok(Finish::Commit(true))
}

impl<B: Backend> Db<B> {
    async fn challenges_by(&self, sql: &str, args: Args<'_>) -> Result<Vec<Challenge>> {
        self.reader()
            .all::<ChallengeRow>(sql, args)
            .await?
            .into_iter()
            .map(ChallengeRow::into_challenge)
            .collect()
    }
}

#[async_trait]
impl<B: Backend> ApprovalStore for Db<B> {
    async fn server_secret(&self, name: &str, candidate: &str) -> Result<String> {
        let (name, candidate) = (name.to_owned(), candidate.to_owned());
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                let at = tx.clock_now;
                let args = Args::new().bind(&name).bind(&candidate).bind(at);
                tx.execute(&st.approval.insert_secret, args).await?;
                let (value,): (String,) =
                    tx.one(&st.approval.secret, Args::new().bind(&name)).await?;
                Ok(value)
            })
        })
        .await
    }

    async fn gate(
        &self,
        call: &OwnerCall,
        challenge: &NewChallenge,
        detail: Value,
    ) -> Result<Moved> {
        let (owned, challenge) = (call.clone(), challenge.clone());
        let moved = self
            .write(move |tx| Box::pin(async move { gate(tx, &owned, &challenge, detail).await }))
            .await?;
        self.owned(call, moved).await
    }

    async fn approve_by_policy(
        &self,
        call: &OwnerCall,
        effects: &[NewEffect],
        detail: Value,
    ) -> Result<Moved> {
        let (owned, effects) = (call.clone(), effects.to_vec());
        let moved = self
            .write(move |tx| {
                Box::pin(async move {
                    let fields = MoveFields::default();
                    owner_move(tx, &owned, Move::Approve, fields, detail, &effects).await
                })
            })
            .await?;
        self.owned(call, moved).await
    }

    async fn challenge_by_token(&self, token_hash: &str) -> Result<Option<Challenge>> {
        let sql = &self.backend().statements().approval.by_token;
        Ok(self
            .challenges_by(sql, Args::new().bind(token_hash))
            .await?
            .pop())
    }

    async fn challenge(&self, id: &str) -> Result<Option<Challenge>> {
        let sql = &self.backend().statements().approval.by_id;
        Ok(self.challenges_by(sql, Args::new().bind(id)).await?.pop())
    }

    async fn challenges(
        &self,
        state: Option<ChallengeState>,
        limit: i64,
    ) -> Result<Vec<Challenge>> {
        let st = &self.backend().statements().approval;
        match state {
            Some(state) => {
                let args = Args::new().bind(state.as_str()).bind(limit);
                self.challenges_by(&st.in_state, args).await
            }
            None => {
                self.challenges_by(&st.newest, Args::new().bind(limit))
                    .await
            }
        }
    }

    async fn decide(&self, decided: &Decided) -> Result<Option<Run>> {
        let decided = decided.clone();
        self.write(move |tx| Box::pin(async move { decide(tx, &decided).await }))
            .await
    }

    async fn due_challenges(&self, limit: i64) -> Result<Vec<Challenge>> {
        let sql = &self.backend().statements().approval.due;
        let args = Args::new().bind(self.backend().now()).bind(limit);
        self.challenges_by(sql, args).await
    }

    async fn expire_challenge(&self, id: &str, callback: Option<&NewEffect>) -> Result<bool> {
        let (id, callback) = (id.to_owned(), callback.cloned());
        self.write(move |tx| Box::pin(async move { expire(tx, &id, callback.as_ref()).await }))
            .await
    }

    async fn escalate_challenge(&self, id: &str, next: &NewChallenge) -> Result<bool> {
        let (id, next) = (id.to_owned(), next.clone());
        self.write(move |tx| Box::pin(async move { escalate(tx, &id, &next).await }))
            .await
    }
}
