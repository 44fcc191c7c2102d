//! PostgreSQL's proxy replays: concurrent replay reads share one statement.
//!
//! A retried proxy key whose answer is kept is answered from one read
//! (the answer kept beside its completed run, [`crate::db::tx::proxy`]). Alone,
//! each read takes a pooled connection and a round trip, and under load
//! the callers queue for the pool's connections; SQLite reads the same
//! row on the calling thread without a hand-off. Here the reads that
//! arrive while a batch is in flight wait in a queue and go together, as
//! the claim batcher's claims do ([`super::queue`]): one `SELECT` over
//! `unnest` of the keys, the answer of every key that replays.
//!
//! A batch of one read goes as the single-key statement instead: its
//! parameters are scalars, so PostgreSQL keeps one generic plan for it,
//! where the `unnest` statement is planned anew on every execution until
//! its batches are large (planned, a one-key batch cost 0.3 ms of the
//! database's time against 0.05 ms to run).
//!
//! The statement says nothing about a key it returns no row for (a key
//! not completed, with another payload, or its answer gone): the claim
//! decides that request, as it does after a single read. A refused
//! statement leaves each of its reads to be made on its own.

use std::collections::HashMap;
use std::sync::Arc;

use sqlx::postgres::PgRow;
use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};

use super::queue::{drive, BatchStats, Counters, Now};
use crate::db::exec::{FromRow, Row};
use crate::db::sql::proxy::ProxyStatements;
use crate::db::tx::proxy::Kept;
use crate::ledger::storage::Result;
use crate::ledger::{IdempotencyKey, Namespace, PayloadHash};
use crate::proxy::Answer;

/// A read's answer: `None` when its batch was refused or its row did not
/// decode (read it alone, which reports why).
pub(crate) type Replayed = Option<Option<Answer>>;

/// What a read asks: a key, and the payload hash its replay must match.
type Asked = (String, String, String);

/// One read waiting for its batch.
struct Waiting {
    asked: Asked,
    reply: oneshot::Sender<Replayed>,
}

/// The queue replay reads wait in, and the task that sends them.
#[derive(Debug)]
pub(crate) struct ReplayBatcher {
    queue: mpsc::UnboundedSender<Waiting>,
    counters: Arc<Counters>,
}

/// Where a batch goes: the pool and the statements
/// (`ProxyStatements::replay_batch`, and `replay` for a batch of one).
struct Target {
    pool: PgPool,
    batch: String,
    single: String,
}

impl ReplayBatcher {
    /// Starts the batcher's task on the current runtime.
    pub(crate) fn start(pool: PgPool, st: &ProxyStatements, now: Now) -> Self {
        let (queue, rx) = mpsc::unbounded_channel();
        let counters = Arc::new(Counters::default());
        let counted = counters.clone();
        let target = Arc::new(Target {
            pool,
            batch: st.replay_batch.clone().unwrap_or_default(),
            single: st.replay.clone(),
        });
        tokio::spawn(async move {
            drive(rx, &counted, |reads| {
                let (target, now) = (target.clone(), now());
                async move { send(&target, now, reads).await }
            })
            .await;
        });
        Self { queue, counters }
    }

    /// Statements and reads so far.
    pub(crate) fn stats(&self) -> BatchStats {
        self.counters.stats()
    }

    /// The kept answer of `key`, completed with `payload_hash`, read in
    /// the next batch.
    pub(crate) async fn replay(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
        payload_hash: &PayloadHash,
    ) -> Replayed {
        let (reply, answer) = oneshot::channel();
        let asked = (
            namespace.to_string(),
            key.to_string(),
            payload_hash.as_str().to_owned(),
        );
        self.queue.send(Waiting { asked, reply }).ok()?;
        // A batcher gone (the store closing) leaves the read to the pool.
        answer.await.ok().flatten()
    }
}

/// Sends one batch and answers each of its reads.
async fn send(target: &Target, now: Option<i64>, reads: Vec<Waiting>) {
    // Each distinct read goes in once; its repeats share its row.
    let mut distinct: HashMap<&Asked, usize> = HashMap::new();
    let mut asked: Vec<&Asked> = Vec::new();
    let positions: Vec<usize> = reads
        .iter()
        .map(|w| {
            *distinct.entry(&w.asked).or_insert_with(|| {
                asked.push(&w.asked);
                asked.len()
            })
        })
        .collect();
    let answers: Vec<Replayed> = match execute(target, now, &asked).await {
        Ok(rows) => {
            let by_position: HashMap<usize, Option<Answer>> = rows.into_iter().collect();
            positions
                .iter()
                .map(|p| match by_position.get(p) {
                    None => Some(None),
                    Some(row) => row.clone().map(Some),
                })
                .collect()
        }
        Err(err) => {
            tracing::warn!(error = %err, reads = reads.len(), "a replay batch was refused; its reads go on one by one");
            reads.iter().map(|_| None).collect()
        }
    };
    for (w, answer) in reads.into_iter().zip(answers) {
        let _ = w.reply.send(answer);
    }
}

/// The statement for the distinct reads (for one read, the single-key
/// statement): each returned row by position (`None`: it did not decode).
async fn execute(
    target: &Target,
    now: Option<i64>,
    asked: &[&Asked],
) -> Result<Vec<(usize, Option<Answer>)>> {
    if let [(namespace, key, hash)] = asked {
        let row: Option<PgRow> = sqlx::query(&target.single)
            .bind(now)
            .bind(namespace)
            .bind(key)
            .bind(hash)
            .fetch_optional(&target.pool)
            .await?;
        let answer = row.map(|r| Kept::from_row(&r as &dyn Row).ok().map(|Kept(a)| a));
        return Ok(answer.map(|a| (1, a)).into_iter().collect());
    }
    let column =
        |f: fn(&Asked) -> &String| -> Vec<&str> { asked.iter().map(|a| f(a).as_str()).collect() };
    let rows: Vec<PgRow> = sqlx::query(&target.batch)
        .bind(now)
        .bind(column(|a| &a.0))
        .bind(column(|a| &a.1))
        .bind(column(|a| &a.2))
        .fetch_all(&target.pool)
        .await?;
    rows.iter()
        .map(|r| {
            let row = r as &dyn Row;
            let idx: i64 = row.get("v_idx")?;
            let position = usize::try_from(idx).unwrap_or(usize::MAX);
            let answer = Kept::from_row(row).ok().map(|Kept(answer)| answer);
            Ok((position, answer))
        })
        .collect()
}
