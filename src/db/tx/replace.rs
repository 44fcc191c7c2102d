//! Replacing a dead letter: a new event under a new upstream key, claimed
//! and approved with its effects, linked to the original, in one
//! transaction; the original run (when it was stopped) finished.

use serde_json::json;

use super::deadletter::{
    close, fetch_in, not_dead_lettered, note_on_run, operator_move, refetch, refusal, refused,
    Closing,
};
use super::ingress::insert_raw_event;
use super::ledger::{approve_claimed, fetch_in as run_in, try_claim, Attempt};
use super::outbox::insert_effect;
use crate::db::exec::{Args, Tx};
use crate::db::Finish;
use crate::deadletter::{ActionOutcome, DeadLetter, Refusal, ReplaceCommand, Resolution};
use crate::ledger::storage::{Result, StoreError};
use crate::ledger::{ClaimRequest, Move, Namespace, Run, RunState};
use crate::outbox::seal::seals;

/// `replace`: the record closed, the original run finished
/// (`failed_terminal`, when it was stopped), and a new run under the
/// operator's key claimed and approved with its effects, all linked.
pub(crate) async fn replace(
    tx: &mut Tx<'_>,
    cmd: &ReplaceCommand,
) -> Result<Finish<ActionOutcome>> {
    let dl = fetch_in(tx, &cmd.id).await?;
    if let Some(why) = refusal(dl.as_ref()) {
        return refused(why);
    }
    let dl = dl.ok_or_else(|| StoreError::Corrupt("dead letter vanished".into()))?;
    let new_key = cmd.new_key.as_str();
    if let Some(taken) = run_in(tx, &dl.namespace, new_key).await? {
        return refused(Refusal::KeyTaken(taken.state));
    }
    let closing = Closing {
        resolution: Resolution::Replaced,
        actor: &cmd.actor,
        note: &cmd.reason,
        retain_ms: cmd.retain_ms,
        replayed: false,
        replaced_by: Some((&dl.namespace, new_key)),
    };
    if !close(tx, &cmd.id, closing).await? {
        return refused(Refusal::AlreadyResolved(Resolution::Replaced));
    }
    let link = json!({ "dead_letter_id": dl.id,
        "replaced_by": { "namespace": dl.namespace, "key": new_key }, "reason": cmd.reason });
    if dl.class.stops_run() {
        let reason = format!(
            "replaced by {}/{new_key} ({}): {}",
            dl.namespace, cmd.actor, cmd.reason
        );
        let moved = operator_move(tx, &dl, Move::Resolve, Some(&reason), &cmd.actor, link).await?;
        if moved.is_none() {
            return refused(not_dead_lettered(tx, &dl).await?);
        }
    } else {
        note_on_run(tx, &dl, "dead_letter_replaced", &cmd.actor, link).await?;
    }
    let Some(run) = claim_replacement(tx, cmd, &dl).await? else {
        return refused(Refusal::KeyTaken(RunState::Processing));
    };
    for effect in &cmd.effects {
        insert_effect(tx, &run, effect).await?;
    }
    if let Some(event) = &cmd.raw_event {
        insert_raw_event(tx, event).await?;
    }
    let st = tx.st;
    let args = Args::new()
        .bind(&dl.namespace)
        .bind(&dl.key)
        .bind(run.namespace.as_str())
        .bind(new_key)
        .bind(&dl.id)
        .bind(&cmd.actor)
        .bind(&cmd.reason)
        .bind(run.updated_at);
    tx.execute(&st.deadletter.insert_link, args).await?;
    let after = refetch(tx, &cmd.id).await?;
    Ok(Finish::Commit(ActionOutcome::Done {
        dead_letter: Box::new(after),
        run: Some(Box::new(run)),
        effects: cmd.effects.len() as u64,
    }))
}

/// Claims the replacement key and approves it (its effects are cleared by
/// the same policy as the original's); `None` when the key was taken
/// meanwhile.
async fn claim_replacement(
    tx: &mut Tx<'_>,
    cmd: &ReplaceCommand,
    dl: &DeadLetter,
) -> Result<Option<Run>> {
    let req = ClaimRequest {
        namespace: Namespace::parse(dl.namespace.clone()).map_err(StoreError::corrupt)?,
        key: cmd.new_key.clone(),
        business_key: None,
        payload_hash: cmd.payload_hash.clone(),
        lease_ms: 60_000,
        metadata: cmd.metadata.clone(),
        claimed_by: cmd.actor.clone(),
    };
    let Attempt::Won { run, lease, .. } = try_claim(tx, &req).await? else {
        return Ok(None);
    };
    let types: Vec<&str> = cmd.effects.iter().map(|e| e.effect_type.as_str()).collect();
    let detail = json!({ "effects": types, "replaces": { "namespace": dl.namespace, "key": dl.key,
        "dead_letter_id": dl.id }, "reason": cmd.reason, "seals": seals(&cmd.effects) });
    Ok(Some(
        approve_claimed(tx, &run, &lease, &cmd.actor, detail).await?,
    ))
}
