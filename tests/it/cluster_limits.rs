//! A target's rate and concurrency held by three real `oncegate`
//! processes on one PostgreSQL together (DESIGN.md §4, §9), counted at
//! the target: a small axum server that notes each request's arrival and
//! how many are in flight at once.
//!
//! The rate is measured over the busiest 10 s (the issue asks for 20 s; 10
//! keeps CI short and the bound is the same: at most 10 % over the rate).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::Router;
use oncegate::clock::SystemClock;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::harness::{eventually, queue_effect, Backend, TestDb};
use crate::process::{write_config_with, Server};

/// What the target saw.
#[derive(Default)]
struct Seen {
    arrivals: Mutex<Vec<Instant>>,
    keys: Mutex<HashMap<String, usize>>,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
}

/// The counting target; stops when dropped.
struct Counter {
    base: String,
    seen: Arc<Seen>,
    _stop: DropGuard,
}

async fn receive(
    State((seen, hold)): State<(Arc<Seen>, Duration)>,
    headers: HeaderMap,
) -> &'static str {
    seen.arrivals.lock().unwrap().push(Instant::now());
    let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    seen.most_in_flight.fetch_max(now, Ordering::SeqCst);
    if let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok()) {
        *seen.keys.lock().unwrap().entry(key.to_owned()).or_default() += 1;
    }
    tokio::time::sleep(hold).await;
    seen.in_flight.fetch_sub(1, Ordering::SeqCst);
    "{}"
}

impl Counter {
    /// A target on 127.0.0.1 that holds each request for `hold`.
    async fn start(hold: Duration) -> Self {
        let seen = Arc::new(Seen::default());
        let app = Router::new()
            .route("/send", post(receive))
            .with_state((seen.clone(), hold));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await })
                .await
                .unwrap();
        });
        Self {
            base,
            seen,
            _stop: stop.drop_guard(),
        }
    }

    fn arrivals(&self) -> Vec<Instant> {
        let mut all = self.seen.arrivals.lock().unwrap().clone();
        all.sort();
        all
    }

    /// The most requests that arrived within any `window`.
    fn busiest(&self, window: Duration) -> usize {
        let all = self.arrivals();
        let mut first = 0;
        let mut most = 0;
        for (last, at) in all.iter().enumerate() {
            while *at - all[first] >= window {
                first += 1;
            }
            most = most.max(last - first + 1);
        }
        most
    }
}

/// `effects` effects to target `t` (configured with `limits`), then three
/// `oncegate serve` processes on one PostgreSQL; returns once every effect
/// arrived (each exactly once), with the processes stopped.
async fn deliver_through_three(counter: &Counter, limits: &str, effects: usize) {
    deliver_through(3, "", counter, limits, effects).await;
}

/// As [`deliver_through_three`], with `processes` processes and `settings`
/// added to their settings.
async fn deliver_through(
    processes: usize,
    settings: &str,
    counter: &Counter,
    limits: &str,
    effects: usize,
) {
    let db = TestDb::new(Backend::Postgres).await;
    let store = db.store(Arc::new(SystemClock), true).await;
    let url = format!("{}/send", counter.base);
    for i in 0..effects {
        queue_effect(&store, &format!("k{i}"), "t", url.clone()).await;
    }
    store.close().await;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        "{settings}\n[[targets]]\nname = \"t\"\nbase_url = \"{}\"\n{limits}\n",
        counter.base
    );
    let (config, _) = write_config_with(dir.path(), &db.url, &extra);
    let servers: Vec<Server> = (0..processes)
        .map(|_| Server::start(&config, dir.path(), &[]))
        .collect();
    eventually("every effect arrives", Duration::from_secs(60), || async {
        (counter.seen.arrivals.lock().unwrap().len() >= effects).then_some(())
    })
    .await;
    for server in servers {
        assert!(server.stop().success());
    }
    let keys = counter.seen.keys.lock().unwrap();
    assert_eq!(keys.len(), effects, "every effect arrived");
    assert!(keys.values().all(|n| *n == 1), "each exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_hold_a_targets_rate_together() {
    let counter = Counter::start(Duration::ZERO).await;
    deliver_through_three(&counter, "rate_per_second = 50", 650).await;
    let busiest = counter.busiest(Duration::from_secs(10));
    println!("rate 50/s, three processes: {busiest} requests in the busiest 10 s");
    assert!(busiest <= 550, "{busiest} in 10 s is over 55/s");
    // Not throttled far below the rate either (a loaded CI machine is slow).
    assert!(busiest >= 350, "{busiest} in 10 s is under 35/s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_hold_a_targets_concurrency_together() {
    let counter = Counter::start(Duration::from_millis(100)).await;
    deliver_through_three(&counter, "concurrency = 4", 150).await;
    let most = counter.seen.most_in_flight.load(Ordering::SeqCst);
    println!("concurrency 4, three processes: at most {most} in flight");
    assert!(most <= 4, "{most} requests in flight at once");
}

/// A lease held back by the cluster's concurrency (effects decided, not yet
/// recorded, still count as in flight) leases again when the record lands,
/// not at the idle poll: with a one-minute poll, 200 effects through a
/// concurrency of 4 would otherwise take most of an hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_held_back_by_cluster_concurrency_resumes_on_record() {
    let counter = Counter::start(Duration::ZERO).await;
    let poll = "[dispatcher]\nidle_poll_ms = 60000\n";
    let started = Instant::now();
    deliver_through(1, poll, &counter, "concurrency = 4", 200).await;
    println!("200 effects at concurrency 4: {:?}", started.elapsed());
}
