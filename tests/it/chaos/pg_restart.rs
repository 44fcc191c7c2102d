//! PostgreSQL crashes and restarts under load: oncegate keeps running,
//! answers 503 while it cannot write, recovers by itself, and loses no
//! acknowledged event.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::json;
use sqlx::Connection;

use super::cluster::Cluster;
use super::driver::Provider;
use super::points::{ingress_config, SOURCES};
use super::supervisor::{Crash, CrashPlan, Supervisor};
use super::verdict::{check, Mode};
use super::{db, events, report};
use crate::process::write_config_with;
use crate::target::MockTarget;

/// How long each outage lasts (a fault's duration, not a synchronisation).
const OUTAGE: Duration = Duration::from_millis(1500);
/// Outages per run.
const OUTAGES: usize = 2;

/// A private cluster with an empty `oncegate` database.
async fn private_database() -> (Arc<Cluster>, String) {
    let cluster = Arc::new(tokio::task::spawn_blocking(Cluster::start).await.unwrap());
    let mut admin = sqlx::PgConnection::connect(&cluster.url("postgres"))
        .await
        .unwrap();
    sqlx::query("CREATE DATABASE oncegate")
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();
    let url = cluster.url("oncegate");
    (cluster, url)
}

/// Delivers every event, crashing PostgreSQL at each third of the load;
/// returns what each outage caught in flight.
async fn load_with_outages(
    cluster: &Arc<Cluster>,
    provider: &mut Provider,
    sup: &mut Supervisor,
    url: &str,
) -> Vec<Crash> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let total = provider.events.len();
    let mut outages: Vec<Crash> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while !provider.all_acked() {
        assert!(
            Instant::now() < deadline,
            "events still unacknowledged after 300 s"
        );
        let acked = provider.events.iter().filter(|e| e.acked).count();
        if outages.len() < OUTAGES && acked * (OUTAGES + 1) >= total * (outages.len() + 1) {
            outages.push(outage(cluster, provider, sup, url, &mut rng).await);
        }
        let base = sup.base().await;
        provider.round(&base, &mut rng).await;
        assert!(
            !sup.reap().await,
            "oncegate died while PostgreSQL restarted"
        );
    }
    outages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_crash_and_restart_mid_load_loses_nothing() {
    let started = Instant::now();
    let (cluster, url) = private_database().await;
    let (honours, ignores) = (MockTarget::start().await, MockTarget::start().await);
    honours.honour_keys("idempotency-key", true);
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = write_config_with(dir.path(), &url, &ingress_config(&honours, &ignores));
    let plan = CrashPlan {
        point: None,
        spread: 1,
        budget: 0,
        seed: 0,
    };
    let mut sup = Supervisor::new(&config, dir.path(), &url, plan);
    let per_source = events();
    let mut provider = Provider::new(&SOURCES, per_source);
    let outages = load_with_outages(&cluster, &mut provider, &mut sup, &url).await;
    sup.settle(Duration::from_secs(120)).await;
    let base = sup.base().await;
    let ready = reqwest::get(format!("{base}/readyz")).await.unwrap();
    assert_eq!(ready.status(), 200, "ready again without an operator");
    sup.stop().await;
    assert_eq!(sup.generations, 1, "the same process served throughout");
    provider.assert_answers(&[200, 503]);
    let items = provider.items();
    let statuses = &provider.tally.statuses;
    let honoured = check(&url, &items, Mode::Honours, &honours, &outages).await;
    let ignored = check(&url, &items, Mode::Ignores, &ignores, &outages).await;
    report(&json!({
        "scenario": "postgres_restart",
        "events_per_target": per_source,
        "outages": outages.len(),
        "deliveries": provider.tally.deliveries,
        "answers": statuses,
        "in_flight_at_outage": outages.iter().map(|c| c.in_flight.len()).sum::<usize>(),
        "honours_keys": honoured,
        "ignores_keys": ignored,
        "seconds": started.elapsed().as_secs_f64().round(),
    }));
}

/// Crashes PostgreSQL, keeps delivering while it is down, starts it again,
/// and returns the effects whose outcome the outage may have cut off: those
/// leased (`sending`) just before the crash, those leased between that look
/// and the crash (still leased after it), and those whose lease ran out
/// while the database was away and which the dispatcher has since declared
/// `unknown` (on a loaded machine PostgreSQL's restart can outlast a lease).
async fn outage(
    cluster: &Arc<Cluster>,
    provider: &mut Provider,
    sup: &mut Supervisor,
    url: &str,
    rng: &mut ChaCha8Rng,
) -> Crash {
    let mut in_flight = db::sending_keys(url).await;
    let unknown_before = db::unknown_keys(url).await;
    let restart = {
        let cluster = Arc::clone(cluster);
        tokio::task::spawn_blocking(move || {
            cluster.pg_crash();
            std::thread::sleep(OUTAGE);
            cluster.pg_start();
        })
    };
    let base = sup.base().await;
    while !restart.is_finished() {
        provider.round(&base, rng).await;
    }
    restart.await.unwrap();
    in_flight.extend(db::sending_keys(url).await);
    in_flight.extend(
        db::unknown_keys(url)
            .await
            .into_iter()
            .filter(|key| !unknown_before.contains(key)),
    );
    in_flight.sort();
    in_flight.dedup();
    Crash { in_flight }
}
