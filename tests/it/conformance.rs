//! The store conformance suite: every test runs against SQLite and
//! PostgreSQL and expects the same behaviour; the ledger's tests run
//! against the Redis tier too (a fresh key prefix on the shared Redis per
//! test, deleted after it).
//!
//! Time: the Redis tier compares leases with the time its scripts are
//! given, the service's clock, so the injected clock drives leases,
//! renewals and reclaims there exactly as on SQLite. Only the key's TTL
//! (the dedup window) runs on Redis's own clock: advancing the injected
//! clock never expires a key, so the tests that need an expired key
//! expire it with `PEXPIRE` (`redis_tier.rs`).

use std::sync::Arc;

use oncegate::audit::verify_chain;
use oncegate::clock::{Clock, ManualClock, SystemClock};
use oncegate::db::{SharedStore, StoreError};
use oncegate::ledger::{
    BusinessKey, ClaimOutcome, ClaimRequest, IdempotencyKey, Lease, Namespace, OwnerCall,
    OwnerMove, PayloadHash, RunMetadata, RunState,
};
use oncegate::tokens::port::StoredToken;
use serde_json::json;

use crate::harness::{on_both_backends, Backend, TestDb};
use crate::redis_support::Prefix;
use oncegate::ledger::port::LedgerStore;

const START: i64 = 1_800_000_000_000;
const LEASE: i64 = 30_000;
const MAX_LIFE: i64 = 90_000;

struct Fixture {
    db: TestDb,
    store: SharedStore,
    clock: Arc<ManualClock>,
}

async fn fixture(backend: Backend) -> Fixture {
    let db = TestDb::new(backend).await;
    let clock = Arc::new(ManualClock::new(START));
    let store = db.manual_store(clock.clone()).await;
    Fixture { db, store, clock }
}

/// Where a ledger test's runs live.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Tier {
    Sql(Backend),
    Redis,
}

/// A ledger under test: the SQL store, or the Redis tier's.
struct Ledger {
    ledger: Arc<dyn LedgerStore>,
    clock: Arc<ManualClock>,
    sql: Option<Fixture>,
    redis: Option<(Arc<oncegate::db::redis::RedisLedger>, Prefix)>,
}

async fn ledger(tier: Tier) -> Ledger {
    match tier {
        Tier::Sql(backend) => {
            let f = fixture(backend).await;
            Ledger {
                ledger: f.store.clone(),
                clock: f.clock.clone(),
                sql: Some(f),
                redis: None,
            }
        }
        Tier::Redis => {
            let clock = Arc::new(ManualClock::new(START));
            let prefix = Prefix::new(&crate::redis_support::shared_url());
            let config = oncegate::ledger::RedisConfig {
                url: Some(prefix.url.clone()),
                key_prefix: prefix.prefix.clone(),
                ..Default::default()
            };
            let store = Arc::new(
                oncegate::db::redis::RedisLedger::new(
                    &config,
                    clock.clone(),
                    Arc::new(oncegate::ledger::LedgerConfig::default()),
                    Arc::new(oncegate::audit::Redactor::default()),
                )
                .unwrap(),
            );
            Ledger {
                ledger: store.clone(),
                clock,
                sql: None,
                redis: Some((store, prefix)),
            }
        }
    }
}

impl Ledger {
    /// Puts the run of `key` in `state` with a lease that expired long ago
    /// (no API moves a run into some states on every tier).
    async fn force_state(&self, key: &str, state: &str) {
        if let Some(f) = &self.sql {
            f.db.exec(&format!(
                "UPDATE runs SET state = '{state}', lease_expires_at = 0 WHERE run_key = '{key}'"
            ))
            .await;
        }
        if let Some((store, prefix)) = &self.redis {
            let ns = Namespace::parse("stripe").unwrap();
            let redis_key = store.run_key(&ns, &IdempotencyKey::parse(key).unwrap());
            let mut conn = redis::Client::open(prefix.url.as_str())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let text: String = redis::cmd("GET")
                .arg(&redis_key)
                .query_async(&mut conn)
                .await
                .unwrap();
            let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
            value["s"] = json!(state);
            value["e"] = json!(0);
            let _: () = redis::cmd("SET")
                .arg(&redis_key)
                .arg(value.to_string())
                .arg("KEEPTTL")
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    }
}

/// Expands one async ledger test into a SQLite, a PostgreSQL and a Redis
/// tier test.
macro_rules! on_every_tier {
    ($($name:ident),+ $(,)?) => {
        mod tiers {
            mod sqlite {
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $name() {
                        super::super::$name(super::super::Tier::Sql(
                            $crate::harness::Backend::Sqlite,
                        ))
                        .await
                    }
                )+
            }
            mod postgres {
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $name() {
                        super::super::$name(super::super::Tier::Sql(
                            $crate::harness::Backend::Postgres,
                        ))
                        .await
                    }
                )+
            }
            mod redis {
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $name() {
                        super::super::$name(super::super::Tier::Redis).await
                    }
                )+
            }
        }
    };
}

fn request(key: &str, payload: &str) -> ClaimRequest {
    ClaimRequest {
        namespace: Namespace::parse("stripe").unwrap(),
        key: IdempotencyKey::parse(key).unwrap(),
        business_key: None,
        payload_hash: PayloadHash::of_bytes(payload.as_bytes()),
        lease_ms: LEASE,
        metadata: RunMetadata {
            execution_ref: Some("exec-1".into()),
            ..RunMetadata::default()
        },
        claimed_by: "n8n".into(),
    }
}

fn call(key: &str, lease: Lease) -> OwnerCall {
    OwnerCall {
        namespace: Namespace::parse("stripe").unwrap(),
        key: IdempotencyKey::parse(key).unwrap(),
        lease,
        actor: "n8n".into(),
    }
}

fn claimed(outcome: ClaimOutcome) -> (oncegate::ledger::Run, Lease) {
    match outcome {
        ClaimOutcome::Claimed { run, lease, .. } => (run, lease),
        other => panic!("expected a claim, got {other:?}"),
    }
}

fn assert_lost(result: Result<oncegate::ledger::Moved, StoreError>) -> String {
    match result {
        Err(StoreError::LostOwnership { why, .. }) => why,
        other => panic!("expected LostOwnership, got {other:?}"),
    }
}

on_every_tier!(
    claim_complete_then_duplicate_gets_result,
    live_lease_is_in_flight,
    stale_owner_is_refused_after_reclaim,
    failed_retryable_reclaim_needs_same_payload,
    terminal_and_waiting_states_are_never_reclaimed,
    illegal_owner_moves_are_refused,
    renewal_is_capped_by_max_lease_life,
    payload_conflict_changes_nothing,
);

// The SQL tier only: business keys, the audit chain and tokens live in
// the database (the Redis tier refuses business keys; docs/redis.md).
on_both_backends!(
    business_key_clash_answers_duplicate_of,
    audit_chain_covers_every_move,
    tokens_round_trip,
);

async fn claim_complete_then_duplicate_gets_result(tier: Tier) {
    let f = ledger(tier).await;
    let (run, lease) = claimed(f.ledger.claim(&request("evt_1", "a")).await.unwrap());
    assert_eq!(run.state, RunState::Processing);
    assert_eq!(run.version.get(), 1);
    assert_eq!(run.lease_expires_at, Some(START + LEASE));
    assert_eq!(run.metadata.execution_ref.as_deref(), Some("exec-1"));
    assert!(!run.correlation_id().is_empty());

    let moved = f
        .ledger
        .finish(
            &call("evt_1", lease),
            &OwnerMove::Complete {
                result: Some(json!({"sent": 1})),
            },
        )
        .await
        .unwrap();
    assert_eq!(moved.run.state, RunState::Completed);
    assert_eq!(moved.run.version.get(), 2);
    assert!(moved.lease.is_none());

    match f.ledger.claim(&request("evt_1", "a")).await.unwrap() {
        ClaimOutcome::Duplicate(run) => assert_eq!(run.result, Some(json!({"sent": 1}))),
        other => panic!("expected duplicate, got {other:?}"),
    }
}

async fn live_lease_is_in_flight(tier: Tier) {
    let f = ledger(tier).await;
    claimed(f.ledger.claim(&request("evt_1", "a")).await.unwrap());
    f.clock.advance_ms(LEASE - 1);
    match f.ledger.claim(&request("evt_1", "a")).await.unwrap() {
        ClaimOutcome::InFlight(run) => assert_eq!(run.version.get(), 1),
        other => panic!("expected in flight, got {other:?}"),
    }
}

async fn stale_owner_is_refused_after_reclaim(tier: Tier) {
    let f = ledger(tier).await;
    let (_, first) = claimed(f.ledger.claim(&request("evt_1", "a")).await.unwrap());
    f.clock.advance_ms(LEASE);
    let outcome = f.ledger.claim(&request("evt_1", "a")).await.unwrap();
    let ClaimOutcome::Claimed {
        run,
        lease: second,
        reclaimed_from,
    } = outcome
    else {
        panic!("expired lease must be reclaimable, got {outcome:?}");
    };
    assert_eq!(reclaimed_from, Some(RunState::Processing), "a lease steal");
    assert_eq!(run.version.get(), 2, "reclaim bumps the fencing version");
    assert_eq!(run.attempts, 2);
    assert_ne!(first.owner, second.owner);

    let why = assert_lost(
        f.ledger
            .finish(&call("evt_1", first), &OwnerMove::Complete { result: None })
            .await,
    );
    assert!(why.contains("another owner"), "{why}");
    assert_lost(f.ledger.renew(&call("evt_1", first), LEASE, MAX_LIFE).await);
    let run = f
        .ledger
        .get_run(&run.namespace, &run.key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.state, RunState::Processing);
    assert_eq!(run.version.get(), 2, "the stale owner changed nothing");

    f.ledger
        .finish(
            &call("evt_1", second),
            &OwnerMove::Complete { result: None },
        )
        .await
        .unwrap();
}

async fn failed_retryable_reclaim_needs_same_payload(tier: Tier) {
    let f = ledger(tier).await;
    let (_, lease) = claimed(f.ledger.claim(&request("evt_1", "a")).await.unwrap());
    let moved = f
        .ledger
        .finish(
            &call("evt_1", lease),
            &OwnerMove::FailRetryable {
                error: "timeout".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(moved.run.state, RunState::FailedRetryable);
    assert_eq!(moved.run.last_error.as_deref(), Some("timeout"));

    match f.ledger.claim(&request("evt_1", "b")).await.unwrap() {
        ClaimOutcome::Conflict(run) => assert_eq!(run.state, RunState::FailedRetryable),
        other => panic!("a different payload must conflict, got {other:?}"),
    }
    let outcome = f.ledger.claim(&request("evt_1", "a")).await.unwrap();
    let ClaimOutcome::Claimed {
        run,
        reclaimed_from,
        ..
    } = outcome
    else {
        panic!("same payload must reclaim, got {outcome:?}");
    };
    assert_eq!(reclaimed_from, Some(RunState::FailedRetryable));
    assert_eq!(run.version.get(), 3);
}

async fn terminal_and_waiting_states_are_never_reclaimed(tier: Tier) {
    let f = ledger(tier).await;
    for state in [
        "completed",
        "failed_terminal",
        "awaiting_human",
        "approved",
        "dead_lettered",
    ] {
        let key = format!("evt_{state}");
        claimed(f.ledger.claim(&request(&key, "a")).await.unwrap());
        // No API moves a run into some of these states yet: set them
        // directly, with a lease that has long expired.
        f.force_state(&key, state).await;
        f.clock.advance_ms(LEASE * 10);
        let outcome = f.ledger.claim(&request(&key, "a")).await.unwrap();
        assert!(
            !matches!(outcome, ClaimOutcome::Claimed { .. }),
            "{state} must never be reclaimed, got {outcome:?}"
        );
        let expected = match state {
            "completed" => "duplicate",
            "failed_terminal" | "dead_lettered" => "finished",
            _ => "in_flight",
        };
        assert_eq!(outcome.label(), expected, "{state}");
    }
}

async fn illegal_owner_moves_are_refused(tier: Tier) {
    let f = ledger(tier).await;
    let (_, lease) = claimed(f.ledger.claim(&request("evt_1", "a")).await.unwrap());
    let done = f
        .ledger
        .finish(
            &call("evt_1", lease),
            &OwnerMove::FailTerminal {
                error: "invalid".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(done.run.state, RunState::FailedTerminal);
    assert_eq!(done.run.reason.as_deref(), Some("invalid"));
    let next = Lease {
        owner: lease.owner,
        version: done.run.version,
    };
    for mv in [
        OwnerMove::Complete { result: None },
        OwnerMove::FailRetryable { error: "x".into() },
        OwnerMove::FailTerminal { error: "x".into() },
    ] {
        for l in [lease, next] {
            let why = assert_lost(f.ledger.finish(&call("evt_1", l), &mv).await);
            assert!(why.contains("failed_terminal"), "{why}");
        }
    }
    assert_lost(f.ledger.renew(&call("evt_1", next), LEASE, MAX_LIFE).await);
    // A lease for a key that does not exist.
    assert_lost(
        f.ledger
            .renew(&call("evt_none", lease), LEASE, MAX_LIFE)
            .await,
    );
    match f.ledger.claim(&request("evt_1", "a")).await.unwrap() {
        ClaimOutcome::Finished(run) => assert_eq!(run.version, done.run.version),
        other => panic!("expected finished, got {other:?}"),
    }
}

async fn renewal_is_capped_by_max_lease_life(tier: Tier) {
    let f = ledger(tier).await;
    let (_, mut lease) = claimed(f.ledger.claim(&request("evt_1", "a")).await.unwrap());
    for _ in 0..2 {
        f.clock.advance_ms(LEASE - 1_000);
        let moved = f
            .ledger
            .renew(&call("evt_1", lease), LEASE, MAX_LIFE)
            .await
            .unwrap();
        assert!(
            moved.run.version > lease.version,
            "renewal bumps the version"
        );
        lease = moved.lease.unwrap();
    }
    // 58 s in; a 30 s renewal is allowed but capped at 90 s of total life.
    f.clock.advance_ms(LEASE - 1_000);
    let moved = f
        .ledger
        .renew(&call("evt_1", lease), LEASE, MAX_LIFE)
        .await
        .unwrap();
    assert_eq!(moved.run.lease_expires_at, Some(START + MAX_LIFE));
    lease = moved.lease.unwrap();
    f.clock.advance_ms(MAX_LIFE - 3 * (LEASE - 1_000));
    let why = assert_lost(f.ledger.renew(&call("evt_1", lease), LEASE, MAX_LIFE).await);
    assert!(why.contains("expired"), "{why}");
}

async fn payload_conflict_changes_nothing(tier: Tier) {
    let f = ledger(tier).await;
    let (before, _) = claimed(f.ledger.claim(&request("evt_1", "a")).await.unwrap());
    f.clock.advance_ms(LEASE * 2);
    match f.ledger.claim(&request("evt_1", "b")).await.unwrap() {
        ClaimOutcome::Conflict(_) => {}
        other => panic!("expected conflict, got {other:?}"),
    }
    let after = f
        .ledger
        .get_run(&before.namespace, &before.key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after, before);
    // The Redis tier keeps no audit trail (docs/redis.md).
    if let Some(sql) = &f.sql {
        let trail = sql
            .store
            .audit_trail(&before.namespace, &before.key)
            .await
            .unwrap();
        assert_eq!(trail.len(), 1, "a conflict writes nothing");
    }
}

async fn business_key_clash_answers_duplicate_of(backend: Backend) {
    let f = fixture(backend).await;
    let mut first = request("evt_1", "a");
    first.business_key = Some(BusinessKey::parse("refund:order-7:v1").unwrap());
    claimed(f.store.claim(&first).await.unwrap());
    let mut second = request("evt_2", "b");
    second.business_key = first.business_key.clone();
    match f.store.claim(&second).await.unwrap() {
        ClaimOutcome::DuplicateOf(holder) => {
            assert_eq!(holder.key.as_str(), "evt_1");
            assert_eq!(holder.namespace.as_str(), "stripe");
        }
        other => panic!("expected duplicate_of, got {other:?}"),
    }
    assert!(f
        .store
        .get_run(&second.namespace, &second.key)
        .await
        .unwrap()
        .is_none());
    // Business keys are scoped per namespace: another namespace's run with
    // the same business key is its own (issue 25 M2).
    let mut elsewhere = request("evt_3", "c");
    elsewhere.namespace = Namespace::parse("crm").unwrap();
    elsewhere.business_key = first.business_key.clone();
    claimed(f.store.claim(&elsewhere).await.unwrap());
}

async fn audit_chain_covers_every_move(backend: Backend) {
    let f = fixture(backend).await;
    let (run, lease) = claimed(f.store.claim(&request("evt_1", "a")).await.unwrap());
    let renewed = f
        .store
        .renew(&call("evt_1", lease), LEASE, MAX_LIFE)
        .await
        .unwrap();
    f.store
        .finish(
            &call("evt_1", renewed.lease.unwrap()),
            &OwnerMove::Complete { result: None },
        )
        .await
        .unwrap();
    let trail = f.store.audit_trail(&run.namespace, &run.key).await.unwrap();
    let kinds: Vec<&str> = trail.iter().map(|r| r.entry.kind.as_str()).collect();
    assert_eq!(kinds, ["claim", "renew", "complete"]);
    assert_eq!(trail[2].entry.from_state.as_deref(), Some("processing"));
    assert_eq!(trail[2].entry.to_state.as_deref(), Some("completed"));
    assert_eq!(trail[0].entry.actor, "n8n");
    verify_chain(&trail).unwrap();

    f.db.exec("UPDATE audit_events SET actor = 'mallory' WHERE seq = 2")
        .await;
    let tampered = f.store.audit_trail(&run.namespace, &run.key).await.unwrap();
    assert_eq!(verify_chain(&tampered), Err(2));
}

async fn tokens_round_trip(backend: Backend) {
    let f = fixture(backend).await;
    let first_start = StoredToken {
        id: "abababababababab".into(),
        digest: format!("sha256:{}", "ab".repeat(32)),
        subject: "admin".into(),
        scopes: vec!["admin".into()],
        roles: vec!["finance".into()],
        namespaces: None,
        created_by: None,
        created_at: 1_000,
        expires_at: None,
        revoked_at: None,
    };
    f.store.insert_token(&first_start).await.unwrap();
    f.store.insert_token(&first_start).await.unwrap();
    assert_eq!(
        f.store.stored_tokens().await.unwrap(),
        vec![first_start.clone()]
    );

    // A token made at run time: its namespaces, creator and expiry kept,
    // its creation audited; revoked once, audited again.
    let made = StoredToken {
        id: "cdcdcdcdcdcdcdcd".into(),
        digest: format!("sha256:{}", "cd".repeat(32)),
        subject: "n8n-eu".into(),
        scopes: vec!["workflow".into()],
        roles: vec![],
        namespaces: Some(vec![
            oncegate::tokens::NamespacePattern::parse("crm").unwrap(),
            oncegate::tokens::NamespacePattern::parse("billing:*").unwrap(),
        ]),
        created_by: Some("root".into()),
        created_at: 0,
        expires_at: Some(9_000_000_000_000),
        revoked_at: None,
    };
    f.store.create_token(&made, "root").await.unwrap();
    let found = f
        .store
        .token_by_digest(&made.digest)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (&found.namespaces, &found.created_by, found.expires_at),
        (&made.namespaces, &made.created_by, made.expires_at)
    );
    assert!(found.created_at > 0, "the store's clock");
    assert!(f
        .store
        .token_by_digest("sha256:00")
        .await
        .unwrap()
        .is_none());
    let revoked = f
        .store
        .revoke_token(&made.id, "root")
        .await
        .unwrap()
        .unwrap();
    assert!(revoked.revoked_at.is_some());
    assert!(
        f.store
            .revoke_token(&made.id, "root")
            .await
            .unwrap()
            .is_none(),
        "once"
    );
    assert!(f
        .store
        .revoke_token("nope", "root")
        .await
        .unwrap()
        .is_none());
    let kinds =
        f.db.texts(
            "SELECT kind FROM audit_events WHERE run_key = 'tokens:cdcdcdcdcdcdcdcd' ORDER BY seq",
        )
        .await;
    assert_eq!(kinds, ["token_created", "token_revoked"]);

    // Configuring [[tokens]] deletes the first-start token only.
    assert_eq!(f.store.delete_stored_tokens().await.unwrap(), 1);
    let left: Vec<String> = f
        .store
        .stored_tokens()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(left, ["cdcdcdcdcdcdcdcd"]);
}

#[tokio::test]
async fn sqlite_sets_wal_and_full_sync_on_every_pooled_connection() {
    let db = TestDb::new(Backend::Sqlite).await;
    let options = oncegate::db::StoreOptions {
        max_connections: 4,
        busy_timeout_ms: 5_000,
        clock: Arc::new(SystemClock),
        use_db_clock: false,
        redaction: Default::default(),
        ledger: Default::default(),
    };
    let store = oncegate::db::sqlite::SqliteStore::connect(&db.url, options)
        .await
        .unwrap();
    // The group-commit writer's own connection (rusqlite, on its thread).
    let writer = store.writer();
    let wal = "SELECT journal_mode = 'wal' FROM pragma_journal_mode";
    assert_eq!(writer.between_batches(wal).await.unwrap(), Some(1));
    let sync = writer.between_batches("PRAGMA synchronous").await.unwrap();
    assert_eq!(sync, Some(2), "synchronous=FULL");
    let fk = writer.between_batches("PRAGMA foreign_keys").await.unwrap();
    assert_eq!(fk, Some(1));
    let busy = writer.between_batches("PRAGMA busy_timeout").await.unwrap();
    assert_eq!(busy, Some(5_000));
    let mut held = Vec::new();
    // Hold every reader at once so each one is a distinct connection.
    for _ in 0..4 {
        held.push(store.read_pool().acquire().await.unwrap());
    }
    for conn in &mut held {
        assert_durable_settings(conn).await;
    }
}

async fn assert_durable_settings(conn: &mut sqlx::SqliteConnection) {
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    assert_eq!(sync, 2, "synchronous=FULL");
    assert_eq!(fk, 1);
    assert_eq!(busy, 5_000);
}

#[tokio::test]
async fn postgres_compares_leases_with_the_database_clock() {
    let db = TestDb::new(Backend::Postgres).await;
    // The process clock says 1970; the database's clock must win.
    let skewed = Arc::new(ManualClock::new(0));
    let store = db.store(skewed, true).await;
    let (run, _) = claimed(store.claim(&request("evt_1", "a")).await.unwrap());
    let real_now = SystemClock.now_ms();
    let started = run.lease_started_at.unwrap();
    assert!(
        (started - real_now).abs() < 60_000,
        "lease started at {started}, now {real_now}"
    );
    assert_eq!(run.lease_expires_at, Some(started + LEASE));
    store.close().await;
}

#[tokio::test]
async fn sqlite_read_pool_refuses_writes_and_keeps_a_small_page_cache() {
    use oncegate::db::Admin;
    let db = TestDb::new(Backend::Sqlite).await;
    let options = oncegate::db::StoreOptions {
        max_connections: 2,
        busy_timeout_ms: 5_000,
        clock: Arc::new(SystemClock),
        use_db_clock: false,
        redaction: Default::default(),
        ledger: Default::default(),
    };
    let store = oncegate::db::sqlite::SqliteStore::connect(&db.url, options)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    // Every write belongs on the group-commit writer: one that bypasses it
    // is refused by the read pool's connections (PRAGMA query_only), never
    // a silent fight for the write lock.
    let refused = sqlx::query(
        "INSERT INTO maintenance_leases (name, owner, expires_at) VALUES ('x', 'y', 1)",
    )
    .execute(store.read_pool())
    .await
    .expect_err("the read pool wrote");
    assert!(
        refused.to_string().contains("readonly"),
        "not refused as read-only: {refused}"
    );
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM maintenance_leases")
        .fetch_one(store.read_pool())
        .await
        .unwrap();
    assert_eq!(count, 0, "nothing was written");
    // Its connections keep a small page cache (they read what the kernel
    // caches anyway; memory stays bounded as the tables grow).
    let cache: i64 = sqlx::query_scalar("PRAGMA cache_size")
        .fetch_one(store.read_pool())
        .await
        .unwrap();
    assert_eq!(cache, -512);
    // The same write through the writer goes in.
    assert!(store.take_job("x", "y", 1_000).await.unwrap());
}
