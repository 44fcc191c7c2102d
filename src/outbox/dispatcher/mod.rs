//! The dispatcher: leases due effects, sends each once with its key,
//! classifies the outcome, records it by compare-and-set, and never holds a
//! database transaction across the HTTP call.
//!
//! A step is typed: a leased effect is sent (or reconciled), the attempt
//! classified into an [`Outcome`], the outcome turned into a [`Verdict`]
//! by the retry budget, and the verdict recorded. [`Dispatcher::dispatch_once`]
//! runs one step over one batch, so tests drive it without sleeping.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tokio::sync::{mpsc, Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::dispatcher_config::DispatcherConfig;
use super::health::HealthView;
use super::killswitch::KillSwitch;
use super::observe;
use super::port::OutboxStore;
use super::sender::TargetRuntime;
use super::{ClusterLimits, TargetConfig, TargetRoom, Verdict};
use crate::clock::SharedClock;
use crate::ledger::storage::StoreError;
use crate::metrics::Metrics;

mod decide;
mod health;
mod lease;
mod record;

/// How often the leaser turns expired `sending` leases into `unknown`.
const EXPIRY_EVERY: Duration = Duration::from_secs(1);

/// Record transactions in flight at once: while they commit, the next
/// decisions gather into the next batch.
const RECORDERS: usize = 4;

/// How long the leaser, with a backlog, waits for room to fill a batch.
const BATCH_GATHER: Duration = Duration::from_millis(2);

/// The longest pause between retries of a failed record write.
const RECORD_RETRY_MAX: Duration = Duration::from_secs(2);

/// What one step did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StepReport {
    /// Effects leased.
    pub leased: usize,
    /// Requests made (sends and probes).
    pub sent: usize,
    /// Effects released unsent by the kill switch.
    pub held: usize,
    /// Verdicts whose lease was lost before recording.
    pub lost: usize,
}

/// A target's share of the effects in flight, and how much of it is taken.
#[derive(Debug)]
struct Share {
    /// Most of the target's effects leased and undecided at once.
    limit: usize,
    /// Leased and undecided now.
    taken: AtomicUsize,
}

impl Share {
    fn free(&self) -> usize {
        self.limit
            .saturating_sub(self.taken.load(Ordering::Acquire))
    }
}

/// Sends effects.
#[derive(Debug)]
pub struct Dispatcher {
    store: Arc<dyn OutboxStore>,
    targets: HashMap<String, Arc<TargetRuntime>>,
    /// Each target's share of `max_in_flight`, in proportion to its
    /// `concurrency`: a slow target's backlog fills only its own share.
    shares: HashMap<String, Share>,
    /// Most effects leased and undecided at once (`max_in_flight`).
    capacity: usize,
    /// Signalled whenever a leased effect is decided (its share freed).
    freed: Notify,
    /// Signalled whenever decisions are recorded: their effects leave
    /// `sending`, which frees room under a cluster-wide concurrency.
    recorded: Notify,
    /// Turns which target a lease serves first.
    turn: AtomicUsize,
    switch: KillSwitch,
    /// The targets' health as last read (the lease reads the table itself).
    health: HealthView,
    clock: SharedClock,
    metrics: Arc<Metrics>,
    config: DispatcherConfig,
    owner: String,
    wake: Arc<Notify>,
}

/// Most effects in flight: the configured value, or the sum of the
/// targets' send slots.
fn max_in_flight(config: &DispatcherConfig, targets: &[TargetConfig]) -> usize {
    let slots: usize = targets.iter().map(|t| t.concurrency as usize).sum();
    match config.max_in_flight {
        0 => slots.max(1),
        n => n,
    }
}

/// Each target's share of `capacity`, in proportion to its `concurrency`
/// (at least one).
fn shares(targets: &[TargetConfig], capacity: usize) -> HashMap<String, Share> {
    let slots: usize = targets
        .iter()
        .map(|t| t.concurrency as usize)
        .sum::<usize>()
        .max(1);
    targets
        .iter()
        .map(|t| {
            let limit = (capacity * t.concurrency as usize / slots).max(1);
            let share = Share {
                limit,
                taken: AtomicUsize::new(0),
            };
            (t.name.clone(), share)
        })
        .collect()
}

impl Dispatcher {
    /// Builds a dispatcher for the configured targets; `switch` is shared
    /// with the API so a change through it is seen at once.
    ///
    /// # Errors
    /// A target's HTTP client cannot be built.
    pub fn new(
        store: Arc<dyn OutboxStore>,
        targets: &[TargetConfig],
        config: DispatcherConfig,
        clock: SharedClock,
        metrics: Arc<Metrics>,
        wake: Arc<Notify>,
        switch: KillSwitch,
    ) -> Result<Self, reqwest::Error> {
        let capacity = max_in_flight(&config, targets);
        let shares = shares(targets, capacity);
        let targets = targets
            .iter()
            .map(|t| Ok((t.name.clone(), Arc::new(TargetRuntime::new(t.clone())?))))
            .collect::<Result<_, reqwest::Error>>()?;
        let owner = format!(
            "dispatcher-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        Ok(Self {
            switch,
            health: HealthView::new(store.clone()),
            store,
            targets,
            shares,
            capacity,
            freed: Notify::new(),
            recorded: Notify::new(),
            turn: AtomicUsize::new(0),
            clock,
            metrics,
            config,
            owner,
            wake,
        })
    }

    /// This dispatcher's lease owner name.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The kill-switch view (refresh it after a change).
    pub fn kill_switch(&self) -> &KillSwitch {
        &self.switch
    }

    /// Dispatches until `shutdown`, as a pipeline: the leaser keeps up to
    /// `max_in_flight` effects leased and not yet sent, each is sent as soon
    /// as its target has a slot, and the recorder writes the decisions that
    /// have come in (a bounded queue of them), a batch at a time. No send waits for another (a slow target holds
    /// up only its own effects), and the database sees one lease and one
    /// record transaction per batch. On `shutdown` it stops leasing, lets
    /// every send in flight finish and records it.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let capacity = self.capacity;
        tracing::info!(owner = %self.owner, max_in_flight = capacity, "dispatcher started");
        let room = Arc::new(Semaphore::new(capacity));
        let (done, decisions) = mpsc::channel(self.batch());
        let recorder = tokio::spawn(self.clone().record_loop(decisions));
        self.lease_loop(&room, &done, &shutdown).await;
        drop(done);
        let _ = recorder.await;
        tracing::info!(owner = %self.owner, "dispatcher stopped");
    }

    fn batch(&self) -> usize {
        self.config.batch_size.max(1) as usize
    }

    /// One step: expire dead leases, lease a batch, send it concurrently,
    /// then record every decision in one transaction.
    ///
    /// # Errors
    /// The store failed; effects already leased stay leased and expire to
    /// `unknown`, never back to `pending`.
    pub async fn dispatch_once(&self) -> Result<StepReport, StoreError> {
        let expired = self.store.expire_sending().await?;
        if expired > 0 {
            tracing::warn!(
                count = expired,
                "effects whose dispatcher died are now unknown"
            );
        }
        self.switch.refresh_if_due().await;
        let leased_at = Instant::now();
        let rooms: Vec<TargetRoom> = self
            .targets
            .iter()
            .map(|(target, runtime)| TargetRoom {
                target: target.clone(),
                limit: self.config.batch_size,
                cluster: ClusterLimits::of(&runtime.config),
            })
            .collect();
        let leased = self
            .store
            .lease_effects(
                &self.owner,
                self.config.lease_ms,
                self.config.batch_size,
                &rooms,
            )
            .await?;
        let mut report = StepReport {
            leased: leased.len(),
            ..StepReport::default()
        };
        if leased.is_empty() {
            return Ok(report);
        }
        let decisions = join_all(leased.into_iter().map(|l| {
            let span = observe::dispatch_span(&l);
            self.decide(l, leased_at).instrument(span)
        }))
        .await;
        report.sent = decisions.iter().filter(|d| d.attempt.is_some()).count();
        report.held = decisions
            .iter()
            .filter(|d| d.verdict == Verdict::Release)
            .count();
        self.record(&decisions, &mut report).await?;
        Ok(report)
    }
}
