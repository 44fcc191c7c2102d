//! The ingress's transactions: a delivery accepted (claim, approve, raw
//! event, forward effect) or quarantined in one transaction; and the
//! [`IngressStore`] port.

use async_trait::async_trait;
use serde_json::json;

use super::deadletter::record_dead_letter;
use super::ledger::{answer, approve_claimed, try_claim, Attempt};
use super::outbox::insert_effect;
use super::to_json;
use crate::db::exec::{Args, Tx};
use crate::db::rows::RawEventRow;
use crate::db::{Backend, Db, Finish};
use crate::deadletter::{DeadLetterClass, DeadLetterInput};
use crate::ingress::port::IngressStore;
use crate::ingress::RawEvent;
use crate::ledger::storage::Result;
use crate::ledger::{ClaimOutcome, ClaimRequest, Run};
use crate::outbox::NewEffect;

/// Stores a raw delivery; the stored copy is evidence, redacted when rules
/// apply (the forward effect carries the verbatim bytes to deliver).
pub(crate) async fn insert_raw_event(tx: &mut Tx<'_>, event: &RawEvent) -> Result<()> {
    let st = tx.st;
    let headers = to_json(&event.headers)?;
    let redacted = st.redactor.body(&event.source, &event.body);
    let args = Args::new()
        .bind(&event.id)
        .bind(&event.source)
        .bind(&event.event_id)
        .bind(&event.event_type)
        .bind(event.status.as_str())
        .bind(event.payload_hash.as_str())
        .bind(&event.content_type)
        .bind(headers)
        .bind(redacted.as_deref().unwrap_or(&event.body))
        .bind(event.received_at);
    tx.execute(&st.ingress.insert_raw_event, args).await?;
    Ok(())
}

/// Claims the ingress run and, when the claim wins, approves it with the
/// forward effect and stores the raw event.
async fn accept(
    tx: &mut Tx<'_>,
    req: &ClaimRequest,
    event: &RawEvent,
    forward: &NewEffect,
) -> Result<Finish<Attempt>> {
    let attempt = try_claim(tx, req).await?;
    let Attempt::Won {
        run,
        lease,
        reclaimed_from,
    } = attempt
    else {
        return Ok(attempt.finish());
    };
    // Inside the accept transaction: a crash here rolls the claim back.
    crate::chaos::point("after_claim");
    let detail = json!({ "effects": [forward.effect_type], "raw_event_id": event.id });
    let approved = approve_claimed(tx, &run, &lease, &req.claimed_by, detail).await?;
    insert_effect(tx, &approved, forward).await?;
    insert_raw_event(tx, event).await?;
    tx.before_commit();
    Ok(Finish::Commit(Attempt::Won {
        run: Box::new(approved),
        lease,
        reclaimed_from,
    }))
}

/// Stores a conflicting delivery as evidence and records its dead letter.
async fn quarantine(tx: &mut Tx<'_>, event: &RawEvent, run: &Run) -> Result<()> {
    insert_raw_event(tx, event).await?;
    let detail = json!({
        "event_type": event.event_type,
        "stored_payload_hash": run.payload_hash.as_str(),
        "offered_payload_hash": event.payload_hash.as_str(),
        "run_state": run.state.as_str(),
    });
    let mut input = DeadLetterInput::new(
        DeadLetterClass::PayloadConflict,
        "the same event id arrived with a different body; it was quarantined, never forwarded",
        detail.clone(),
    );
    input.evidence = Some(detail);
    input.raw_event_id = Some(event.id.clone());
    record_dead_letter(tx, run, &input, event.received_at).await?;
    Ok(())
}

#[async_trait]
impl<B: Backend> IngressStore for Db<B> {
    async fn accept_event(
        &self,
        req: &ClaimRequest,
        event: &RawEvent,
        forward: &NewEffect,
    ) -> Result<ClaimOutcome> {
        if let Some(answer) = self.backend().accept_first(req).await? {
            return Ok(answer);
        }
        let (owned, event, forward) = (req.clone(), event.clone(), forward.clone());
        let attempt = self
            .write(move |tx| Box::pin(async move { accept(tx, &owned, &event, &forward).await }))
            .await?;
        answer(&self.reader(), req, attempt).await
    }

    async fn quarantine_event(&self, event: &RawEvent, run: &Run) -> Result<()> {
        let (event, run) = (event.clone(), run.clone());
        self.commit(move |tx| Box::pin(async move { quarantine(tx, &event, &run).await }))
            .await
    }

    async fn raw_event(&self, id: &str) -> Result<Option<RawEvent>> {
        let rd = self.reader();
        rd.optional::<RawEventRow>(&rd.st.ingress.raw_event, Args::new().bind(id))
            .await?
            .map(RawEventRow::into_event)
            .transpose()
    }
}
