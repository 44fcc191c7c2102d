//! `oncegate recovery run`: one recovery pass now (stranded runs and runs
//! past their reclaim budget go to `dead_lettered`), under the same
//! maintenance lease as the passes of `serve`.

use anyhow::{bail, Result};

use super::args::RecoveryCommand;
use crate::app::RECOVERY_JOB;
use crate::config::Config;
use crate::ledger::recover;
use crate::metrics::Metrics;

/// Runs `oncegate recovery run`.
///
/// # Errors
/// Another process holds the lease, or the database failed.
pub async fn run(command: RecoveryCommand, config: &Config) -> Result<()> {
    let RecoveryCommand::Run = command;
    let store = super::open(config).await?;
    let owner = format!("cli:{}", uuid::Uuid::now_v7().simple());
    if !store.take_job(RECOVERY_JOB, &owner, 30 * 60_000).await? {
        store.close().await;
        bail!("another process is running a recovery pass; try again later");
    }
    // This process's counters die with it; the server's own passes and
    // the dead letters themselves are what the alerts watch.
    let events = Metrics::new();
    let result = recover(store.as_ref(), &config.ledger, &config.recovery, &events).await;
    store.release_job(RECOVERY_JOB, &owner).await?;
    store.close().await;
    let report = result?;
    println!(
        "{} stranded run(s) and {} run(s) past their reclaim budget dead-lettered \
         ({} reclaimed or moved meanwhile)",
        report.stranded, report.exhausted, report.skipped
    );
    Ok(())
}
