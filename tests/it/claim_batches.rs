//! Concurrent claims batched into shared commits (SQLite's group commit,
//! PostgreSQL's claim batcher), on a real store: duplicates inside one
//! batch get the answers duplicates across batches get, and one bad claim
//! fails alone. PostgreSQL's batched proxy replays answer as single reads.

use std::sync::Arc;

use std::collections::BTreeMap;

use oncegate::audit::port::AuditStore;
use oncegate::audit::verify_chain;
use oncegate::clock::{Clock, SystemClock};
use oncegate::db::postgres::PgStore;
use oncegate::db::sqlite::SqliteStore;
use oncegate::db::{Admin, StoreError, StoreOptions};
use oncegate::ingress::port::IngressStore;
use oncegate::ingress::{RawEvent, RawStatus};
use oncegate::ledger::port::LedgerStore;
use oncegate::ledger::{
    ClaimOutcome, ClaimRequest, IdempotencyKey, Namespace, OwnerCall, PayloadHash, RunMetadata,
    RunState,
};
use oncegate::outbox::{EffectRole, EffectSpec, NewEffect};
use oncegate::proxy::{Answer, ProxyStore};
use oncegate::validate::port::OutputStore;

use crate::harness::{on_both_backends, Backend, TestDb};

/// A store of `backend`'s concrete type, to read its batching counters.
pub(super) enum Store {
    Sqlite(Arc<SqliteStore>),
    Postgres(Arc<PgStore>),
}

impl Store {
    pub(super) async fn open(db: &TestDb) -> Self {
        let options = StoreOptions {
            max_connections: 3,
            busy_timeout_ms: 5_000,
            clock: Arc::new(SystemClock),
            use_db_clock: true,
            redaction: Default::default(),
            ledger: Default::default(),
        };
        let store = match db.backend {
            Backend::Sqlite => Self::Sqlite(Arc::new(
                SqliteStore::connect(&db.url, options).await.unwrap(),
            )),
            Backend::Postgres => {
                Self::Postgres(Arc::new(PgStore::connect(&db.url, options).await.unwrap()))
            }
        };
        match &store {
            Self::Sqlite(s) => s.migrate().await.unwrap(),
            Self::Postgres(s) => s.migrate().await.unwrap(),
        }
        store
    }

    pub(super) fn ledger(&self) -> Arc<dyn LedgerStore> {
        match self {
            Self::Sqlite(s) => s.clone(),
            Self::Postgres(s) => s.clone(),
        }
    }

    fn ingress(&self) -> Arc<dyn IngressStore> {
        match self {
            Self::Sqlite(s) => s.clone(),
            Self::Postgres(s) => s.clone(),
        }
    }

    pub(super) fn proxy(&self) -> Arc<dyn ProxyStore> {
        match self {
            Self::Sqlite(s) => s.clone(),
            Self::Postgres(s) => s.clone(),
        }
    }

    pub(super) fn outputs(&self) -> Arc<dyn OutputStore> {
        match self {
            Self::Sqlite(s) => s.clone(),
            Self::Postgres(s) => s.clone(),
        }
    }

    pub(super) fn audit(&self) -> Arc<dyn AuditStore> {
        match self {
            Self::Sqlite(s) => s.clone(),
            Self::Postgres(s) => s.clone(),
        }
    }

    /// (commits or statements, intakes in them) so far.
    fn intake_batching(&self) -> (u64, u64) {
        match self {
            Self::Sqlite(s) => {
                let stats = s.writer().stats();
                (stats.batches, stats.jobs)
            }
            Self::Postgres(s) => {
                let stats = s.intake_batches();
                (stats.batches, stats.requests)
            }
        }
    }

    /// (commits or statements, claims in them) so far.
    fn batching(&self) -> (u64, u64) {
        match self {
            Self::Sqlite(s) => {
                let stats = s.writer().stats();
                (stats.batches, stats.jobs)
            }
            Self::Postgres(s) => {
                let stats = s.claim_batches();
                (stats.batches, stats.requests)
            }
        }
    }
}

pub(super) fn request(key: &str) -> ClaimRequest {
    ClaimRequest {
        namespace: Namespace::parse("stripe").unwrap(),
        key: IdempotencyKey::parse(key).unwrap(),
        business_key: None,
        payload_hash: PayloadHash::of_bytes(b"the same body"),
        lease_ms: 30_000,
        metadata: RunMetadata::default(),
        claimed_by: "n8n".into(),
    }
}

/// Claims every request at once; the outcomes in request order.
async fn all_at_once(
    store: &Store,
    requests: Vec<ClaimRequest>,
) -> Vec<Result<ClaimOutcome, StoreError>> {
    let ledger = store.ledger();
    let gate = Arc::new(tokio::sync::Barrier::new(requests.len()));
    let tasks: Vec<_> = requests
        .into_iter()
        .map(|req| {
            let (ledger, gate) = (ledger.clone(), gate.clone());
            tokio::spawn(async move {
                gate.wait().await;
                ledger.claim(&req).await
            })
        })
        .collect();
    futures_util::future::join_all(tasks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

on_both_backends!(
    one_key_claimed_100_times_at_once_has_one_winner,
    ten_keys_claimed_ten_times_each_have_ten_winners,
    one_event_delivered_100_times_at_once_is_accepted_once,
    proxy_replays_read_at_once_answer_as_each_alone,
);

async fn one_key_claimed_100_times_at_once_has_one_winner(backend: Backend) {
    let db = TestDb::new(backend).await;
    let store = Store::open(&db).await;
    let outcomes = all_at_once(&store, (0..100).map(|_| request("evt_one")).collect()).await;
    let mut winner = None;
    let mut losers = Vec::new();
    for outcome in outcomes {
        match outcome.unwrap() {
            ClaimOutcome::Claimed { run, lease, .. } => {
                assert!(winner.is_none(), "a second winner");
                winner = Some((run, lease));
            }
            ClaimOutcome::InFlight(run) => losers.push(run),
            other => panic!("a loser answered {other:?}"),
        }
    }
    let (won, lease) = winner.expect("exactly one winner");
    assert_eq!(losers.len(), 99);
    for run in &losers {
        // The winner's state, version and lease owner, as committed.
        assert_eq!(run.state, RunState::Processing);
        assert_eq!(run.version, won.version);
        assert_eq!(run.lease.map(|l| l.owner), Some(lease.owner));
        assert_eq!(run.lease_expires_at, won.lease_expires_at);
    }
    let (batches, claims) = store.batching();
    assert!(
        claims > batches,
        "batching was active: {claims} claims in {batches} batches"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM audit_events WHERE run_key = 'evt_one'")
            .await,
        1,
        "one claim, one audit entry"
    );
}

async fn ten_keys_claimed_ten_times_each_have_ten_winners(backend: Backend) {
    let db = TestDb::new(backend).await;
    let store = Store::open(&db).await;
    let requests = (0..100)
        .map(|i| request(&format!("evt_{}", i % 10)))
        .collect();
    let outcomes = all_at_once(&store, requests).await;
    let mut winners = std::collections::HashMap::new();
    let mut in_flight = 0;
    for outcome in outcomes {
        match outcome.unwrap() {
            ClaimOutcome::Claimed { run, .. } => {
                let key = run.key.as_str().to_owned();
                assert!(winners.insert(key, run.version).is_none(), "two winners");
            }
            ClaimOutcome::InFlight(_) => in_flight += 1,
            other => panic!("a loser answered {other:?}"),
        }
    }
    assert_eq!(winners.len(), 10);
    assert_eq!(in_flight, 90);
    assert_eq!(db.count("SELECT COUNT(*) FROM runs").await, 10);
    assert_eq!(db.count("SELECT COUNT(*) FROM audit_events").await, 10);
}

/// PostgreSQL refuses a NUL byte in text; such a claim in a batch of good
/// ones fails alone, and its neighbours are claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_one_bad_claim_fails_alone_in_its_batch() {
    let db = TestDb::new(Backend::Postgres).await;
    let store = Store::open(&db).await;
    let mut requests: Vec<_> = (0..50).map(|i| request(&format!("evt_good_{i}"))).collect();
    let mut bad = request("evt_bad");
    bad.metadata.correlation_id = Some("nul\0byte".into());
    requests.insert(25, bad);
    let outcomes = all_at_once(&store, requests).await;
    for (i, outcome) in outcomes.into_iter().enumerate() {
        if i == 25 {
            let err = outcome.expect_err("a NUL byte is refused");
            assert!(
                !err.is_unavailable(),
                "a bad request, not an outage: {err:?}"
            );
        } else {
            assert!(
                matches!(outcome, Ok(ClaimOutcome::Claimed { .. })),
                "claim {i}: {outcome:?}"
            );
        }
    }
    assert_eq!(db.count("SELECT COUNT(*) FROM runs").await, 50);
    let (batches, claims) = store.batching();
    assert!(claims > batches, "{claims} claims in {batches} batches");
}

/// A verified delivery of `event_id` and its forward, as the ingress
/// hands them to the store.
fn delivery(event_id: &str) -> (ClaimRequest, RawEvent, NewEffect) {
    let body = format!("{{\"id\":\"{event_id}\"}}").into_bytes();
    let req = ClaimRequest {
        payload_hash: PayloadHash::of_bytes(&body),
        ..request(event_id)
    };
    let event = RawEvent {
        id: uuid::Uuid::now_v7().to_string(),
        source: "stripe".into(),
        event_id: event_id.into(),
        event_type: Some("charge.succeeded".into()),
        status: RawStatus::Accepted,
        payload_hash: req.payload_hash.clone(),
        content_type: Some("application/json".into()),
        headers: BTreeMap::from([("stripe-signature".into(), "t=1,v1=00".into())]),
        body: body.clone(),
        received_at: SystemClock.now_ms(),
    };
    let forward = NewEffect {
        operation: "ingress.forward".into(),
        effect_type: "forward".into(),
        target: "n8n".into(),
        method: "POST".into(),
        url: "http://127.0.0.1:9/webhook/stripe".into(),
        headers: BTreeMap::new(),
        body: Some(body),
        idempotency_key: format!("stripe:{event_id}"),
        spec: EffectSpec::default(),
        not_before: None,
        role: EffectRole::Act,
        schema_version: None,
    };
    (req, event, forward)
}

async fn one_event_delivered_100_times_at_once_is_accepted_once(backend: Backend) {
    let db = TestDb::new(backend).await;
    let store = Store::open(&db).await;
    let ingress = store.ingress();
    let gate = Arc::new(tokio::sync::Barrier::new(110));
    // 100 deliveries of one event, 10 of ten others, all at once.
    let tasks: Vec<_> = (0..110)
        .map(|i| {
            let (ingress, gate) = (ingress.clone(), gate.clone());
            let id = if i < 100 {
                "evt_one".to_owned()
            } else {
                format!("evt_other_{i}")
            };
            tokio::spawn(async move {
                let (req, event, forward) = delivery(&id);
                gate.wait().await;
                (id, ingress.accept_event(&req, &event, &forward, None).await)
            })
        })
        .collect();
    let mut accepted = Vec::new();
    let mut in_flight = 0;
    for task in tasks {
        let (id, outcome) = task.await.unwrap();
        match outcome.unwrap() {
            ClaimOutcome::Claimed { run, .. } => {
                assert_eq!(run.state, RunState::Approved);
                accepted.push(id);
            }
            ClaimOutcome::InFlight(run) => {
                // The winner's run: approved, its forward queued.
                assert_eq!(run.state, RunState::Approved);
                assert_eq!(run.version.get(), 2);
                in_flight += 1;
            }
            other => panic!("{id}: {other:?}"),
        }
    }
    assert_eq!(accepted.iter().filter(|id| *id == "evt_one").count(), 1);
    assert_eq!(accepted.len(), 11);
    assert_eq!(in_flight, 99);
    for (table, want) in [
        ("runs", 11),
        ("effects", 11),
        ("raw_events", 11),
        ("audit_events", 22),
    ] {
        let n = db.count(&format!("SELECT COUNT(*) FROM {table}")).await;
        assert_eq!(n, want, "{table}");
    }
    let trail = store
        .audit()
        .audit_trail(
            &Namespace::parse("stripe").unwrap(),
            &IdempotencyKey::parse("evt_one").unwrap(),
        )
        .await
        .unwrap();
    let kinds: Vec<_> = trail.iter().map(|r| r.entry.kind.as_str()).collect();
    assert_eq!(kinds, ["claim", "approve"]);
    verify_chain(&trail).unwrap();
    let (batches, intakes) = store.intake_batching();
    assert!(intakes > batches, "{intakes} intakes in {batches} batches");
}

/// Replays of kept proxy answers read all at once (on PostgreSQL, in
/// shared statements) answer exactly as one read each: the kept answer
/// for a completed key with its payload, nothing for another
/// payload, an unknown key, a key in flight or an answer past its window.
async fn proxy_replays_read_at_once_answer_as_each_alone(backend: Backend) {
    let db = TestDb::new(backend).await;
    let store = Store::open(&db).await;
    let (ledger, proxy) = (store.ledger(), store.proxy());
    let answer_of = |i: usize| Answer {
        status: 200 + u16::try_from(i % 3).unwrap(),
        headers: vec![("content-type".into(), "application/json".into())],
        body: format!("{{\"lead\":{i}}}").into_bytes(),
    };
    // evt_0..evt_19 completed with their answers (evt_19's window already
    // over), evt_in_flight claimed and never completed.
    for i in 0..20 {
        let req = request(&format!("evt_{i}"));
        let ClaimOutcome::Claimed { run, lease, .. } = ledger.claim(&req).await.unwrap() else {
            panic!("evt_{i} is new");
        };
        let call = OwnerCall {
            namespace: run.namespace,
            key: run.key,
            lease,
            actor: "n8n".into(),
        };
        let window = if i == 19 { 0 } else { 60_000 };
        proxy
            .complete_with_answer(&call, &answer_of(i), window)
            .await
            .unwrap();
    }
    ledger.claim(&request("evt_in_flight")).await.unwrap();

    let other = PayloadHash::of_bytes(b"another body");
    let mut reads: Vec<(String, PayloadHash)> = Vec::new();
    for i in 0..20 {
        // Each kept key three times, so repeats share a batch.
        for _ in 0..3 {
            reads.push((format!("evt_{i}"), request("x").payload_hash));
        }
        reads.push((format!("evt_{i}"), other.clone()));
    }
    reads.push(("evt_in_flight".into(), request("x").payload_hash));
    reads.push(("evt_never".into(), request("x").payload_hash));

    let gate = Arc::new(tokio::sync::Barrier::new(reads.len()));
    let tasks: Vec<_> = reads
        .iter()
        .cloned()
        .map(|(key, hash)| {
            let (proxy, gate) = (proxy.clone(), gate.clone());
            tokio::spawn(async move {
                gate.wait().await;
                let ns = Namespace::parse("stripe").unwrap();
                let key = IdempotencyKey::parse(&key).unwrap();
                proxy.replay(&ns, &key, &hash).await.unwrap()
            })
        })
        .collect();
    let found = futures_util::future::join_all(tasks).await;
    for ((key, hash), found) in reads.iter().zip(found) {
        let found = found.unwrap();
        let i: Option<usize> = key.strip_prefix("evt_").and_then(|n| n.parse().ok());
        match i {
            Some(i) if i < 19 && *hash != other => {
                let answer = found.unwrap_or_else(|| panic!("{key} replays"));
                assert_eq!(answer, answer_of(i), "{key}'s answer, byte for byte");
            }
            _ => assert!(found.is_none(), "{key} with {hash:?} does not replay"),
        }
    }
    if let Store::Postgres(s) = &store {
        let stats = s.replay_batches();
        assert_eq!(stats.requests, reads.len() as u64);
        assert!(
            stats.batches < stats.requests,
            "the reads shared statements: {stats:?}"
        );
    }
}
