//! The ingress's transactions: a delivery accepted (claim, approve, raw
//! event, forward effect) or quarantined in one transaction; and the
//! [`IngressStore`] port.

use async_trait::async_trait;
use serde_json::{json, Value};

use super::chain::Foreseen;
use super::deadletter::record_dead_letter;
use super::ledger::{
    answer, approve_claimed_foreseen, fetch_in, first_entry, try_claim_foreseen, Attempt,
};
use super::outbox::insert_effect;
use super::to_json;
use crate::audit::AuditEntry;
use crate::clock::Millis;
use crate::db::exec::{Args, Tx};
use crate::db::rows::RawEventRow;
use crate::db::sql::Statements;
use crate::db::{Backend, Db, Finish};
use crate::deadletter::{DeadLetterClass, DeadLetterInput};
use crate::ingress::port::IngressStore;
use crate::ingress::RawEvent;
use crate::ledger::storage::Result;
use crate::ledger::{ClaimOutcome, ClaimRequest, Move, Run, RunState};
use crate::outbox::seal::seals;
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

/// What an accept transaction came to.
enum Intaken {
    /// The claim's attempt (won: accepted with its forward).
    Claim(Attempt),
    /// The same body came earlier under another event id, inside the
    /// source's body window: nothing was written; the earlier event's run.
    SameBody(Box<Run>),
}

/// Claims the ingress run and, when the claim wins, approves it with the
/// forward effect and stores the raw event. With a body window, a body
/// seen under another event id inside it is answered first.
async fn accept(
    tx: &mut Tx<'_>,
    req: &ClaimRequest,
    event: &RawEvent,
    forward: &NewEffect,
    body_window: Option<Millis>,
    foreseen: &[Foreseen; 2],
) -> Result<Finish<Intaken>> {
    if let Some(window) = body_window {
        if let Some(earlier) = earlier_event(tx, event, window).await? {
            return Ok(Finish::Rollback(Intaken::SameBody(Box::new(earlier))));
        }
    }
    let attempt = try_claim_foreseen(tx, req, Some(&foreseen[0])).await?;
    let Attempt::Won {
        run,
        lease,
        reclaimed_from,
    } = attempt
    else {
        return Ok(attempt.finish().map(Intaken::Claim));
    };
    // Inside the accept transaction: a crash here rolls the claim back.
    crate::chaos::point("after_claim");
    let detail = approval_detail(event, forward);
    let actor = &req.claimed_by;
    let approved =
        approve_claimed_foreseen(tx, &run, &lease, actor, detail, Some(&foreseen[1])).await?;
    insert_effect(tx, &approved, forward).await?;
    insert_raw_event(tx, event).await?;
    tx.before_commit();
    Ok(Finish::Commit(Intaken::Claim(Attempt::Won {
        run: Box::new(approved),
        lease,
        reclaimed_from,
    })))
}

/// Remembers the delivery's body for `window` and returns the run of the
/// event it came under earlier inside the window, if that was another
/// event id (the row's lock orders concurrent deliveries of one body). A
/// remembered event whose run is gone (deleted by retention) gives the
/// body over to this delivery.
async fn earlier_event(tx: &mut Tx<'_>, event: &RawEvent, window: Millis) -> Result<Option<Run>> {
    let st = tx.st;
    let args = || {
        Args::new()
            .bind(&event.source)
            .bind(event.payload_hash.as_str())
            .bind(&event.event_id)
            .bind(event.received_at)
            .bind(event.received_at.saturating_add(window))
    };
    let (first,): (String,) = tx.one(&st.ingress.remember_body, args()).await?;
    if first == event.event_id {
        return Ok(None);
    }
    match fetch_in(tx, &event.source, &first).await? {
        Some(run) => Ok(Some(run)),
        None => {
            tx.execute(&st.ingress.take_body, args()).await?;
            Ok(None)
        }
    }
}

/// The approval's audit detail, with the forward's seal.
pub(crate) fn approval_detail(event: &RawEvent, forward: &NewEffect) -> Value {
    json!({ "effects": [forward.effect_type], "raw_event_id": event.id,
        "seals": seals(std::slice::from_ref(forward)) })
}

/// A new event's two audit entries (claim, approval), hashed before the
/// accept is written, at `at`.
fn foresee(
    st: &Statements,
    req: &ClaimRequest,
    event: &RawEvent,
    forward: &NewEffect,
    at: Millis,
) -> [Foreseen; 2] {
    let claim = first_entry(st, req, at);
    let entry = intake_approval_entry(req, approval_detail(event, forward), at);
    let approval = Foreseen::new(st, entry, Some(claim.hash().to_owned()));
    [claim, approval]
}

/// A new event's second audit entry, the move to `approved` with its
/// forward effect, with `detail`.
pub(crate) fn intake_approval_entry(req: &ClaimRequest, detail: Value, at: Millis) -> AuditEntry {
    AuditEntry {
        namespace: req.namespace.to_string(),
        key: req.key.to_string(),
        seq: 2,
        kind: Move::Approve.as_str().into(),
        actor: req.claimed_by.clone(),
        from_state: Some(RunState::Processing.as_str().into()),
        to_state: Some(RunState::Approved.as_str().into()),
        version: Some(2),
        detail,
        created_at: at,
    }
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
        body_window: Option<Millis>,
    ) -> Result<ClaimOutcome> {
        // The single-statement intake has no body window to consult.
        if body_window.is_none() {
            if let Some(answer) = self.backend().accept_first(req, event, forward).await? {
                return Ok(answer);
            }
        }
        let (owned, event, forward) = (req.clone(), event.clone(), forward.clone());
        let at = self.backend().clock().now_ms();
        let foreseen = foresee(self.backend().statements(), req, &event, &forward, at);
        let intaken = self
            .write(move |tx| {
                Box::pin(async move {
                    accept(tx, &owned, &event, &forward, body_window, &foreseen).await
                })
            })
            .await?;
        match intaken {
            Intaken::Claim(attempt) => answer(&self.reader(), req, attempt).await,
            Intaken::SameBody(earlier) => Ok(ClaimOutcome::DuplicateOf(*earlier)),
        }
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
