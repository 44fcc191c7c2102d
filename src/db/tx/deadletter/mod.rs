//! Dead letters' transactions: the record every component writes inside
//! its own transaction, the operator's commands, the workflow's failure
//! report by execution ref; and the [`DeadLetterStore`] port.

mod record;

pub(crate) use record::record_dead_letter;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::chain::{note, record};
use super::ledger::fetch_in as run_in;
use super::{replace, replay};
use crate::db::exec::{Args, Tx};
use crate::db::rows::{DeadLetterRow, LinkRow, RunRow};
use crate::db::sql::deadletter::DeadLetterStatements;
use crate::db::{Backend, Db, Finish};
use crate::deadletter::port::DeadLetterStore;
use crate::deadletter::{
    ActionOutcome, DeadLetter, DeadLetterClass, DeadLetterFilter, DeadLetterInput, ExecutionFailed,
    ExecutionFailure, Refusal, ReplaceCommand, ReplayCommand, Resolution, ResolveCommand, RunLink,
};
use crate::ledger::storage::{Result, StoreError};
use crate::ledger::{Move, Run};

/// One record, inside a transaction.
pub(crate) async fn fetch_in(tx: &mut Tx<'_>, id: &str) -> Result<Option<DeadLetter>> {
    let st = tx.st;
    tx.optional::<DeadLetterRow>(&st.deadletter.fetch, Args::new().bind(id))
        .await?
        .map(DeadLetterRow::into_dead_letter)
        .transpose()
}

/// One record, inside a transaction, that must exist.
pub(crate) async fn refetch(tx: &mut Tx<'_>, id: &str) -> Result<DeadLetter> {
    fetch_in(tx, id)
        .await?
        .ok_or_else(|| StoreError::Corrupt("dead letter vanished".into()))
}

/// An audit entry on the record's run that moves nothing (the run keeps
/// its state), chained like any other.
pub(crate) async fn note_on_run(
    tx: &mut Tx<'_>,
    dl: &DeadLetter,
    kind: &str,
    actor: &str,
    detail: Value,
) -> Result<()> {
    let st = tx.st;
    let args = Args::new().bind(&dl.namespace).bind(&dl.key);
    let Some(row) = tx.optional::<RunRow>(&st.runs.touch, args).await? else {
        return Ok(());
    };
    let from = row.to_run()?.state;
    let at = tx.clock_now;
    note(tx, &row, kind, actor, detail, at, Some(from)).await?;
    Ok(())
}

/// Moves a run by an operator's command (no lease), with its audit entry.
pub(crate) async fn operator_move(
    tx: &mut Tx<'_>,
    dl: &DeadLetter,
    mv: Move,
    reason: Option<&str>,
    actor: &str,
    detail: Value,
) -> Result<Option<Run>> {
    let st = tx.st;
    let sql = st
        .runs
        .operator_move
        .get(&mv)
        .ok_or_else(|| StoreError::Corrupt(format!("no operator statement for {mv:?}")))?;
    let args = Args::new()
        .bind(tx.now)
        .bind(&dl.namespace)
        .bind(&dl.key)
        .bind(reason);
    let Some(row) = tx.optional::<RunRow>(sql, args).await? else {
        return Ok(None);
    };
    let run = row.to_run()?;
    record(tx, &row, &run, mv, actor, detail).await?;
    Ok(Some(run))
}

/// How an open record is closed.
pub(crate) struct Closing<'a> {
    pub(crate) resolution: Resolution,
    pub(crate) actor: &'a str,
    pub(crate) note: &'a str,
    pub(crate) retain_ms: i64,
    pub(crate) replayed: bool,
    pub(crate) replaced_by: Option<(&'a str, &'a str)>,
}

/// Ends an open record; `false` when it was resolved meanwhile.
pub(crate) async fn close(tx: &mut Tx<'_>, id: &str, how: Closing<'_>) -> Result<bool> {
    let st = tx.st;
    let args = Args::new()
        .bind(tx.now)
        .bind(id)
        .bind(how.resolution.as_str())
        .bind(how.actor)
        .bind(how.note)
        .bind(how.retain_ms)
        .bind(i64::from(how.replayed))
        .bind(how.replaced_by.map(|(ns, _)| ns))
        .bind(how.replaced_by.map(|(_, key)| key));
    Ok(tx.execute(&st.deadletter.resolve, args).await? == 1)
}

/// Why an open command cannot start from this record, if it cannot.
pub(crate) fn refusal(dl: Option<&DeadLetter>) -> Option<Refusal> {
    match dl {
        None => Some(Refusal::NotFound),
        Some(dl) => dl.resolution.map(Refusal::AlreadyResolved),
    }
}

/// The refusal for a record whose run is no longer dead-lettered.
pub(crate) async fn not_dead_lettered(tx: &mut Tx<'_>, dl: &DeadLetter) -> Result<Refusal> {
    let run = run_in(tx, &dl.namespace, &dl.key).await?;
    Ok(Refusal::RunNotDeadLettered(run.map(|r| r.state)))
}

/// A refusal that writes nothing.
pub(crate) fn refused(why: Refusal) -> Result<Finish<ActionOutcome>> {
    Ok(Finish::Rollback(ActionOutcome::Refused(why)))
}

/// `resolve`: record closed, run `dead_lettered → failed_terminal`.
async fn resolve(tx: &mut Tx<'_>, cmd: &ResolveCommand) -> Result<Finish<ActionOutcome>> {
    let dl = fetch_in(tx, &cmd.id).await?;
    if let Some(why) = refusal(dl.as_ref()) {
        return refused(why);
    }
    let dl = dl.ok_or_else(|| StoreError::Corrupt("dead letter vanished".into()))?;
    let closing = Closing {
        resolution: cmd.resolution,
        actor: &cmd.actor,
        note: &cmd.note,
        retain_ms: cmd.retain_ms,
        replayed: false,
        replaced_by: None,
    };
    if !close(tx, &cmd.id, closing).await? {
        return refused(Refusal::AlreadyResolved(cmd.resolution));
    }
    let detail = json!({ "dead_letter_id": dl.id, "class": dl.class.as_str(),
        "resolution": cmd.resolution.as_str(), "note": cmd.note });
    let mut moved = None;
    if dl.class.stops_run() {
        let reason = format!(
            "dead letter resolved ({}) by {}: {}",
            cmd.resolution, cmd.actor, cmd.note
        );
        moved = operator_move(tx, &dl, Move::Resolve, Some(&reason), &cmd.actor, detail).await?;
        if moved.is_none() {
            return refused(not_dead_lettered(tx, &dl).await?);
        }
    } else {
        note_on_run(tx, &dl, "dead_letter_resolved", &cmd.actor, detail).await?;
    }
    let after = refetch(tx, &cmd.id).await?;
    Ok(Finish::Commit(ActionOutcome::Done {
        dead_letter: Box::new(after),
        run: moved.map(Box::new),
        effects: 0,
    }))
}

/// `fail-by-execution`: every `processing` run of the execution moves,
/// with its audit entry and (not retryable) dead letter; `None` when none
/// was processing (nothing written).
async fn fail_by_execution(
    tx: &mut Tx<'_>,
    f: &ExecutionFailure,
) -> Result<Finish<Option<Vec<Run>>>> {
    let mv = if f.retryable {
        Move::ExecutionFailed
    } else {
        Move::WorkflowError
    };
    let st = tx.st;
    let sql = st
        .runs
        .fail_by_execution
        .get(&mv)
        .ok_or_else(|| StoreError::Corrupt(format!("no statement for {mv:?}")))?;
    let reason = (!f.retryable).then_some(f.message.as_str());
    let args = Args::new()
        .bind(tx.now)
        .bind(&f.execution_ref)
        .bind(&f.message)
        .bind(reason)
        .bind(f.claimed_by.as_deref());
    let rows: Vec<RunRow> = tx.all(sql, args).await?;
    if rows.is_empty() {
        return Ok(Finish::Rollback(None));
    }
    let mut moved = Vec::with_capacity(rows.len());
    for row in rows {
        let run = row.to_run()?;
        record(tx, &row, &run, mv, &f.actor, f.evidence()).await?;
        if !f.retryable {
            let mut input = DeadLetterInput::new(
                DeadLetterClass::WorkflowError,
                f.message.clone(),
                f.evidence(),
            );
            input.evidence = Some(f.evidence());
            record_dead_letter(tx, &run, &input, run.updated_at).await?;
        }
        moved.push(run);
    }
    Ok(Finish::Commit(Some(moved)))
}

#[async_trait]
impl<B: Backend> DeadLetterStore for Db<B> {
    async fn dead_letters(&self, filter: &DeadLetterFilter) -> Result<Vec<DeadLetter>> {
        let (sql, args) = DeadLetterStatements::list(filter);
        self.reader()
            .all::<DeadLetterRow>(&sql, args)
            .await?
            .into_iter()
            .map(DeadLetterRow::into_dead_letter)
            .collect()
    }

    async fn dead_letter(&self, id: &str) -> Result<Option<DeadLetter>> {
        let rd = self.reader();
        rd.optional::<DeadLetterRow>(&rd.st.deadletter.fetch, Args::new().bind(id))
            .await?
            .map(DeadLetterRow::into_dead_letter)
            .transpose()
    }

    async fn assign_dead_letter(&self, id: &str, owner: &str) -> Result<Option<DeadLetter>> {
        let (record, owner) = (id.to_owned(), owner.to_owned());
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                let args = Args::new().bind(&record).bind(&owner);
                tx.execute(&st.deadletter.assign, args).await
            })
        })
        .await?;
        self.dead_letter(id).await
    }

    async fn resolve_dead_letter(&self, cmd: &ResolveCommand) -> Result<ActionOutcome> {
        let cmd = cmd.clone();
        self.write(move |tx| Box::pin(async move { resolve(tx, &cmd).await }))
            .await
    }

    async fn replay_dead_letter(&self, cmd: &ReplayCommand) -> Result<ActionOutcome> {
        replay::replay(self, cmd).await
    }

    async fn replace_dead_letter(&self, cmd: &ReplaceCommand) -> Result<ActionOutcome> {
        let cmd = cmd.clone();
        self.write(move |tx| Box::pin(async move { replace::replace(tx, &cmd).await }))
            .await
    }

    async fn fail_by_execution(&self, failure: &ExecutionFailure) -> Result<ExecutionFailed> {
        let owned = failure.clone();
        let moved = self
            .write(move |tx| Box::pin(async move { fail_by_execution(tx, &owned).await }))
            .await?;
        if let Some(moved) = moved {
            return Ok(ExecutionFailed::Moved(moved));
        }
        let rd = self.reader();
        let args = Args::new()
            .bind(&failure.execution_ref)
            .bind(failure.claimed_by.as_deref());
        let runs: Vec<RunRow> = rd.all(&rd.st.runs.runs_by_execution, args).await?;
        if runs.is_empty() {
            return Ok(ExecutionFailed::NoRun);
        }
        let runs = runs.iter().map(RunRow::to_run).collect::<Result<_>>()?;
        Ok(ExecutionFailed::NotProcessing(runs))
    }

    async fn run_links(&self, namespace: &str, key: &str) -> Result<Vec<RunLink>> {
        let rd = self.reader();
        let args = Args::new().bind(namespace).bind(key);
        let rows: Vec<LinkRow> = rd.all(&rd.st.deadletter.links, args).await?;
        Ok(rows.into_iter().map(RunLink::from).collect())
    }
}
