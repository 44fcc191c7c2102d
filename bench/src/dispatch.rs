//! `oncegate-bench dispatch` measures the outbox: how many effects per
//! second the dispatcher delivers to a local HTTP target (throughput, from
//! a pre-filled outbox), and how long an effect waits between its commit
//! and its arrival at the target (latency, at a steady commit rate). Audit
//! writes stay on. Each backend gets a fresh database that is dropped
//! afterwards. The floor, in the same run: a bare HTTP client posting the
//! same bodies to the same target at the same concurrency, no database.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use axum::http::HeaderMap;
use axum::routing::post;
use oncegate::clock::{Clock, SystemClock};
use oncegate::config::Config;
use oncegate::db::{self as store, SharedStore, StoreOptions};
use oncegate::ledger::{
    ClaimOutcome, ClaimRequest, IdempotencyKey, Namespace, OwnerCall, PayloadHash, RunMetadata,
};
use oncegate::outbox::{Dispatcher, EffectSpec, KillSwitch, NewEffect};
use tokio_util::sync::CancellationToken;

use crate::db::Database;

/// What the dispatch benchmark runs.
#[derive(Debug, clap::Args)]
pub struct DispatchArgs {
    /// Backends to measure, in one run.
    #[arg(long, value_delimiter = ',', default_value = "sqlite,postgres")]
    backends: Vec<String>,
    /// Effects pre-queued for the throughput phase.
    #[arg(long, default_value_t = 20_000)]
    effects: usize,
    /// Commits per second during the latency phase.
    #[arg(long, default_value_t = 200)]
    rate: u64,
    /// Seconds of the latency phase.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The target's send slots (`concurrency`); the dispatcher keeps as
    /// many effects in flight.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// `dispatcher.max_in_flight`; 0 is the service's default (the
    /// target's `concurrency`).
    #[arg(long, default_value_t = 512)]
    max_in_flight: usize,
    /// PostgreSQL server (a database is created and dropped).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pg_url: String,
}

/// Arrival times at the target, by idempotency key.
type Arrivals = Arc<Mutex<HashMap<String, i64>>>;

/// Runs the dispatch benchmark on each backend and prints its table.
pub async fn run(args: DispatchArgs) -> Result<()> {
    println!(
        "| backend | effects | floor (posts/s) | throughput (effects/s) | × floor | commit→send p50 | p99 | max |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for backend in &args.backends {
        let row = dispatch_bench(backend, &args).await?;
        println!("{row}");
    }
    Ok(())
}

/// A local target: answers 200 at once and notes when each key arrived.
async fn start_target(arrivals: Arrivals) -> Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let app = axum::Router::new().route(
        "/send",
        post(move |headers: HeaderMap| {
            let arrivals = arrivals.clone();
            async move {
                if let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok()) {
                    arrivals
                        .lock()
                        .unwrap()
                        .insert(key.to_owned(), SystemClock.now_ms());
                }
                "{}"
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(base)
}

/// The floor: `n` posts of an effect's body to `url` from a bare HTTP
/// client, `concurrency` at a time; posts per second.
async fn floor(url: &str, n: usize, concurrency: usize) -> Result<f64> {
    let client = reqwest::Client::new();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let posters: Vec<_> = (0..concurrency.max(1))
        .map(|_| {
            let (client, next, url) = (client.clone(), next.clone(), url.to_owned());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= n {
                        return Ok::<_, anyhow::Error>(());
                    }
                    client
                        .post(&url)
                        .header("idempotency-key", format!("floor{i}"))
                        .header("content-type", "application/json")
                        .body(&b"{\"hello\":\"world\"}"[..])
                        .send()
                        .await?
                        .error_for_status()?
                        .bytes()
                        .await?;
                }
            })
        })
        .collect();
    for poster in posters {
        poster.await??;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

async fn queue(store: &SharedStore, key: &str, url: &str) -> Result<()> {
    let claim = ClaimRequest {
        namespace: Namespace::parse("bench")?,
        key: IdempotencyKey::parse(key)?,
        business_key: None,
        payload_hash: PayloadHash::of_bytes(key.as_bytes()),
        lease_ms: 30_000,
        metadata: RunMetadata::default(),
        claimed_by: "bench".into(),
    };
    let ClaimOutcome::Claimed { lease, .. } = store.claim(&claim).await? else {
        anyhow::bail!("{key} was not claimed");
    };
    let call = OwnerCall {
        namespace: claim.namespace,
        key: claim.key,
        lease,
        actor: "bench".into(),
    };
    let effect = NewEffect {
        operation: "send".into(),
        effect_type: "send".into(),
        target: "local".into(),
        method: "POST".into(),
        url: url.to_owned(),
        headers: Default::default(),
        body: Some(b"{\"hello\":\"world\"}".to_vec()),
        idempotency_key: key.to_owned(),
        spec: EffectSpec::default(),
        not_before: None,
        role: oncegate::outbox::EffectRole::Act,
        schema_version: None,
    };
    store.commit(&call, None, &[effect]).await?;
    Ok(())
}

async fn dispatch_bench(backend: &str, args: &DispatchArgs) -> Result<String> {
    let (effects, rate, seconds, concurrency) =
        (args.effects, args.rate, args.seconds, args.concurrency);
    let max_in_flight = args.max_in_flight;
    let db = Database::create(backend, &args.pg_url, "dispatch").await?;
    let arrivals: Arrivals = Arc::default();
    let base = start_target(arrivals.clone()).await?;
    let url = format!("{base}/send");
    let floor = floor(&url, effects, concurrency).await?;
    arrivals.lock().unwrap().clear();
    let config: Config = toml::from_str(&format!(
        "[[targets]]\nname = \"local\"\nbase_url = \"{base}\"\nconcurrency = {concurrency}\n\
         [dispatcher]\nbatch_size = 256\nidle_poll_ms = 250\nmax_in_flight = {max_in_flight}\n"
    ))?;
    let clock = Arc::new(SystemClock);
    let options = StoreOptions {
        max_connections: 8,
        busy_timeout_ms: 5_000,
        clock: clock.clone(),
        use_db_clock: true,
        redaction: Default::default(),
        ledger: Default::default(),
    };
    let store = store::connect(&db.url, options).await?;
    store.migrate().await?;

    // Throughput: fill the outbox, then time the dispatcher draining it.
    for i in 0..effects {
        queue(&store, &format!("t{i}"), &url).await?;
    }
    let wake = Arc::new(tokio::sync::Notify::new());
    let metrics = Arc::new(oncegate::metrics::Metrics::new());
    let dispatcher = Arc::new(Dispatcher::new(
        store.clone(),
        &config.targets,
        config.dispatcher.clone(),
        clock.clone(),
        metrics,
        wake.clone(),
        KillSwitch::new(store.clone()),
    )?);
    let stop = CancellationToken::new();
    let started = Instant::now();
    let running = tokio::spawn(dispatcher.clone().run(stop.clone()));
    while arrivals.lock().unwrap().len() < effects {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let throughput = effects as f64 / started.elapsed().as_secs_f64();

    // Latency: commit at a steady rate while the dispatcher runs.
    let mut committed = HashMap::new();
    let interval = Duration::from_micros(1_000_000 / rate.max(1));
    let total = (rate * seconds) as usize;
    let mut tick = tokio::time::interval(interval);
    for i in 0..total {
        tick.tick().await;
        let key = format!("l{i}");
        queue(&store, &key, &url).await?;
        committed.insert(key, SystemClock.now_ms());
        wake.notify_one();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while arrivals.lock().unwrap().len() < effects + total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.cancel();
    running.await?;
    let arrived = arrivals.lock().unwrap().clone();
    let mut waits: Vec<i64> = committed
        .iter()
        .filter_map(|(key, at)| arrived.get(key).map(|got| got - at))
        .collect();
    waits.sort_unstable();
    anyhow::ensure!(
        waits.len() == total,
        "only {} of {total} latency effects arrived",
        waits.len()
    );
    let pct = |p: f64| waits[((waits.len() as f64 * p) as usize).min(waits.len() - 1)];
    store.close().await;
    db.drop_now().await?;
    Ok(format!(
        "| {backend} | {effects} | {floor:.0} | {throughput:.0} | {:.2} | {} ms | {} ms | {} ms |",
        throughput / floor,
        pct(0.50),
        pct(0.99),
        waits.last().copied().unwrap_or(0)
    ))
}
