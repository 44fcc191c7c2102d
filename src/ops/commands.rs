//! The CLI commands of audit integrity, retention and backup: `oncegate
//! audit verify|checkpoint|verify-archive`, `oncegate retention run` and
//! `oncegate backup`. They work on the database directly (like `oncegate
//! migrate`), not through HTTP, so they also run while `serve` is down.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use serde_json::Value;

use super::sweeper::sweep;
use crate::audit::{verify, verify_chain, write_checkpoint, AuditEntry, AuditRecord};
use crate::audit::{CheckpointReason, Verification};
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::store::{SharedStore, StoreError};

/// `oncegate audit …`.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Walk every chain, run head and the latest checkpoint; name the first
    /// bad row of each broken chain. Exits non-zero when anything is wrong.
    Verify {
        /// Only this namespace's chains (the checkpoints are always checked).
        #[arg(long)]
        namespace: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write a checkpoint over every chain head now.
    Checkpoint,
    /// Check an archive file's chains against the heads its runs recorded.
    VerifyArchive {
        /// A `runs-*.jsonl` file written by retention.
        file: PathBuf,
    },
}

/// `oncegate retention …`.
#[derive(Debug, Subcommand)]
pub enum RetentionCommand {
    /// Run one sweep now: scrub, archive and slim, delete old tombstones.
    Run {
        /// Count what a sweep would do; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

async fn open(config: &Config) -> Result<SharedStore> {
    let store = crate::app::open_store(config, Arc::new(SystemClock)).await?;
    store.migrate().await.context("applying migrations")?;
    Ok(store)
}

/// Runs `oncegate audit …`.
///
/// # Errors
/// The database failed, or (verify) the log did not verify.
pub async fn audit(command: AuditCommand, config: &Config) -> Result<()> {
    if let AuditCommand::VerifyArchive { file } = command {
        return verify_archive(&file);
    }
    let store = open(config).await?;
    let result = match command {
        AuditCommand::Verify { namespace, json } => {
            run_verify(&store, namespace.as_deref(), json).await
        }
        AuditCommand::Checkpoint => {
            let now = SystemClock.now_ms();
            let r = write_checkpoint(store.as_ref(), CheckpointReason::Manual, &[], now).await?;
            let c = &r.checkpoint;
            println!(
                "checkpoint {} written: {} chains, {} heads moved, digest {}",
                c.id, c.chain_count, c.changed, c.digest
            );
            for a in &r.anomalies {
                println!(
                    "anomaly: namespace={} key={}: {}",
                    a.namespace, a.key, a.problem
                );
            }
            if c.anomalies > 0 {
                println!(
                    "{} chain(s) vanished or went backwards: run `oncegate audit verify`",
                    c.anomalies
                );
            }
            Ok(())
        }
        AuditCommand::VerifyArchive { .. } => Ok(()),
    };
    store.close().await;
    result
}

async fn run_verify(store: &SharedStore, namespace: Option<&str>, json: bool) -> Result<()> {
    let started = SystemClock.now_ms();
    let report = verify(store.as_ref(), namespace).await?;
    let record = Verification::of(&report, namespace, started, SystemClock.now_ms());
    store.record_verification(&record).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for finding in &report.findings {
            println!("BAD {finding}");
        }
        if report.failures > report.findings.len() as i64 {
            println!(
                "… and {} more",
                report.failures - report.findings.len() as i64
            );
        }
        println!(
            "{} chains, {} events, latest checkpoint {}: {}",
            report.chains,
            report.events,
            report
                .checkpoint_id
                .map_or("none".to_owned(), |id| id.to_string()),
            if report.ok() { "ok" } else { "FAILED" }
        );
    }
    if !report.ok() {
        bail!("audit verification failed: {} problem(s)", report.failures);
    }
    Ok(())
}

/// Checks each archived run's events against its recorded head.
fn verify_archive(file: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut bad = 0;
    let mut runs = 0;
    for (n, line) in text.lines().enumerate() {
        runs += 1;
        let line: Value =
            serde_json::from_str(line).with_context(|| format!("line {} is not JSON", n + 1))?;
        if let Err(problem) = check_archived_run(&line) {
            bad += 1;
            println!(
                "BAD line {} namespace={} key={}: {problem}",
                n + 1,
                line["namespace"],
                line["key"]
            );
        }
    }
    println!("{runs} archived run(s), {bad} bad");
    if bad > 0 {
        bail!("the archive does not verify: {bad} run(s)");
    }
    Ok(())
}

fn check_archived_run(line: &Value) -> std::result::Result<(), String> {
    let events = line["audit_events"].as_array().cloned().unwrap_or_default();
    let records: Vec<AuditRecord> = events
        .iter()
        .map(archived_record)
        .collect::<Option<_>>()
        .ok_or("an event row is incomplete")?;
    verify_chain(&records).map_err(|seq| format!("event seq {seq} does not verify"))?;
    let last = records.last();
    let head_seq = line["run"]["audit_seq"].as_i64().unwrap_or(0);
    let head = line["run"]["audit_head"].as_str();
    match last {
        Some(l) if l.entry.seq == head_seq && Some(l.hash.as_str()) == head => Ok(()),
        None if head_seq == 0 => Ok(()),
        _ => Err(format!(
            "the run's head (seq {head_seq}) is not the last archived event"
        )),
    }
}

fn archived_record(row: &Value) -> Option<AuditRecord> {
    let text = |k: &str| row[k].as_str().map(str::to_owned);
    Some(AuditRecord {
        entry: AuditEntry {
            namespace: text("namespace")?,
            key: text("run_key")?,
            seq: row["seq"].as_i64()?,
            kind: text("kind")?,
            actor: text("actor")?,
            from_state: text("from_state"),
            to_state: text("to_state"),
            version: row["version"].as_i64(),
            detail: serde_json::from_str(row["detail"].as_str()?).ok()?,
            created_at: row["created_at"].as_i64()?,
        },
        prev_hash: text("prev_hash"),
        hash: text("hash")?,
    })
}

/// Runs `oncegate retention run`.
///
/// # Errors
/// The database or the archive directory failed.
pub async fn retention(command: RetentionCommand, config: &Config) -> Result<()> {
    let RetentionCommand::Run { dry_run } = command;
    let store = open(config).await?;
    let owner = format!("cli:{}", uuid::Uuid::now_v7().simple());
    if !dry_run && !store.take_job("retention", &owner, 30 * 60_000).await? {
        store.close().await;
        bail!("another process is running a retention sweep; try again later");
    }
    let redactor = config.redactor();
    let result = sweep(
        store.as_ref(),
        &config.retention,
        &redactor,
        SystemClock.now_ms(),
        dry_run,
    )
    .await;
    if !dry_run {
        store.release_job("retention", &owner).await?;
    }
    store.close().await;
    let report = result?;
    let verb = if dry_run { "would be" } else { "were" };
    println!(
        "{} run(s) {verb} archived, {} tombstone(s) {verb} deleted",
        report.archived, report.tombstones_deleted
    );
    if !dry_run {
        println!(
            "{} delivered effect body(ies) replaced by their redacted form",
            report.scrubbed
        );
    }
    for file in &report.files {
        println!("archive: {file}");
    }
    Ok(())
}

/// Runs `oncegate backup FILE`.
///
/// # Errors
/// PostgreSQL (the procedure is printed), or the copy failed.
pub async fn backup(file: &Path, config: &Config) -> Result<()> {
    let store = open(config).await?;
    let result = store.backup(file).await;
    store.close().await;
    match result {
        Ok(()) => {
            println!("backup written to {} (integrity check ok)", file.display());
            Ok(())
        }
        Err(StoreError::Unsupported(procedure)) => {
            println!("{procedure}");
            bail!("refusing: `oncegate backup` copies SQLite only; follow the pg_dump procedure above")
        }
        Err(err) => Err(err).context("writing the backup"),
    }
}
