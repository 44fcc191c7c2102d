//! Raw `pgbench` running the claim's equivalent statement: one
//! `INSERT … ON CONFLICT DO NOTHING RETURNING` into the same `runs` table
//! (same indexes), one transaction each, prepared, at a given client count.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::load::{new_histogram, Report};

/// The statement each pgbench transaction runs.
const SCRIPT: &str = "\\set r random(1, 1000000000000)\n\
INSERT INTO runs (namespace, run_key, state, payload_hash, lease_owner, lease_expires_at, \
lease_started_at, version, attempts, correlation_id, claimed_by, audit_seq, created_at, updated_at) \
VALUES ('pgbench', 'evt_' || :r, 'processing', \
'sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08', \
'0123456789abcdef', 1900000000000, 1800000000000, 1, 1, 'corr', 'pgbench', 1, \
1800000000000, 1800000000000) ON CONFLICT (namespace, run_key) DO NOTHING RETURNING run_key;\n";

/// Waits until PostgreSQL has room for `clients` more connections (other
/// processes on the machine share its `max_connections`).
pub async fn wait_for_slots(pg_url: &str, clients: usize) -> Result<()> {
    use sqlx::Connection;
    const FREE: &str = "SELECT (current_setting('max_connections')::int \
        - current_setting('superuser_reserved_connections')::int \
        - (SELECT count(*)::int FROM pg_stat_activity WHERE backend_type = 'client backend'))::bigint";
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut admin = sqlx::PgConnection::connect(pg_url).await?;
        let free: i64 = sqlx::query_scalar(FREE).fetch_one(&mut admin).await?;
        admin.close().await?;
        // This check's own connection is gone again; keep a few spare.
        if free >= clients as i64 + 4 {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            bail!("PostgreSQL has {free} free connections, pgbench needs {clients}: raise max_connections or stop what holds them");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Whether `pgbench` can be run.
pub fn available(bin: &Path) -> bool {
    Command::new(bin)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs pgbench with `clients` for `warmup` (discarded), then `window`.
pub fn run(
    bin: &Path,
    pg_url: &str,
    db: &str,
    clients: usize,
    warmup: Duration,
    window: Duration,
) -> Result<Report> {
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("claim.sql");
    std::fs::write(&script, SCRIPT)?;
    let url = url::Url::parse(pg_url).context("--pg-url")?;
    let host = url.host_str().unwrap_or("127.0.0.1").to_owned();
    let port = url.port().unwrap_or(5432).to_string();
    let user = if url.username().is_empty() {
        "postgres".to_owned()
    } else {
        url.username().to_owned()
    };
    let threads = clients.min(2).to_string();
    let clients = clients.to_string();
    let pgbench = |secs: u64, log: bool| -> Result<String> {
        let mut cmd = Command::new(bin);
        cmd.args([
            "-n", "-M", "prepared", "-h", &host, "-p", &port, "-U", &user,
        ])
        .args(["-c", &clients, "-j", &threads, "-T", &secs.to_string()])
        .arg("-f")
        .arg(&script);
        if log {
            cmd.arg("-l")
                .arg(format!("--log-prefix={}", dir.path().join("pgb").display()));
        }
        cmd.arg(db);
        let out = cmd.output().context("running pgbench")?;
        if !out.status.success() {
            bail!("pgbench failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    if !warmup.is_zero() {
        pgbench(warmup.as_secs().max(1), false)?;
    }
    let secs = window.as_secs().max(1);
    let out = pgbench(secs, true)?;
    let tps: f64 = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("no tps in pgbench's output: {out}"))?;
    let mut hist = new_histogram();
    for entry in std::fs::read_dir(dir.path())? {
        let path = entry?.path();
        if !path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("pgb"))
        {
            continue;
        }
        for line in std::fs::read_to_string(&path)?.lines() {
            // client_id transaction_no time_us script_no epoch epoch_us
            if let Some(us) = line.split_whitespace().nth(2).and_then(|v| v.parse().ok()) {
                hist.saturating_record(us);
            }
        }
    }
    let window = Duration::from_secs(secs);
    Ok(Report {
        requests: (tps * window.as_secs_f64()).round() as u64,
        errors: 0,
        sample_error: None,
        window,
        hist,
        sent: Vec::new(),
    })
}
