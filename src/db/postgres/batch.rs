//! PostgreSQL's batchers: concurrent new-key claims (and, separately,
//! webhook intakes) share one statement and one commit.
//!
//! A claim of a new key is one autocommitted statement ([`super::claim`]),
//! an intake one more ([`super::intake`]); under load each paid its own
//! round trip, its own pass through the server's parser and executor, and
//! its own commit. Here the requests that arrive while a batch is in
//! flight wait in a queue; when a batch slot frees, everything queued goes
//! as the next batch: one `INSERT … SELECT FROM unnest(…) ON CONFLICT DO
//! NOTHING RETURNING` with every row each request writes and the
//! duplicates' answers, as the single statement did for one.
//!
//! Duplicates of one key inside a batch are resolved before the
//! statement: the first request of a key goes in, and the others are
//! answered from the row it returns, exactly as a request for that key in
//! a later batch would be (the winner's run, `in flight`, or a conflict
//! for another payload). Rows go in key order, so two batches (of two
//! nodes) never wait on each other's keys in opposite orders.
//!
//! Anything the statement does not answer (a run to reclaim, a taken
//! business key, a key another transaction committed meanwhile) goes on to
//! the general transactional path, as before. So does every request of a
//! batch whose statement the database refused: each is then tried on its
//! own, and one bad request fails alone.

use std::collections::HashMap;
use std::sync::Arc;

use sqlx::postgres::PgRow;
use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};

use super::claim::{self, Prepared};
use super::complete::WonHeads;
use super::intake::{self, PreparedIntake};
use super::queue::{drive, BatchStats, Counters, Now};
use crate::audit::Redactor;
use crate::db::exec::{FromRow, Row};
use crate::db::rows::RunRow;
use crate::ingress::RawEvent;
use crate::ledger::storage::Result;
use crate::ledger::{ClaimOutcome, ClaimRequest, Run};
use crate::outbox::NewEffect;

/// What a batcher writes for each request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A claim: the run and its audit entry.
    Claims,
    /// A webhook intake: the run approved, two audit entries, the forward
    /// effect, the raw event.
    Intakes,
}

/// A request's first try, as the batch answers it: `None` leaves it to
/// the general path.
type Answer = Result<Option<ClaimOutcome>>;

/// One request waiting for its batch.
struct Waiting {
    req: ClaimRequest,
    prepared: Prepared,
    intake: Option<Box<PreparedIntake>>,
    reply: oneshot::Sender<Answer>,
}

impl Waiting {
    fn id(&self) -> (&str, &str) {
        (self.req.namespace.as_str(), self.req.key.as_str())
    }
}

/// The queue requests of one kind wait in, and the task that sends them.
#[derive(Debug)]
pub(crate) struct Batcher {
    queue: mpsc::UnboundedSender<Waiting>,
    counters: Arc<Counters>,
}

/// Where a batch's won claims leave their chains (claims only: an intake's
/// run is approved, no owner completes it).
type Heads = Option<Arc<WonHeads>>;

impl Batcher {
    /// Starts a batcher's task on the current runtime.
    pub(crate) fn start(pool: PgPool, now: Now, kind: Kind, heads: Heads) -> Self {
        let (queue, rx) = mpsc::unbounded_channel();
        let counters = Arc::new(Counters::default());
        tokio::spawn(run(pool, now, kind, heads, rx, counters.clone()));
        Self { queue, counters }
    }

    /// Statements and requests so far.
    pub(crate) fn stats(&self) -> BatchStats {
        self.counters.stats()
    }

    /// Claims `req` in the next batch if its key is new, or answers it
    /// from the run that holds the key when no claim could win it now;
    /// `None` (nothing written for it) leaves the rest to the general claim.
    ///
    /// # Errors
    /// Never: a refused batch leaves its claims to the general claim.
    pub(crate) async fn claim(&self, req: &ClaimRequest, clock_now: i64, r: &Redactor) -> Answer {
        let prepared = Prepared::new(req, clock_now, r);
        self.enqueue(req, prepared, None).await
    }

    /// Accepts a verified delivery in the next batch if its event id is
    /// new (run approved, audit entries, forward effect, raw event), or
    /// answers it as [`Batcher::claim`] does.
    ///
    /// # Errors
    /// A header map or spec does not serialize.
    pub(crate) async fn accept(
        &self,
        req: &ClaimRequest,
        event: &RawEvent,
        forward: &NewEffect,
        clock_now: i64,
        r: &Redactor,
    ) -> Answer {
        let prepared = Prepared::new(req, clock_now, r);
        let intake = PreparedIntake::new(req, &prepared, event, forward, r)?;
        self.enqueue(req, prepared, Some(Box::new(intake))).await
    }

    async fn enqueue(
        &self,
        req: &ClaimRequest,
        prepared: Prepared,
        intake: Option<Box<PreparedIntake>>,
    ) -> Answer {
        let (reply, answer) = oneshot::channel();
        let waiting = Waiting {
            req: req.clone(),
            prepared,
            intake,
            reply,
        };
        if self.queue.send(waiting).is_err() {
            return Ok(None);
        }
        // A batcher gone (the store closing) leaves the request to the pool.
        answer.await.unwrap_or(Ok(None))
    }
}

async fn run(
    pool: PgPool,
    now: Now,
    kind: Kind,
    heads: Heads,
    rx: mpsc::UnboundedReceiver<Waiting>,
    counters: Arc<Counters>,
) {
    drive(rx, &counters, |requests| {
        let (pool, now, heads) = (pool.clone(), now(), heads.clone());
        async move { send(&pool, now, kind, heads.as_deref(), requests).await }
    })
    .await;
}

/// A row the statement returned: a run it wrote, or the settled run that
/// holds a key.
struct Returned {
    run: Run,
    fresh: bool,
}

impl FromRow for Returned {
    fn from_row(row: &dyn Row) -> Result<Self> {
        Ok(Self {
            run: RunRow::from_row(row)?.to_run()?,
            fresh: row.get("fresh")?,
        })
    }
}

/// Sends one batch and answers each of its requests.
async fn send(
    pool: &PgPool,
    now: Option<i64>,
    kind: Kind,
    heads: Option<&WonHeads>,
    requests: Vec<Waiting>,
) {
    // The first request of each key goes in; the others follow it.
    let mut leaders: HashMap<(&str, &str), usize> = HashMap::new();
    let mut order = Vec::new();
    for (i, w) in requests.iter().enumerate() {
        leaders.entry(w.id()).or_insert_with(|| {
            order.push(i);
            i
        });
    }
    order.sort_by_key(|&i| requests[i].id());
    let leading: Vec<&Waiting> = order.iter().map(|&i| &requests[i]).collect();
    if kind == Kind::Intakes {
        // Before the accept is written: a crash here stores nothing.
        for _ in &leading {
            crate::chaos::point("after_claim");
        }
    }
    let answers: Vec<Answer> = match execute(pool, now, kind, &leading).await {
        Ok(rows) => {
            let by_key: HashMap<(&str, &str), &Returned> = rows
                .iter()
                .map(|r| ((r.run.namespace.as_str(), r.run.key.as_str()), r))
                .collect();
            requests
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    let row = by_key.get(&w.id()).copied();
                    answer(w, row, leaders[&w.id()] == i, heads)
                })
                .collect()
        }
        Err(err) => {
            // Each request is tried on its own by the general path: one
            // bad request fails alone, and an unavailable database refuses
            // each with its own answer.
            tracing::warn!(error = %err, requests = requests.len(), "a batch was refused; its requests go on one by one");
            requests.iter().map(|_| Ok(None)).collect()
        }
    };
    for (w, answer) in requests.into_iter().zip(answers) {
        let _ = w.reply.send(answer);
    }
}

/// One request's answer from its key's returned row.
fn answer(w: &Waiting, row: Option<&Returned>, leader: bool, heads: Option<&WonHeads>) -> Answer {
    let Some(row) = row else {
        return Ok(None);
    };
    let run = row.run.clone();
    if row.fresh && leader {
        if let Some(heads) = heads {
            let (ns, key) = w.id();
            heads.remember(w.prepared.lease().owner, ns, key, &w.prepared.hash);
        }
        return Ok(Some(ClaimOutcome::Claimed {
            run,
            lease: w.prepared.lease(),
            reclaimed_from: None,
        }));
    }
    // A duplicate inside the batch sees the winner's run, as it would
    // from the next batch.
    Ok(Some(ClaimOutcome::for_existing(run, &w.req.payload_hash)))
}

/// The statement for the leading requests, and the rows it returned.
async fn execute(
    pool: &PgPool,
    now: Option<i64>,
    kind: Kind,
    leading: &[&Waiting],
) -> Result<Vec<Returned>> {
    static CLAIMS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    static INTAKES: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let texts = |f: &dyn Fn(&Waiting) -> Option<String>| -> Vec<Option<String>> {
        leading.iter().map(|w| f(w)).collect()
    };
    let text =
        |f: &dyn Fn(&Waiting) -> String| -> Vec<String> { leading.iter().map(|w| f(w)).collect() };
    let ints = |f: &dyn Fn(&Waiting) -> Option<i64>| -> Vec<Option<i64>> {
        leading.iter().map(|w| f(w)).collect()
    };
    let sql = match kind {
        Kind::Claims => CLAIMS.get_or_init(claim::statement_for_batch),
        Kind::Intakes => INTAKES.get_or_init(intake::statement_for_batch),
    };
    let mut query = sqlx::query(sql)
        .bind(now)
        .bind(text(&|w| w.req.namespace.to_string()))
        .bind(text(&|w| w.req.key.to_string()))
        .bind(texts(&|w| {
            w.req.business_key.as_ref().map(|b| b.as_str().to_owned())
        }))
        .bind(text(&|w| w.req.payload_hash.as_str().to_owned()));
    if kind == Kind::Claims {
        query = query
            .bind(text(&|w| w.prepared.owner_hex.clone()))
            .bind(ints(&|w| Some(w.req.lease_ms)));
    }
    let meta = |f: fn(&crate::ledger::RunMetadata) -> &Option<String>| {
        texts(&|w: &Waiting| f(&w.req.metadata).clone())
    };
    query = query
        .bind(meta(|m| &m.operation))
        .bind(text(&|w| w.prepared.correlation_id.clone()))
        .bind(meta(|m| &m.workflow_version))
        .bind(meta(|m| &m.source_url))
        .bind(meta(|m| &m.execution_ref))
        .bind(meta(|m| &m.requested_by))
        .bind(text(&|w| w.req.claimed_by.clone()))
        .bind(text(&|w| w.prepared.hash.clone()))
        .bind(text(&|w| w.prepared.detail.clone()));
    if kind == Kind::Intakes {
        query = bind_intakes(query, leading);
    }
    query = query.bind(ints(&|w| Some(w.prepared.created_at)));
    if kind == Kind::Intakes {
        query = bind_intake_rows(query, leading);
    }
    let rows: Vec<PgRow> = query.fetch_all(pool).await?;
    rows.iter()
        .map(|r| Returned::from_row(r as &dyn Row))
        .collect()
}

type Query<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// An intake's approval entry: its hash and detail (before the entries' time).
fn bind_intakes<'q>(query: Query<'q>, leading: &[&Waiting]) -> Query<'q> {
    fn of(w: &Waiting) -> &PreparedIntake {
        w.intake.as_deref().expect("an intake batch holds intakes")
    }
    let h2: Vec<String> = leading.iter().map(|w| of(w).head.clone()).collect();
    let d2: Vec<String> = leading.iter().map(|w| of(w).detail.clone()).collect();
    query.bind(h2).bind(d2)
}

/// An intake's forward effect and raw event.
fn bind_intake_rows<'q>(query: Query<'q>, leading: &[&Waiting]) -> Query<'q> {
    fn of(w: &Waiting) -> &PreparedIntake {
        w.intake.as_deref().expect("an intake batch holds intakes")
    }
    let texts = |f: &dyn Fn(&PreparedIntake) -> Option<String>| -> Vec<Option<String>> {
        leading.iter().map(|w| f(of(w))).collect()
    };
    let bytes = |f: &dyn Fn(&PreparedIntake) -> Option<Vec<u8>>| -> Vec<Option<Vec<u8>>> {
        leading.iter().map(|w| f(of(w))).collect()
    };
    let ints = |f: &dyn Fn(&PreparedIntake) -> Option<i64>| -> Vec<Option<i64>> {
        leading.iter().map(|w| f(of(w))).collect()
    };
    query
        .bind(texts(&|i| Some(i.effect_id.clone())))
        .bind(texts(&|i| Some(i.forward.operation.clone())))
        .bind(texts(&|i| Some(i.forward.effect_type.clone())))
        .bind(texts(&|i| Some(i.forward.target.clone())))
        .bind(texts(&|i| Some(i.forward.method.clone())))
        .bind(texts(&|i| Some(i.forward.url.clone())))
        .bind(texts(&|i| Some(i.effect_headers.clone())))
        .bind(bytes(&|i| i.forward.body.clone()))
        .bind(texts(&|i| Some(i.forward.idempotency_key.clone())))
        .bind(texts(&|i| Some(i.effect_spec.clone())))
        .bind(ints(&|i| i.forward.not_before))
        .bind(texts(&|i| Some(i.forward.role.as_str().to_owned())))
        .bind(texts(&|i| Some(i.event.id.clone())))
        .bind(texts(&|i| Some(i.event.source.clone())))
        .bind(texts(&|i| Some(i.event.event_id.clone())))
        .bind(texts(&|i| i.event.event_type.clone()))
        .bind(texts(&|i| Some(i.event.status.as_str().to_owned())))
        .bind(texts(&|i| Some(i.event.payload_hash.as_str().to_owned())))
        .bind(texts(&|i| i.event.content_type.clone()))
        .bind(texts(&|i| Some(i.event_headers.clone())))
        .bind(bytes(&|i| Some(i.event_body.clone())))
        .bind(ints(&|i| Some(i.event.received_at)))
}
