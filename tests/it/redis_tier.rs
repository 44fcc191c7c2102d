//! The Redis tier through the real HTTP API (DESIGN.md §9): one winner
//! among concurrent claims, a stale owner refused after a reclaim, claims
//! that survive a redis-server restart with AOF on, a stopped Redis
//! answered 503 and never an accept, and the refusals of what the tier
//! does not serve. The restart and outage tests run a redis-server of
//! their own (`OwnRedis`, killed on drop), never the shared one.

use std::sync::Arc;
use std::time::Duration;

use oncegate::clock::ManualClock;
use serde_json::{json, Value};

use crate::harness::{answer, Backend, TestApp};
use crate::redis_support::{redis_tier, shared_url, OwnRedis, Prefix};

const NS: &str = "hot";

async fn app_on(url: &str, prefix: &Prefix) -> TestApp {
    TestApp::spawn_with(Backend::Sqlite, |c| redis_tier(c, NS, url, &prefix.prefix)).await
}

fn claim_body(key: &str, payload: Value) -> Value {
    json!({ "namespace": NS, "key": key, "payload": payload })
}

async fn readyz(app: &TestApp) -> (u16, Value) {
    answer(app.client.get(format!("{}/readyz", app.base))).await
}

/// Waits until the app reaches Redis again after a restart (its
/// connections reconnect on the first failed call).
async fn until_redis_answers(app: &TestApp) {
    crate::harness::eventually(
        "the Redis tier answers",
        Duration::from_secs(20),
        || async { (app.get_run(NS, "any").await.0 != 503).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_claims_of_one_key_have_one_winner() {
    let prefix = Prefix::new(&shared_url());
    let app = Arc::new(app_on(&shared_url(), &prefix).await);
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            app.claim(claim_body("storm-1", json!({"n": 1}))).await
        }));
    }
    let mut winners = 0;
    for task in tasks {
        let (status, body) = task.await.unwrap();
        assert_eq!(status, 200, "{body}");
        if body["claimed"] == json!(true) {
            winners += 1;
        } else {
            assert_eq!(body["state"], "processing", "{body}");
            assert!(body["retry_after"].as_i64().unwrap() >= 1, "{body}");
        }
    }
    assert_eq!(winners, 1, "exactly one claim wins");
    assert_eq!(prefix.count(), 1, "one key in Redis");
    let (status, run) = app.get_run(NS, "storm-1").await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["attempts"], 1);
    Arc::try_unwrap(app).ok().unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_is_refused_after_a_reclaim() {
    let prefix = Prefix::new(&shared_url());
    let clock = Arc::new(ManualClock::new(1_800_000_000_000));
    let url = shared_url();
    let app = TestApp::spawn_clocked(Backend::Sqlite, clock.clone(), |c| {
        redis_tier(c, NS, &url, &prefix.prefix)
    })
    .await;
    let body = json!({ "namespace": NS, "key": "k1", "payload": {"a": 1}, "lease_ms": 1_000 });
    let (_, first) = app.claim(body.clone()).await;
    assert_eq!(first["claimed"], true, "{first}");
    clock.advance_ms(1_000);
    let (_, second) = app.claim(body).await;
    assert_eq!(second["claimed"], true, "{second}");
    assert_eq!(second["reclaimed"], true);
    assert_eq!(second["version"], 2);
    let stale = json!({ "namespace": NS, "key": "k1", "lease": first["lease"] });
    let (status, problem) = app
        .post("/v1/runs/complete", Some(&app.workflow), &stale)
        .await;
    assert_eq!(status, 409, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("another owner"),
        "{problem}"
    );
    let current =
        json!({ "namespace": NS, "key": "k1", "lease": second["lease"], "result": {"ok": true} });
    let (status, done) = app
        .post("/v1/runs/complete", Some(&app.workflow), &current)
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["state"], "completed");
    let (_, dup) = app
        .claim(json!({ "namespace": NS, "key": "k1", "payload": {"a": 1} }))
        .await;
    assert_eq!(dup["duplicate"], true, "{dup}");
    assert_eq!(dup["result"], json!({"ok": true}));
    let (status, problem) = app
        .claim(json!({ "namespace": NS, "key": "k1", "payload": {"a": 2} }))
        .await;
    assert_eq!(status, 422, "{problem}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_claims_survive_a_redis_restart_with_aof() {
    let mut redis = OwnRedis::start(&[]).await;
    let prefix = Prefix::new(&redis.url());
    let app = app_on(&redis.url(), &prefix).await;
    let mut leases = Vec::new();
    for i in 0..20 {
        let (status, body) = app.claim(claim_body(&format!("k{i}"), json!(i))).await;
        assert_eq!((status, &body["claimed"]), (200, &json!(true)), "{body}");
        leases.push(body["lease"].clone());
    }
    let done = json!({ "namespace": NS, "key": "k0", "lease": leases[0], "result": {"sent": 1} });
    let (status, _) = app
        .post("/v1/runs/complete", Some(&app.workflow), &done)
        .await;
    assert_eq!(status, 200);
    redis.stop().await;
    redis.launch().await;
    until_redis_answers(&app).await;
    let (_, dup) = app.claim(claim_body("k0", json!(0))).await;
    assert_eq!(dup["duplicate"], true, "{dup}");
    assert_eq!(dup["result"], json!({"sent": 1}));
    for i in 1..20 {
        let (status, body) = app.claim(claim_body(&format!("k{i}"), json!(i))).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["claimed"], false, "k{i} was acknowledged: {body}");
        assert_eq!(body["state"], "processing");
    }
    // The owner's lease still holds after the restart.
    let owner = json!({ "namespace": NS, "key": "k1", "lease": leases[1] });
    let (status, body) = app
        .post("/v1/runs/renew", Some(&app.workflow), &owner)
        .await;
    assert_eq!(status, 200, "{body}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_with_appendfsync_always_keeps_every_acknowledged_claim() {
    let mut redis = OwnRedis::start(&["appendfsync always"]).await;
    let prefix = Prefix::new(&redis.url());
    let app = app_on(&redis.url(), &prefix).await;
    for i in 0..20 {
        let (_, body) = app.claim(claim_body(&format!("k{i}"), json!(i))).await;
        assert_eq!(body["claimed"], true, "{body}");
    }
    redis.kill();
    redis.launch().await;
    until_redis_answers(&app).await;
    for i in 0..20 {
        let (_, body) = app.claim(claim_body(&format!("k{i}"), json!(i))).await;
        assert_eq!(body["claimed"], false, "k{i} was acknowledged: {body}");
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_is_a_503_and_never_an_accept() {
    let mut redis = OwnRedis::start(&[]).await;
    let prefix = Prefix::new(&redis.url());
    let app = app_on(&redis.url(), &prefix).await;
    let (status, ready) = readyz(&app).await;
    assert_eq!((status, &ready["redis"]), (200, &json!("ready")), "{ready}");
    let (_, held) = app.claim(claim_body("held", json!(1))).await;
    assert_eq!(held["claimed"], true);
    redis.stop().await;

    let response = app
        .client
        .post(format!("{}/v1/claims", app.base))
        .bearer_auth(&app.workflow)
        .json(&claim_body("new-while-down", json!(1)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert!(response.headers().get("retry-after").is_some());
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let problem: Value = response.json().await.unwrap();
    assert_eq!(problem["type"], "urn:oncegate:problem:database-unavailable");
    let owner = json!({ "namespace": NS, "key": "held", "lease": held["lease"] });
    let (status, _) = app
        .post("/v1/runs/complete", Some(&app.workflow), &owner)
        .await;
    assert_eq!(
        status, 503,
        "a move is never acknowledged while Redis is down"
    );
    let (status, _) = app.get_run(NS, "held").await;
    assert_eq!(status, 503);
    let (status, ready) = readyz(&app).await;
    assert_eq!(
        (status, &ready["redis"]),
        (503, &json!("unavailable")),
        "{ready}"
    );

    redis.launch().await;
    until_redis_answers(&app).await;
    let (status, _) = app.get_run(NS, "new-while-down").await;
    assert_eq!(status, 404, "the refused claim left nothing behind");
    let (_, held_again) = app.get_run(NS, "held").await;
    assert_eq!(
        held_again["state"], "processing",
        "the refused move changed nothing"
    );
    let (status, body) = app.claim(claim_body("new-while-down", json!(1))).await;
    assert_eq!((status, &body["claimed"]), (200, &json!(true)), "{body}");
    crate::harness::eventually("readyz recovers", Duration::from_secs(10), || async {
        (readyz(&app).await.0 == 200).then_some(())
    })
    .await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_tier_does_not_serve_is_refused_clearly() {
    let prefix = Prefix::new(&shared_url());
    let app = app_on(&shared_url(), &prefix).await;
    let (_, claimed) = app.claim(claim_body("k", json!(1))).await;
    let owner = json!({
        "namespace": NS, "key": "k", "lease": claimed["lease"],
        "effects": [], "result": null
    });
    let (status, problem) = app
        .post("/v1/runs/commit", Some(&app.workflow), &owner)
        .await;
    assert_eq!(status, 400, "{problem}");
    assert_eq!(problem["field"], "namespace");
    assert!(problem["detail"].as_str().unwrap().contains("Redis tier"));
    let (status, problem) = app
        .claim(json!({ "namespace": NS, "key": "b", "payload": 1, "business_key": "order-1" }))
        .await;
    assert_eq!(status, 400, "{problem}");
    assert_eq!(prefix.count(), 1, "the refused claim wrote nothing");
    let timeline = app
        .client
        .get(format!("{}/v1/runs/timeline", app.base))
        .query(&[("namespace", NS), ("key", "k")])
        .bearer_auth(&app.operator);
    let (status, problem) = answer(timeline).await;
    assert_eq!(status, 400, "{problem}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_s_ttl_is_the_dedup_window_and_its_expiry_reopens_the_gate() {
    let prefix = Prefix::new(&shared_url());
    let app = app_on(&shared_url(), &prefix).await;
    let (_, first) = app.claim(claim_body("k", json!(1))).await;
    let done = json!({ "namespace": NS, "key": "k", "lease": first["lease"], "result": 1 });
    app.post("/v1/runs/complete", Some(&app.workflow), &done)
        .await;
    let mut conn = redis::Client::open(shared_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let key = format!("{}run:{}:{NS}:k", prefix.prefix, NS.len());
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    let window = 24 * 3_600_000;
    assert!(ttl > window - 60_000 && ttl <= window, "PTTL {ttl}");
    // Past the window the key is gone: the same event is claimed anew.
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(1)
        .query_async(&mut conn)
        .await
        .unwrap();
    crate::harness::eventually("the key expires", Duration::from_secs(5), || async {
        let (status, _) = app.get_run(NS, "k").await;
        (status == 404).then_some(())
    })
    .await;
    let (_, again) = app.claim(claim_body("k", json!(1))).await;
    assert_eq!(again["claimed"], true, "{again}");
    assert_eq!(again["version"], 1);
    app.stop().await;
}
