//! `oncegate retention run [--dry-run]`: one retention sweep now, under
//! the same lease as the sweeps of `serve`.

use anyhow::{bail, Result};

use super::args::RetentionCommand;
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::retention::sweep;

/// Runs `oncegate retention run`.
///
/// # Errors
/// The database or the archive directory failed.
pub async fn run(command: RetentionCommand, config: &Config) -> Result<()> {
    let RetentionCommand::Run { dry_run } = command;
    let store = super::open(config).await?;
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
        "{} run(s) {verb} archived, {} tombstone(s) {verb} deleted, \
         {} resolved dead letter(s) past their retention deadline {verb} archived and deleted",
        report.archived, report.tombstones_deleted, report.dead_letters_expired
    );
    if !dry_run {
        println!(
            "{} delivered effect body(ies) replaced by their redacted form, \
             {} proxy answer(s) past their window deleted, {} deliveries-log entr(y/ies) \
             and {} unclaimed duplicate_of bod(y/ies) past deliveries_days deleted",
            report.scrubbed,
            report.proxy_answers_deleted,
            report.deliveries_deleted,
            report.duplicate_bodies_deleted
        );
    }
    for file in &report.files {
        println!("archive: {file}");
    }
    Ok(())
}
