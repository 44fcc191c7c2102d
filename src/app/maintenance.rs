//! The periodic integrity, retention and recovery work inside `serve`:
//! audit checkpoints (`audit.checkpoint_interval_secs`), retention sweeps
//! (`retention.interval_secs`), full verifications
//! (`audit.verify_interval_secs`) and recovery passes
//! (`recovery.interval_secs`: stranded runs and spent reclaim budgets).
//!
//! Each job runs under a lease in `maintenance_leases`, so with several
//! oncegate processes on one database only one runs it at a time; the CLI
//! commands take the same leases. Results feed the metrics below, which
//! the shipped alert rules watch.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{IntCounter, IntGauge, Opts, Registry};
use tokio::time::{interval_at, Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use anyhow::{Context, Result};

use crate::audit::checkpoint::Checkpoint;
use crate::audit::{verify, write_checkpoint, CheckpointReason, Verification};
use crate::clock::SharedClock;
use crate::config::Config;
use crate::db::SharedStore;
use crate::ledger::recover;
use crate::metrics::Metrics;
use crate::retention::sweep;
use crate::state::AppState;

/// How long a job may hold its lease before another process may take it.
const JOB_LEASE_MS: i64 = 30 * 60_000;

/// The recovery sweeper's maintenance lease (`oncegate recovery run` takes it too).
pub const RECOVERY_JOB: &str = "recovery";

/// Starts the periodic checkpoint, retention and verification jobs.
///
/// # Errors
/// The audit metrics could not be registered.
pub fn spawn_maintenance(
    state: &AppState,
    shutdown: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>> {
    let metrics = AuditMetrics::register(state.metrics.registry())
        .context("registering the audit metrics")?;
    let jobs = Maintenance::new(
        state.store.clone(),
        state.config.clone(),
        state.clock.clone(),
        metrics,
        state.metrics.clone(),
    );
    Ok(tokio::spawn(jobs.run(shutdown)))
}

/// The audit and retention metrics (all `oncegate_*`).
#[derive(Debug, Clone)]
pub struct AuditMetrics {
    /// Problems the latest verification found (0: the log verified).
    pub verify_failures: IntGauge,
    /// When the latest verification finished (Unix seconds; 0: never).
    pub verify_last: IntGauge,
    /// When the latest checkpoint was written (Unix seconds; 0: never).
    pub checkpoint_last: IntGauge,
    /// Chains the latest checkpoint found vanished or gone backwards.
    pub checkpoint_anomalies: IntGauge,
    /// Runs archived and slimmed to tombstones.
    pub archived: IntCounter,
    /// Tombstones deleted past their window.
    pub tombstones_deleted: IntCounter,
    /// Retention sweeps that failed.
    pub sweep_failures: IntCounter,
}

impl AuditMetrics {
    /// Creates the metrics and registers them in `registry`.
    ///
    /// # Errors
    /// The registry already holds metrics of these names.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let gauge = |name: &str, help: &str| -> prometheus::Result<IntGauge> {
            let g = IntGauge::with_opts(Opts::new(name, help))?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let counter = |name: &str, help: &str| -> prometheus::Result<IntCounter> {
            let c = IntCounter::with_opts(Opts::new(name, help))?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        Ok(Self {
            verify_failures: gauge("oncegate_audit_verify_failures", "Problems the latest audit verification found (0: every chain and checkpoint verified).")?,
            verify_last: gauge("oncegate_audit_verify_last_timestamp_seconds", "When the latest audit verification finished (Unix time; 0: never).")?,
            checkpoint_last: gauge("oncegate_audit_checkpoint_last_timestamp_seconds", "When the latest audit checkpoint was written (Unix time; 0: never).")?,
            checkpoint_anomalies: gauge("oncegate_audit_checkpoint_anomalies", "Chains the latest audit checkpoint found vanished or gone backwards.")?,
            archived: counter("oncegate_retention_archived_runs_total", "Runs archived to JSONL and slimmed to tombstones.")?,
            tombstones_deleted: counter("oncegate_retention_tombstones_deleted_total", "Tombstones deleted past their window.")?,
            sweep_failures: counter("oncegate_retention_sweep_failures_total", "Retention sweeps that failed (see the log).")?,
        })
    }

    /// Shows a verification result (from this process or any other).
    pub fn observe_verification(&self, v: &Verification) {
        self.verify_failures.set(v.failures);
        self.verify_last.set(v.finished_at / 1000);
    }

    /// Shows the latest checkpoint.
    pub fn observe_checkpoint(&self, c: &Checkpoint) {
        self.checkpoint_last.set(c.created_at / 1000);
        self.checkpoint_anomalies.set(c.anomalies);
    }
}

/// The periodic jobs of one process.
#[derive(Debug, Clone)]
pub struct Maintenance {
    store: SharedStore,
    config: Arc<Config>,
    clock: SharedClock,
    metrics: AuditMetrics,
    service_metrics: Arc<Metrics>,
    owner: String,
}

impl Maintenance {
    /// The jobs over `store`, reporting into `metrics` (and the recovery
    /// moves into `service_metrics`).
    pub fn new(
        store: SharedStore,
        config: Arc<Config>,
        clock: SharedClock,
        metrics: AuditMetrics,
        service_metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            store,
            config,
            clock,
            metrics,
            service_metrics,
            owner: format!("serve:{}", uuid::Uuid::now_v7().simple()),
        }
    }

    /// Runs until `shutdown`: a checkpoint at start and every interval,
    /// sweeps and verifications every theirs.
    pub async fn run(self, shutdown: CancellationToken) {
        let tick = |secs: u64, first: Duration| {
            let period = Duration::from_secs(secs.max(1));
            let mut i = interval_at(Instant::now() + first, period);
            i.set_missed_tick_behavior(MissedTickBehavior::Delay);
            i
        };
        let audit = &self.config.audit;
        let retention = &self.config.retention;
        let mut checkpoints = tick(audit.checkpoint_interval_secs, Duration::ZERO);
        let mut sweeps = tick(retention.interval_secs, Duration::from_secs(60));
        let verify_secs = audit.verify_interval_secs;
        let mut verifies = tick(verify_secs, Duration::from_secs(verify_secs.max(1)));
        let recovery = &self.config.recovery;
        let mut recoveries = tick(recovery.interval_secs, Duration::from_secs(5));
        self.refresh().await;
        loop {
            // A job in progress is abandoned at shutdown: each writes in
            // transactions (an archive file whose runs were not slimmed yet
            // is written again by a later sweep).
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = checkpoints.tick(), if audit.checkpoint_interval_secs > 0 => {
                    self.until(&shutdown, self.checkpoint()).await;
                }
                _ = sweeps.tick(), if retention.enabled => self.until(&shutdown, self.sweep()).await,
                _ = verifies.tick(), if verify_secs > 0 => self.until(&shutdown, self.verify()).await,
                _ = recoveries.tick(), if recovery.enabled => {
                    self.until(&shutdown, self.recover()).await;
                }
            }
        }
        for job in [
            "audit_checkpoint",
            "retention",
            "audit_verify",
            RECOVERY_JOB,
        ] {
            self.release(job).await;
        }
    }

    async fn until(
        &self,
        shutdown: &CancellationToken,
        job: impl std::future::Future<Output = ()>,
    ) {
        tokio::select! {
            () = shutdown.cancelled() => tracing::info!("maintenance job stopped by shutdown"),
            () = job => {}
        }
    }

    /// Reads the latest checkpoint and verification into the gauges.
    async fn refresh(&self) {
        if let Ok(Some(c)) = self.store.latest_checkpoint().await {
            self.metrics.observe_checkpoint(&c);
        }
        if let Ok(Some(v)) = self.store.last_verification().await {
            self.metrics.observe_verification(&v);
        }
    }

    async fn leased(&self, job: &str) -> bool {
        match self.store.take_job(job, &self.owner, JOB_LEASE_MS).await {
            Ok(got) => got,
            Err(err) => {
                tracing::warn!(job, error = %err, "cannot take the maintenance lease");
                false
            }
        }
    }

    async fn release(&self, job: &str) {
        if let Err(err) = self.store.release_job(job, &self.owner).await {
            tracing::warn!(job, error = %err, "cannot release the maintenance lease");
        }
    }

    async fn checkpoint(&self) {
        if self.leased("audit_checkpoint").await {
            let now = self.clock.now_ms();
            match write_checkpoint(self.store.as_ref(), CheckpointReason::Periodic, &[], now).await
            {
                Ok(r) => tracing::debug!(
                    id = r.checkpoint.id,
                    chains = r.checkpoint.chain_count,
                    "audit checkpoint written"
                ),
                Err(err) => tracing::error!(error = %err, "audit checkpoint failed"),
            }
            self.release("audit_checkpoint").await;
        }
        self.refresh().await;
    }

    async fn sweep(&self) {
        if !self.leased("retention").await {
            return;
        }
        let redactor = self.config.redactor();
        let now = self.clock.now_ms();
        match sweep(
            self.store.as_ref(),
            &self.config.retention,
            &redactor,
            now,
            false,
        )
        .await
        {
            Ok(r) => {
                self.metrics.archived.inc_by(r.slimmed);
                self.metrics.tombstones_deleted.inc_by(r.tombstones_deleted);
            }
            Err(err) => {
                self.metrics.sweep_failures.inc();
                tracing::error!(error = %err, cause = ?std::error::Error::source(&err), "retention sweep failed");
            }
        }
        self.release("retention").await;
    }

    async fn recover(&self) {
        if !self.leased(RECOVERY_JOB).await {
            return;
        }
        let (ledger, config) = (&self.config.ledger, &self.config.recovery);
        let events = self.service_metrics.as_ref();
        if let Err(err) = recover(self.store.as_ref(), ledger, config, events).await {
            tracing::error!(error = %err, "recovery pass failed; retrying next interval");
        }
        self.release(RECOVERY_JOB).await;
    }

    async fn verify(&self) {
        if !self.leased("audit_verify").await {
            return;
        }
        let started = self.clock.now_ms();
        match verify(self.store.as_ref(), None).await {
            Ok(report) => {
                let record = Verification::of(&report, None, started, self.clock.now_ms());
                if !report.ok() {
                    tracing::error!(failures = report.failures, first = ?record.first_failure, "audit verification failed");
                }
                if let Err(err) = self.store.record_verification(&record).await {
                    tracing::warn!(error = %err, "cannot store the verification result");
                }
                self.metrics.observe_verification(&record);
            }
            Err(err) => tracing::error!(error = %err, "audit verification could not run"),
        }
        self.release("audit_verify").await;
    }
}
