//! `oncegate audit verify|checkpoint|verify-archive`: audit integrity on
//! the database directly (like `oncegate migrate`), not through HTTP, so
//! it also runs while `serve` is down.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::args::AuditCommand;
use super::remote::{text, Remote};
use crate::audit::{verify, verify_chain, write_checkpoint, AuditEntry, AuditRecord};
use crate::audit::{CheckpointReason, Verification};
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::db::SharedStore;

/// Runs `oncegate audit …`.
///
/// # Errors
/// The database failed, or (verify) the log did not verify.
pub async fn run(command: AuditCommand, remote: &Remote, config: &Config) -> Result<()> {
    match command {
        AuditCommand::VerifyArchive { file } => return verify_archive(&file),
        AuditCommand::Status { json } => return status(remote, json, config).await,
        _ => {}
    }
    let store = super::open(config).await?;
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
        AuditCommand::VerifyArchive { .. } | AuditCommand::Status { .. } => Ok(()),
    };
    store.close().await;
    result
}

async fn run_verify(store: &SharedStore, namespace: Option<&str>, json: bool) -> Result<()> {
    let started = SystemClock.now_ms();
    let spinner = super::progress::spinner("verifying the audit chains");
    let report = verify(store.as_ref(), namespace).await;
    spinner.finish_and_clear();
    let report = report?;
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
        if report.unsealed_effects > 0 {
            println!(
                "{} effect(s) have no seal in their chain (queued before seals were recorded): not checked",
                report.unsealed_effects
            );
        }
    }
    if !report.ok() {
        bail!("audit verification failed: {} problem(s)", report.failures);
    }
    Ok(())
}

/// `oncegate audit status`: the latest verification and checkpoint, as the
/// server recorded them. Exits non-zero when the latest verification found
/// a problem or the latest checkpoint an anomaly, so a cron job can alert.
async fn status(remote: &Remote, json: bool, config: &Config) -> Result<()> {
    let found = remote.client(config)?.get("/v1/audit/status", &[]).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&found)?);
    } else {
        let v = &found["verification"];
        if v.is_null() {
            println!("verification: none yet");
        } else {
            println!(
                "verification: {} at {}: {} chain(s), {} problem(s){}",
                if v["failures"] == 0 { "ok" } else { "FAILED" },
                text(&v["finished_at"]),
                text(&v["chains"]),
                text(&v["failures"]),
                v["first_failure"]
                    .as_str()
                    .map(|f| format!("; first: {f}"))
                    .unwrap_or_default()
            );
        }
        let c = &found["checkpoint"];
        if c.is_null() {
            println!("checkpoint: none yet");
        } else {
            println!(
                "checkpoint: #{} at {} ({}): {} chain(s), {} anomaly(ies)",
                text(&c["id"]),
                text(&c["created_at"]),
                text(&c["reason"]),
                text(&c["chain_count"]),
                text(&c["anomalies"])
            );
        }
    }
    let failures = found["verification"]["failures"].as_i64().unwrap_or(0);
    let anomalies = found["checkpoint"]["anomalies"].as_i64().unwrap_or(0);
    if failures > 0 || anomalies > 0 {
        bail!("the audit log needs attention: run `oncegate audit verify` on the host");
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
