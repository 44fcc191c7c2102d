//! Replaying a dead letter: the record closed as replayed, the run's
//! unfinished effects back to `pending` under the same keys with a fresh
//! budget, and the run `dead_lettered → approved` (or `→ awaiting_human`
//! through the gate again, or `→ failed_retryable` when it never queued
//! an effect, its reclaim budget restarted), in one transaction; for a bulk
//! job's item, only while the job runs under its runner. An explicit
//! release refuses a run that queued effects.

use serde_json::json;

use super::approval::insert_challenge;
use super::chain::record;
use super::deadletter::{close, fetch_in, operator_move, refetch, refusal, refused, Closing};
use super::jobs::{mark, refuse_item, renew};
use super::ledger::fetch_in as run_in;
use crate::db::exec::{Args, Tx};
use crate::db::rows::RunRow;
use crate::db::{Backend, Db, Finish};
use crate::deadletter::{ActionOutcome, Refusal, ReplayCommand, Resolution};
use crate::ledger::storage::Result;
use crate::ledger::Move;

/// Replays `cmd`; a refused job item is marked refused afterwards, in a
/// transaction of its own.
pub(crate) async fn replay<B: Backend>(db: &Db<B>, cmd: &ReplayCommand) -> Result<ActionOutcome> {
    let owned = cmd.clone();
    let outcome = db
        .write(move |tx| Box::pin(async move { replay_in(tx, &owned).await }))
        .await?;
    let (ActionOutcome::Refused(why), Some(item)) = (&outcome, &cmd.job_item) else {
        return Ok(outcome);
    };
    if matches!(why, Refusal::JobNotRunning | Refusal::ItemDone) {
        return Ok(outcome);
    }
    let (item, describe) = (item.clone(), why.describe());
    let marked = db
        .write(move |tx| Box::pin(async move { refuse_item(tx, &item, &describe).await }))
        .await?;
    if !marked {
        return Ok(ActionOutcome::Refused(Refusal::JobNotRunning));
    }
    Ok(outcome)
}

async fn replay_in(tx: &mut Tx<'_>, cmd: &ReplayCommand) -> Result<Finish<ActionOutcome>> {
    if let Some(item) = &cmd.job_item {
        if !renew(tx, item).await? {
            return refused(Refusal::JobNotRunning);
        }
    }
    let dl = fetch_in(tx, &cmd.id).await?;
    let why = refusal(dl.as_ref()).or_else(|| {
        dl.as_ref()
            .filter(|d| !d.class.stops_run())
            .map(|_| Refusal::NothingToReplay)
    });
    let (Some(dl), None) = (dl, why.clone()) else {
        return refused(why.unwrap_or(Refusal::NotFound));
    };
    let st = tx.st;
    let key = Args::new().bind(&dl.namespace).bind(&dl.key);
    let (effects,): (i64,) = tx.one(&st.outbox.count_effects, key.clone()).await?;
    if cmd.release && effects > 0 {
        return refused(Refusal::RunHasEffects(effects));
    }
    let closing = Closing {
        resolution: Resolution::Replayed,
        actor: &cmd.actor,
        note: &cmd.reason,
        retain_ms: cmd.retain_ms,
        replayed: true,
        replaced_by: None,
    };
    if !close(tx, &cmd.id, closing).await? {
        return refused(Refusal::AlreadyResolved(Resolution::Replayed));
    }
    let mv = match (&cmd.challenge, effects) {
        (Some(_), _) => Move::ReplayGated,
        (None, 0) => Move::ReplayRelease,
        (None, _) => Move::ReplayUngated,
    };
    if let Some(c) = &cmd.correction {
        let args = Args::new()
            .bind(tx.now)
            .bind(&c.effect_id)
            .bind(&dl.namespace)
            .bind(&dl.key)
            .bind(Some(c.body.as_slice()))
            .bind(&c.idempotency_key);
        if tx.execute(&st.outbox.correct_effect, args).await? != 1 {
            return refused(Refusal::EffectNotReplayable(c.effect_id.clone()));
        }
    }
    // A gated replay re-queues nothing now: the approval does.
    let requeued = if cmd.challenge.is_some() {
        0
    } else {
        let args = Args::new().bind(tx.now).bind(&dl.namespace).bind(&dl.key);
        tx.execute(&st.outbox.requeue_effects, args).await?
    };
    let job_id = cmd.job_item.as_ref().map(|i| i.job_id.as_str());
    let started_by = cmd.job_item.as_ref().and_then(|i| i.started_by.as_deref());
    let detail = json!({ "dead_letter_id": dl.id, "class": dl.class.as_str(),
        "reason": cmd.reason, "requeued": requeued, "job_id": job_id, "started_by": started_by,
        "replay_count": dl.replay_count + 1, "release": cmd.release,
        "correction": cmd.correction.as_ref().map(|c| &c.audit) });
    let Some(mut run) = operator_move(tx, &dl, mv, None, &cmd.actor, detail).await? else {
        let run = run_in(tx, &dl.namespace, &dl.key).await?;
        return refused(Refusal::RunNotDeadLettered(run.map(|r| r.state)));
    };
    if let Some(challenge) = &cmd.challenge {
        insert_challenge(tx, &run, challenge, run.updated_at).await?;
    }
    if mv == Move::ReplayUngated {
        // Nothing left to send (every effect finished meanwhile): complete now.
        let args = Args::new().bind(tx.now).bind(&dl.namespace).bind(&dl.key);
        if let Some(row) = tx.optional::<RunRow>(&st.runs.complete_run, args).await? {
            run = row.to_run()?;
            let detail = json!({ "dead_letter_id": dl.id, "note": "no effect was outstanding" });
            record(tx, &row, &run, Move::EffectsCompleted, &cmd.actor, detail).await?;
        }
    }
    if let Some(item) = &cmd.job_item {
        if !mark(tx, item, "replayed", run.state.as_str()).await? {
            return refused(Refusal::ItemDone);
        }
    }
    let after = refetch(tx, &cmd.id).await?;
    Ok(Finish::Commit(ActionOutcome::Done {
        dead_letter: Box::new(after),
        run: Some(Box::new(run)),
        effects: requeued,
    }))
}
