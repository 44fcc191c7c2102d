//! `soak`: three `oncegate serve` processes on one fresh PostgreSQL
//! database, Debian's nginx round-robin in front, a mixed load for a
//! bounded time while one instance after another is SIGKILLed and
//! restarted, then the counts at the targets and in the database
//! (docs/reliability.md). Exits non-zero when a bar is broken.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::db::Database;
use crate::server::{STRIPE_SECRET, TOKEN};

mod client;
mod cluster;
mod hooks;
mod targets;
mod verdict;
mod workflows;

use client::{Api, Tally};
use cluster::{Cluster, Nginx};
use targets::{IgnoringTarget, KeyTarget};

/// The approver's token (a second subject: nobody approves their own run).
const APPROVER: &str = "og_soak_approver_not_a_secret_0123456789abcdefghij";

#[derive(Debug, clap::Args)]
pub struct SoakArgs {
    /// How long the load runs, in seconds.
    #[arg(long, default_value_t = 600)]
    seconds: u64,
    /// SIGKILL one instance (in turn) every this many seconds.
    #[arg(long, default_value_t = 60)]
    kill_every: u64,
    /// The `oncegate` binary (default: `$ONCEGATE_BIN`, else the one
    /// beside this binary).
    #[arg(long, env = "ONCEGATE_BIN")]
    bin: Option<PathBuf>,
    /// PostgreSQL's maintenance URL; a fresh database is made beside it.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pg_url: String,
    /// The rate-limited target's `rate_per_second`.
    #[arg(long, default_value_t = 20)]
    rate: u32,
    /// How long the key-honouring target answers 503 (default: a quarter
    /// of the run, at most 30 s), starting a quarter into the run.
    #[arg(long)]
    outage_seconds: Option<u64>,
    /// Webhook providers sending at once.
    #[arg(long, default_value_t = 2)]
    providers: usize,
    /// Workflows running at once.
    #[arg(long, default_value_t = 2)]
    workflows: usize,
    /// Pause between one provider's events and one workflow's runs, ms.
    #[arg(long, default_value_t = 100)]
    pause_ms: u64,
    /// Longest wait for the outbox to settle after the load, in seconds.
    #[arg(long, default_value_t = 180)]
    settle_seconds: u64,
    /// Seeds the duplicates, delays and double clicks.
    #[arg(long, default_value_t = 19)]
    seed: u64,
}

fn digest(token: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(token.as_bytes())))
}

fn config(db_url: &str, honouring: &str, ignoring: &str, limited: &str, rate: u32) -> String {
    let budget = "timeout_ms = 3000\nconnect_timeout_ms = 1000\n\
        retry = { max_attempts = 10, base_ms = 100, cap_ms = 2000, max_elapsed_ms = 3600000 }\n\
        health = { failure_threshold = 5, cool_down_ms = 2000, cool_down_cap_ms = 8000 }\n";
    format!(
        "[database]\nurl = \"{db_url}\"\nmax_connections = 4\n\n\
         [dispatcher]\nlease_ms = 5000\nidle_poll_ms = 100\nbatch_size = 16\n\n\
         [[tokens]]\nsubject = \"soak\"\ndigest = \"{}\"\nscopes = [\"workflow\"]\n\n\
         [[tokens]]\nsubject = \"bob\"\ndigest = \"{}\"\nscopes = [\"approver\"]\n\n\
         [[targets]]\nname = \"hooks\"\nbase_url = \"{honouring}/hooks\"\nkind = \"workflow\"\n{budget}\n\
         [[targets]]\nname = \"apply\"\nbase_url = \"{honouring}\"\nhonours_idempotency_keys = true\n{budget}\n\
         [[targets]]\nname = \"ignore\"\nbase_url = \"{ignoring}\"\nhonours_idempotency_keys = false\n{budget}\n\
         [[targets]]\nname = \"limited\"\nbase_url = \"{limited}\"\nhonours_idempotency_keys = true\n\
         rate_per_second = {rate}\n{budget}\n\
         [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\ntarget = \"hooks\"\n\n\
         [[operations]]\nname = \"crm_upsert\"\ngate = \"none\"\n\n\
         [[operations]]\nname = \"bulk_sync\"\ngate = \"none\"\n\n\
         [[operations]]\nname = \"send_reply\"\ncustomer_visible = true\n[operations.approval]\nexpiry_secs = 3600\n",
        digest(TOKEN),
        digest(APPROVER),
    )
}

/// Runs the soak; the database is dropped whatever the outcome.
pub async fn run(args: SoakArgs) -> Result<()> {
    let bin = args.bin.clone().unwrap_or_else(crate::server::default_bin);
    if !bin.exists() {
        bail!("no oncegate binary at {}", bin.display());
    }
    let db = Database::create("postgres", &args.pg_url, "soak").await?;
    let outcome = soak(&args, &bin, &db.url).await;
    db.drop_now().await.context("dropping the soak database")?;
    let violations = outcome?;
    if !violations.is_empty() {
        bail!(
            "the soak found {} violation(s) (lists are cut at 20–30 lines):\n  {}",
            violations.len(),
            violations.join("\n  ")
        );
    }
    println!("soak: every bar held");
    Ok(())
}

/// Counts `effects` and `runs` still moving.
async fn moving(db_url: &str) -> Result<i64> {
    use sqlx::Connection;
    let mut c = sqlx::PgConnection::connect(db_url).await?;
    let n = sqlx::query_scalar(
        "SELECT (SELECT COUNT(*) FROM effects WHERE state IN ('pending', 'sending')) + \
         (SELECT COUNT(*) FROM runs WHERE state IN ('processing', 'approved', 'awaiting_human'))",
    )
    .fetch_one(&mut c)
    .await?;
    c.close().await?;
    Ok(n)
}

async fn soak(args: &SoakArgs, bin: &std::path::Path, db_url: &str) -> Result<Vec<String>> {
    let honouring = KeyTarget::start().await?;
    let ignoring = IgnoringTarget::start(8).await?;
    let limited = Arc::new(KeyTarget::start().await?);
    let dir = tempfile::tempdir()?;
    let config_path = dir.path().join("oncegate.toml");
    std::fs::write(
        &config_path,
        config(
            db_url,
            &honouring.base,
            &ignoring.base,
            &limited.base,
            args.rate,
        ),
    )?;
    let mut cluster =
        tokio::task::block_in_place(|| Cluster::start(bin, &config_path, dir.path(), 3))?;
    let nginx = Nginx::start(&dir.path().join("nginx"), &cluster.ports())?;
    println!(
        "soak: {} s, instances on {:?} behind nginx at {}, a kill every {} s",
        args.seconds,
        cluster.ports(),
        nginx.base,
        args.kill_every
    );

    let started = Instant::now();
    let outage = Duration::from_secs(args.outage_seconds.unwrap_or((args.seconds / 4).min(30)));
    honouring.set_outage(started + Duration::from_secs(args.seconds / 4), outage);
    let api = Arc::new(Api::new(nginx.base.clone(), TOKEN, APPROVER));
    let tally = Arc::new(Tally::default());
    let stop = CancellationToken::new();
    let pause = Duration::from_millis(args.pause_ms);
    let mut load = JoinSet::new();
    for i in 0..args.providers {
        load.spawn(hooks::storm(
            i,
            args.seed,
            pause,
            api.clone(),
            tally.clone(),
            stop.clone(),
        ));
    }
    for i in 0..args.workflows {
        load.spawn(workflows::workflow(
            i,
            pause,
            api.clone(),
            tally.clone(),
            stop.clone(),
        ));
    }
    let backlog = u64::from(args.rate) * 5;
    load.spawn(workflows::bulk(
        backlog,
        10,
        limited.clone(),
        api.clone(),
        tally.clone(),
        stop.clone(),
    ));
    let done = Arc::new(AtomicBool::new(false));
    let approver = tokio::spawn(workflows::approver(
        args.seed,
        api.clone(),
        tally.clone(),
        done.clone(),
    ));

    // Kills, in turn, until the load's time is up.
    let end = started + Duration::from_secs(args.seconds);
    let every = Duration::from_secs(args.kill_every.max(1));
    let mut next_kill = started + every;
    while next_kill < end {
        tokio::time::sleep_until(next_kill.into()).await;
        let i = cluster.kills % 3;
        println!(
            "soak: {:>4} s: SIGKILL instance {i}, restart",
            started.elapsed().as_secs()
        );
        tokio::task::block_in_place(|| cluster.kill_and_restart(i))?;
        next_kill += every;
    }
    tokio::time::sleep_until(end.into()).await;
    stop.cancel();
    println!("soak: load stopped; waiting for the callers and the outbox");
    while load.join_next().await.is_some() {}
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    approver.await?;

    let settle_by = Instant::now() + Duration::from_secs(args.settle_seconds);
    let settled = loop {
        if moving(db_url).await? == 0 {
            break true;
        }
        if Instant::now() > settle_by {
            break false;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    println!(
        "soak: settled ({settled}) after {} s",
        started.elapsed().as_secs()
    );
    let window = Duration::from_secs((args.seconds / 3).clamp(1, 20));
    let scene = verdict::Scene {
        db_url,
        tally: &tally,
        honouring: &honouring,
        ignoring: &ignoring,
        limited: &limited,
        rate: args.rate,
        window,
        owners: &cluster.owners,
        instances: 3,
        kills: cluster.kills,
        kills_expected: ((args.seconds.saturating_sub(1)) / args.kill_every.max(1)) as usize,
        settled,
    };
    let found = verdict::judge(&scene).await?;
    tokio::task::block_in_place(|| cluster.stop());
    drop(nginx);
    print!("{}", found.report);
    Ok(found.violations)
}
