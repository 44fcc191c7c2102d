//! `oncegate-bench checkpoint`: the first audit checkpoint over a ledger
//! whose chains were never checkpointed, as after an upgrade or a restored
//! backup. The database is migrated (`oncegate migrate`) and seeded with
//! completed runs (the growth phase's SQL) before `oncegate serve` starts,
//! so the checkpoint the server writes at start moves every head. Reports
//! how long it took and the server's peak resident memory.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::db::Database;
use crate::growth;
use crate::phases::ServerArgs;
use crate::server::{Server, ServerSpec};
use crate::suite::human;

/// What the checkpoint benchmark runs.
#[derive(Debug, clap::Args)]
pub struct CheckpointArgs {
    /// Backends to measure, in one run.
    #[arg(long, value_delimiter = ',', default_value = "sqlite,postgres")]
    pub backends: Vec<String>,
    /// Seeded runs (chains), one measurement each.
    #[arg(long, value_delimiter = ',', default_value = "1000000")]
    pub rows: Vec<u64>,
    /// The server binary, PostgreSQL, and smoke mode (1,000 chains per
    /// backend, checking the checkpoint only).
    #[command(flatten)]
    pub server: ServerArgs,
}

/// Nothing but the checkpoint at start: no retention sweep or recovery
/// pass falls inside the measurement.
const CONFIG: &str = "\n[audit]\ncheckpoint_interval_secs = 86400\n\
                      [retention]\nenabled = false\n[recovery]\nenabled = false\n";

/// Runs the benchmark and prints a Markdown table.
///
/// # Errors
/// A database, the server or the checkpoint failed.
pub async fn run(mut args: CheckpointArgs) -> Result<()> {
    if args.server.smoke {
        args.rows = vec![1_000];
    }
    let bin = args.server.server_bin()?;
    let mut out = String::from(
        "\n| backend | chains | checkpoint s | server peak RSS MiB |\n| --- | ---: | ---: | ---: |\n",
    );
    for backend in &args.backends {
        for &rows in &args.rows {
            let (took, rss_kib) = measure(&bin, backend, &args.server.pg_url, rows).await?;
            let _ = writeln!(
                out,
                "| {backend} | {} | {:.1} | {:.1} |",
                human(rows),
                took.as_secs_f64(),
                rss_kib as f64 / 1024.0
            );
        }
    }
    if !args.server.smoke {
        println!("{out}");
    }
    Ok(())
}

/// One seeded database, one server start: the checkpoint's time (start to
/// its row) and the server's peak RSS in KiB.
async fn measure(bin: &Path, backend: &str, pg_url: &str, rows: u64) -> Result<(Duration, u64)> {
    eprintln!("{backend}, {} chains:", human(rows));
    let db = Database::create(backend, pg_url, &format!("ck{rows}")).await?;
    let migrated = Command::new(bin)
        .arg("migrate")
        .env_remove("ONCEGATE_CONFIG")
        .env("ONCEGATE_DATABASE_URL", &db.url)
        .output()
        .with_context(|| format!("running {} migrate", bin.display()))?;
    if !migrated.status.success() {
        bail!(
            "oncegate migrate failed: {}",
            String::from_utf8_lossy(&migrated.stderr)
        );
    }
    growth::seed(&db, rows).await?;
    let started = Instant::now();
    let server = Server::start(&ServerSpec {
        bin,
        db_url: &db.url,
        max_connections: 0,
        env: &[],
        extra_config: CONFIG,
    })?;
    let written = "SELECT COUNT(*) FROM audit_checkpoints";
    let deadline = started + Duration::from_secs(3600);
    while db.count(written).await? == 0 {
        if Instant::now() > deadline {
            bail!("no checkpoint within an hour");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = started.elapsed();
    let heads = db.count("SELECT COUNT(*) FROM audit_heads").await?;
    if heads != rows as i64 {
        bail!("the checkpoint wrote {heads} heads of {rows} chains");
    }
    let rss = server.peak_rss_kib()?;
    server.stop()?;
    db.drop_now().await?;
    Ok((took, rss))
}
