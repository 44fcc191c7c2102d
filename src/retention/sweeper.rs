//! One retention sweep (see [`super::rules`] for the rules): scrub
//! delivered bodies, archive and slim terminal runs, delete old tombstones
//! with a checkpoint. `serve` runs it every `retention.interval_secs`;
//! `oncegate retention run [--dry-run]` runs it once.

use std::path::Path;

use super::archive;
use super::rules::{RetentionConfig, RunMaterial, Selection, SweepReport, DAY_MS};
use crate::audit::checkpoint::Removal;
use crate::audit::port::AuditStore;
use crate::audit::{write_checkpoint, CheckpointReason, Redactor};
use crate::clock::Millis;
use crate::ledger::storage::StoreError;
use crate::proxy::ProxyStore;
use crate::retention::port::RetentionStore;

/// Bodies scrubbed per statement batch.
const SCRUB_BATCH: i64 = 500;

/// Most batches one selection may take in one sweep (a guard against a
/// batch that keeps coming back unslimmed).
const MAX_BATCHES: usize = 10_000;

/// Why a sweep stopped.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The database failed.
    #[error("retention: database error")]
    Store(#[from] StoreError),
    /// An archive file could not be written (nothing was slimmed).
    #[error("retention: cannot write the archive in {dir}")]
    Archive {
        /// The archive directory.
        dir: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Runs one sweep at `now`. A dry run writes nothing and counts what a
/// sweep would archive and delete (up to 100 000 runs per window).
///
/// # Errors
/// [`SweepError`]; work committed before the error stays done.
pub async fn sweep<S: RetentionStore + AuditStore + ProxyStore + ?Sized>(
    store: &S,
    config: &RetentionConfig,
    redactor: &Redactor,
    now: Millis,
    dry_run: bool,
) -> Result<SweepReport, SweepError> {
    let mut report = SweepReport {
        dry_run,
        ..SweepReport::default()
    };
    if !dry_run {
        loop {
            let n = store.scrub_effect_bodies(SCRUB_BATCH, now).await?;
            report.scrubbed += n;
            if n < SCRUB_BATCH as u64 {
                break;
            }
        }
        store.forget_ingress_bodies(now).await?;
        let before = now - i64::from(config.deliveries_days) * DAY_MS;
        loop {
            let (entries, bodies) = store.forget_deliveries(before, SCRUB_BATCH).await?;
            report.deliveries_deleted += entries;
            report.duplicate_bodies_deleted += bodies;
            if entries < SCRUB_BATCH as u64 && bodies < SCRUB_BATCH as u64 {
                break;
            }
        }
        let cutoff = now - i64::from(config.output_days) * DAY_MS;
        report.outputs_expired = store.expire_outputs(cutoff).await?;
        // Answers past their proxy's window (the draft's expiry policy).
        loop {
            let n = store.purge_answers(SCRUB_BATCH).await?;
            report.proxy_answers_deleted += n;
            if n < SCRUB_BATCH as u64 {
                break;
            }
        }
    }
    for sel in config.selections(now, false) {
        archive_window(store, config, redactor, &sel, now, &mut report).await?;
    }
    for sel in config.selections(now, true) {
        delete_tombstones(store, &sel, now, &mut report).await?;
    }
    expire_dead_letters(store, config, redactor, now, &mut report).await?;
    Ok(report)
}

/// Resolved dead letters past their retention deadline: written to an
/// archive file (redacted, like a run's), then deleted.
async fn expire_dead_letters<S: RetentionStore + ?Sized>(
    store: &S,
    config: &RetentionConfig,
    redactor: &Redactor,
    now: Millis,
    report: &mut SweepReport,
) -> Result<(), SweepError> {
    if report.dry_run {
        let due = store.expired_dead_letters(now, 100_000).await?;
        report.dead_letters_expired += due.len() as u64;
        return Ok(());
    }
    for _ in 0..MAX_BATCHES {
        let rows = store.expired_dead_letters(now, SCRUB_BATCH).await?;
        if rows.is_empty() {
            break;
        }
        let ids: Vec<String> = rows
            .iter()
            .filter_map(|r| r.get("id").and_then(|v| v.as_str()).map(str::to_owned))
            .collect();
        let lines: Vec<_> = rows
            .into_iter()
            .map(|row| archive::dead_letter_line(redactor, row, now))
            .collect();
        let path = write(&config.archive_dir, "dead-letters", lines, now).await?;
        let file = path.display().to_string();
        let removed = store.remove_dead_letters(&ids, &file, now).await?;
        report.dead_letters_expired += removed;
        report.files.push(file);
        tracing::info!(dead_letters = removed, file = %path.display(), "archived and deleted resolved dead letters past their retention deadline");
        if removed == 0 || (ids.len() as i64) < SCRUB_BATCH {
            break;
        }
    }
    Ok(())
}

fn counting(sel: &Selection) -> Selection {
    Selection {
        limit: 100_000,
        ..sel.clone()
    }
}

async fn archive_window<S: RetentionStore + AuditStore + ?Sized>(
    store: &S,
    config: &RetentionConfig,
    redactor: &Redactor,
    sel: &Selection,
    now: Millis,
    report: &mut SweepReport,
) -> Result<(), SweepError> {
    if report.dry_run {
        report.archived += store
            .retention_candidates(&counting(sel), false)
            .await?
            .len() as u64;
        return Ok(());
    }
    for _ in 0..MAX_BATCHES {
        let stamps = store.retention_candidates(sel, false).await?;
        if stamps.is_empty() {
            break;
        }
        let mut materials: Vec<RunMaterial> = Vec::with_capacity(stamps.len());
        for stamp in &stamps {
            if let Some(mut m) = store.run_material(stamp).await? {
                archive::redact(redactor, &mut m);
                materials.push(m);
            }
        }
        let lines: Vec<_> = materials.iter().map(|m| archive::line(m, now)).collect();
        let path = write(&config.archive_dir, "runs", lines, now).await?;
        let file = path.display().to_string();
        report.archived += materials.len() as u64;
        let slimmed = store.slim_runs(&materials, &file, now).await?;
        report.slimmed += slimmed;
        report.files.push(file);
        tracing::info!(runs = slimmed, file = %path.display(), "archived runs and slimmed them to tombstones");
        if slimmed == 0 || (stamps.len() as i64) < sel.limit {
            break;
        }
    }
    Ok(())
}

async fn write(
    dir: &Path,
    kind: &'static str,
    lines: Vec<serde_json::Value>,
    now: Millis,
) -> Result<std::path::PathBuf, SweepError> {
    let owned = dir.to_owned();
    let result =
        tokio::task::spawn_blocking(move || archive::write_named(&owned, kind, &lines, now))
            .await
            .map_err(std::io::Error::other)
            .and_then(|r| r);
    result.map_err(|source| SweepError::Archive {
        dir: dir.display().to_string(),
        source,
    })
}

async fn delete_tombstones<S: RetentionStore + AuditStore + ?Sized>(
    store: &S,
    sel: &Selection,
    now: Millis,
    report: &mut SweepReport,
) -> Result<(), SweepError> {
    if report.dry_run {
        report.tombstones_deleted += store
            .retention_candidates(&counting(sel), true)
            .await?
            .len() as u64;
        return Ok(());
    }
    for _ in 0..MAX_BATCHES {
        let stamps = store.retention_candidates(sel, true).await?;
        if stamps.is_empty() {
            break;
        }
        let removals: Vec<Removal> = stamps
            .iter()
            .map(|s| Removal {
                namespace: s.namespace.clone(),
                key: s.key.clone(),
                cutoff: sel.cutoff,
            })
            .collect();
        let done = write_checkpoint(store, CheckpointReason::Retention, &removals, now).await?;
        report.tombstones_deleted += removals.len() as u64;
        tracing::info!(
            tombstones = removals.len(),
            checkpoint = done.checkpoint.id,
            "deleted tombstones past their window, with an audit checkpoint"
        );
        if (stamps.len() as i64) < sel.limit {
            break;
        }
    }
    Ok(())
}
