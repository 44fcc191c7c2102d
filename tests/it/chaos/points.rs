//! One chaos run per crash point and backend: signed webhooks through
//! ingress while generations of the real binary die at the point, then the
//! counts at two real targets, one that honours idempotency keys and one
//! that ignores them.

use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use super::driver::Provider;
use super::supervisor::{CrashPlan, Supervisor};
use super::verdict::{check, Mode};
use super::{events, report};
use crate::harness::{Backend, TestDb};
use crate::ingress::SECRET;
use crate::process::write_config_with;
use crate::target::MockTarget;

/// The two sources: `hon` forwards to a target that honours keys, `ign` to
/// one that ignores them.
pub const SOURCES: [&str; 2] = ["hon", "ign"];

/// Targets, sources and a dispatcher tuned for quick recovery: a lease
/// that expires in seconds (longer than any send may take) and short
/// backoff.
pub fn ingress_config(honours: &MockTarget, ignores: &MockTarget) -> String {
    let target = |name: &str, base: String, extra: &str| {
        format!(
            "[[targets]]\nname = \"{name}\"\nbase_url = \"{base}/hooks\"\n{extra}\
             timeout_ms = 1000\nconnect_timeout_ms = 500\n[targets.retry]\nbase_ms = 20\ncap_ms = 200\n\n"
        )
    };
    let source = |name: &str, target: &str| {
        format!("[[sources]]\nname = \"{name}\"\nscheme = \"stripe\"\nsecrets = [\"{SECRET}\"]\ntarget = \"{target}\"\n\n")
    };
    format!(
        "[dispatcher]\nlease_ms = 4000\nidle_poll_ms = 50\n\n{}{}{}{}",
        target("wf_hon", honours.base_url(), "kind = \"workflow\"\n"),
        target(
            "wf_ign",
            ignores.base_url(),
            "kind = \"http\"\nhonours_idempotency_keys = false\n"
        ),
        source("hon", "wf_hon"),
        source("ign", "wf_ign"),
    )
}

/// Hits of `point` per event, roughly: how often one event reaches it.
fn hits_per_event(point: &str) -> f64 {
    match point {
        "after_send_before_record" => 0.1,
        "group_commit" => 1.25,
        _ => 1.0,
    }
}

/// Deaths per run: one for every 25 events per source.
pub fn crash_budget() -> usize {
    (events() / 25).max(4)
}

/// Drives every event until acknowledged (restarting the dead), lets the
/// dispatcher drain, and checks the counts at both targets.
async fn chaos_run(backend: Backend, point: &'static str) {
    let started = Instant::now();
    let (honours, ignores) = (MockTarget::start().await, MockTarget::start().await);
    honours.honour_keys("idempotency-key", true);
    let db = TestDb::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = write_config_with(dir.path(), &db.url, &ingress_config(&honours, &ignores));
    let per_source = events();
    let budget = crash_budget();
    let total_hits = hits_per_event(point) * (per_source * SOURCES.len()) as f64;
    let seed = 0x0c4a05 ^ per_source as u64 ^ point.len() as u64;
    let plan = CrashPlan {
        point: Some(point),
        spread: (2.0 * total_hits / budget as f64).ceil() as u64,
        budget,
        seed,
    };
    let mut sup = Supervisor::new(&config, dir.path(), &db.url, plan);
    let mut provider = Provider::new(&SOURCES, per_source);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);

    provider
        .deliver_all(&mut sup, &mut rng, Duration::from_secs(300))
        .await;
    sup.settle(Duration::from_secs(60)).await;
    sup.stop().await;

    assert!(
        !sup.crashes.is_empty(),
        "{point}: no generation ever reached the crash point"
    );
    provider.assert_answers(&[0, 200]);
    let items = provider.items();
    let honoured = check(&db.url, &items, Mode::Honours, &honours, &sup.crashes).await;
    let ignored = check(&db.url, &items, Mode::Ignores, &ignores, &sup.crashes).await;
    report(&json!({
        "point": point,
        "backend": format!("{backend:?}").to_lowercase(),
        "events_per_target": per_source,
        "deliveries": provider.tally.deliveries,
        "redeliveries": provider.tally.duplicates,
        "unanswered": provider.tally.statuses.get(&0).copied().unwrap_or(0),
        "crashes": sup.crashes.len(),
        "generations": sup.generations,
        "in_flight_at_death": sup.crashes.iter().map(|c| c.in_flight.len()).sum::<usize>(),
        "honours_keys": honoured,
        "ignores_keys": ignored,
        "seconds": started.elapsed().as_secs_f64().round(),
    }));
}

macro_rules! chaos_points {
    ($($name:ident: $point:literal on [$($test:ident => $backend:ident),+];)+) => {
        $(
            mod $name {
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $test() {
                        super::chaos_run(crate::harness::Backend::$backend, $point).await
                    }
                )+
            }
        )+
    };
}

chaos_points! {
    after_claim: "after_claim" on [sqlite => Sqlite, postgres => Postgres];
    after_effect_insert: "after_effect_insert" on [sqlite => Sqlite, postgres => Postgres];
    after_send_before_record: "after_send_before_record" on [sqlite => Sqlite, postgres => Postgres];
    after_record_before_completion: "after_record_before_completion" on [sqlite => Sqlite, postgres => Postgres];
    // The point sits in SQLite's commit path only (PostgreSQL has no group commit).
    group_commit: "group_commit" on [sqlite => Sqlite];
}
