//! The Idempotency-Key proxy's transactions: a key completed with its
//! answer kept beside it, and a forward whose outcome is unknown moved to
//! a dead letter, each in one transaction; and the [`ProxyStore`] port.

use async_trait::async_trait;
use serde_json::{json, Value};

use super::deadletter::record_dead_letter;
use super::ledger::{owner_move, Completion, MoveFields};
use super::Owned;
use crate::clock::Millis;
use crate::db::exec::{Args, FromRow, Row, Tx};
use crate::db::{Backend, Db, Finish};
use crate::deadletter::{DeadLetterClass, DeadLetterInput};
use crate::ledger::storage::Result;
use crate::ledger::{IdempotencyKey, Move, Moved, Namespace, OwnerCall, PayloadHash};
use crate::proxy::{Answer, ProxyStore};

/// A completed key's run result and audit detail: the answer's summary.
fn completion(answer: &Answer) -> (String, Value) {
    let summary = answer.summary();
    let detail = json!({ "proxy_answer": summary });
    (summary.to_string(), detail)
}

/// `processing → completed` by the owner, the answer kept for `window_ms`.
async fn complete(
    tx: &mut Tx<'_>,
    call: &OwnerCall,
    answer: &Answer,
    window_ms: Millis,
) -> Result<Finish<Owned<Moved>>> {
    let (result, detail) = completion(answer);
    let fields = MoveFields {
        result: Some(result),
        ..MoveFields::default()
    };
    let moved = owner_move(tx, call, Move::Complete, fields, detail, &[]).await?;
    if matches!(moved, Finish::Commit(Owned::Done(_))) {
        let st = tx.st;
        let args = Args::new()
            .bind(tx.now)
            .bind(call.namespace.as_str())
            .bind(call.key.as_str())
            .bind(i64::from(answer.status))
            .bind(answer.headers_json())
            .bind(answer.body.as_slice())
            .bind(window_ms);
        tx.execute(&st.proxy.insert_answer, args).await?;
    }
    Ok(moved)
}

/// `processing → dead_lettered` by the owner, with an `unknown_outcome`
/// dead letter holding `evidence`.
async fn unknown(
    tx: &mut Tx<'_>,
    call: &OwnerCall,
    reason: &str,
    evidence: &Value,
) -> Result<Finish<Owned<Moved>>> {
    let fields = MoveFields {
        result: None,
        error: Some(reason),
        reason: Some(reason),
    };
    let detail = json!({ "outcome": "unknown", "evidence": evidence });
    let moved = owner_move(tx, call, Move::OutcomeUnknown, fields, detail, &[]).await?;
    if let Finish::Commit(Owned::Done(done)) = &moved {
        let mut input = DeadLetterInput::new(
            DeadLetterClass::UnknownOutcome,
            reason,
            json!({ "proxy": call.namespace.as_str(), "evidence": evidence }),
        );
        input.evidence = Some(evidence.clone());
        record_dead_letter(tx, &done.run, &input, done.run.updated_at).await?;
    }
    Ok(moved)
}

/// An answer as a statement returns it (`status`, `headers`, `body`).
pub(crate) struct Kept(pub(crate) Answer);

impl FromRow for Kept {
    fn from_row(row: &dyn Row) -> Result<Self> {
        let status: i64 = row.get("status")?;
        let headers: String = row.get("headers")?;
        Ok(Self(Answer {
            status: u16::try_from(status).unwrap_or(502),
            headers: Answer::parse_headers(&headers),
            body: row.get("body")?,
        }))
    }
}

#[async_trait]
impl<B: Backend> ProxyStore for Db<B> {
    async fn complete_with_answer(
        &self,
        call: &OwnerCall,
        answer: &Answer,
        window_ms: Millis,
    ) -> Result<Moved> {
        let done = || {
            let (result, detail) = completion(answer);
            let st = self.backend().statements();
            Completion::new(st, call, Some(result), detail, Some((answer, window_ms)))
        };
        if let Some(moved) = self.backend().complete_first(call, done).await? {
            return Ok(moved);
        }
        let (owned, answer) = (call.clone(), answer.clone());
        let moved = self
            .write(move |tx| {
                Box::pin(async move { complete(tx, &owned, &answer, window_ms).await })
            })
            .await?;
        self.owned(call, moved).await
    }

    async fn replay(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
        payload_hash: &PayloadHash,
    ) -> Result<Option<Answer>> {
        let batched = self.backend().replay_batched(namespace, key, payload_hash);
        if let Some(found) = batched.await {
            return Ok(found);
        }
        let rd = self.point_reader();
        let args = Args::new()
            .bind(rd.now)
            .bind(namespace.as_str())
            .bind(key.as_str())
            .bind(payload_hash.as_str());
        let kept: Option<Kept> = rd.optional(&rd.st.proxy.replay, args).await?;
        Ok(kept.map(|Kept(answer)| answer))
    }

    async fn stored_answer(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
    ) -> Result<Option<Answer>> {
        let rd = self.point_reader();
        let args = Args::new()
            .bind(rd.now)
            .bind(namespace.as_str())
            .bind(key.as_str());
        let kept: Option<Kept> = rd.optional(&rd.st.proxy.answer, args).await?;
        Ok(kept.map(|Kept(answer)| answer))
    }

    async fn outcome_unknown(
        &self,
        call: &OwnerCall,
        reason: &str,
        evidence: &Value,
    ) -> Result<Moved> {
        let (owned, reason, evidence) = (call.clone(), reason.to_owned(), evidence.clone());
        let moved = self
            .write(move |tx| Box::pin(async move { unknown(tx, &owned, &reason, &evidence).await }))
            .await?;
        self.owned(call, moved).await
    }

    async fn purge_answers(&self, limit: i64) -> Result<u64> {
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                let args = Args::new().bind(tx.now).bind(limit);
                tx.execute(&st.proxy.purge, args).await
            })
        })
        .await
    }

    async fn open_dead_letter(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
    ) -> Result<Option<String>> {
        let rd = self.reader();
        let args = Args::new().bind(namespace.as_str()).bind(key.as_str());
        let row: Option<(String,)> = rd.optional(&rd.st.proxy.open_dead_letter, args).await?;
        Ok(row.map(|(id,)| id))
    }
}
