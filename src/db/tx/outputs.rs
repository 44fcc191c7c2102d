//! Recorded model output: each posted output the run's next attempt
//! (redacted before storage), and the run failed for good in the same
//! transaction when the repairs ran out; and the [`OutputStore`] port.

use async_trait::async_trait;
use serde_json::json;

use super::chain::{note, record};
use super::ledger::owner_guard;
use super::{to_json, Owned};
use crate::db::exec::{Args, Tx};
use crate::db::rows::{OutputRow, RunRow};
use crate::db::{Backend, Db, Finish};
use crate::ledger::storage::Result;
use crate::ledger::{IdempotencyKey, Move, Moved, Namespace, OwnerCall};
use crate::validate::port::{NewOutput, OutputRecorded, OutputStore, StoredOutput};

async fn record_output(
    tx: &mut Tx<'_>,
    call: &OwnerCall,
    out: &NewOutput,
    max_repairs: u32,
) -> Result<Finish<Owned<OutputRecorded>>> {
    let st = tx.st;
    let touched = tx
        .optional::<RunRow>(&st.runs.owner_touch, owner_guard(tx.now, call))
        .await?;
    let Some(row) = touched else {
        return Ok(Finish::Rollback(Owned::Lost));
    };
    let valid = out.violations.is_empty();
    let now = row.to_run()?.updated_at;
    // Model output is personal data more often than not: the redaction
    // rules apply before it is stored, so the gate's card (built from the
    // stored copy) never shows a redacted value either.
    let mut output = out.output.clone();
    st.redactor.value(call.namespace.as_str(), &mut output);
    let args = Args::new()
        .bind(call.namespace.as_str())
        .bind(call.key.as_str())
        .bind(&out.operation)
        .bind(i64::from(valid))
        .bind(output.to_string())
        .bind(to_json(&out.violations)?)
        .bind(&out.provider_class)
        .bind(&out.model)
        .bind(&out.revision)
        .bind(&call.actor)
        .bind(now);
    let (attempt,): (i64,) = tx.one(&st.approval.insert_output, args).await?;
    let detail = json!({
        "attempt": attempt,
        "operation": out.operation,
        "valid": valid,
        "violations": out.violations.len(),
        "model": { "provider_class": out.provider_class, "model": out.model, "revision": out.revision },
    });
    let kind = if valid {
        "output_recorded"
    } else {
        "output_invalid"
    };
    let mut run = note(tx, &row, kind, &call.actor, detail, now, None).await?;
    let exhausted = !valid && attempt > i64::from(max_repairs);
    if exhausted {
        let error = format!(
            "model output still invalid after {attempt} attempts (max_repairs {max_repairs})"
        );
        let args = owner_guard(tx.now, call)
            .bind(None::<String>)
            .bind(error.as_str())
            .bind("output_invalid");
        let failed: RunRow = tx.one(&st.runs.finish[&Move::FailTerminal], args).await?;
        run = failed.to_run()?;
        let detail = json!({ "error": error, "attempts": attempt });
        record(tx, &failed, &run, Move::FailTerminal, &call.actor, detail).await?;
    }
    let lease = run.lease;
    Ok(Finish::Commit(Owned::Done(OutputRecorded {
        attempt,
        moved: Moved { run, lease },
        exhausted,
    })))
}

#[async_trait]
impl<B: Backend> OutputStore for Db<B> {
    async fn record_output(
        &self,
        call: &OwnerCall,
        output: &NewOutput,
        max_repairs: u32,
    ) -> Result<OutputRecorded> {
        let (owned, output) = (call.clone(), output.clone());
        let recorded = self
            .write(move |tx| {
                Box::pin(async move { record_output(tx, &owned, &output, max_repairs).await })
            })
            .await?;
        self.owned(call, recorded).await
    }

    async fn latest_output(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
    ) -> Result<Option<StoredOutput>> {
        let rd = self.reader();
        let args = Args::new().bind(namespace.as_str()).bind(key.as_str());
        rd.optional::<OutputRow>(&rd.st.approval.latest_output, args)
            .await?
            .map(OutputRow::into_output)
            .transpose()
    }
}
