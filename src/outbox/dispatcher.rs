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
use rand::SeedableRng;
use tokio::sync::{mpsc, Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::classify::{classify, AttemptClass, Attempted, Outcome};
use super::dispatcher_config::DispatcherConfig;
use super::killswitch::KillSwitch;
use super::observe;
use super::port::OutboxStore;
use super::sender::{evidence, TargetRuntime};
use super::verdict;
use super::{
    AttemptRecord, Decision, FailClass, Leased, Recorded, TargetConfig, TargetRoom, Verdict,
};
use crate::clock::SharedClock;
use crate::ledger::storage::StoreError;
use crate::metrics::Metrics;

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
    /// Turns which target a lease serves first.
    turn: AtomicUsize,
    switch: KillSwitch,
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
            store,
            targets,
            shares,
            capacity,
            freed: Notify::new(),
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

    /// What each target with free share may lease now, up to `room` in
    /// all, starting with a different target each time.
    fn rooms(&self, room: usize) -> Vec<TargetRoom> {
        let mut rooms: Vec<TargetRoom> = self
            .shares
            .iter()
            .filter_map(|(target, share)| {
                let free = share.free().min(room);
                (free > 0).then(|| TargetRoom {
                    target: target.clone(),
                    limit: free as i64,
                })
            })
            .collect();
        rooms.sort_by(|a, b| a.target.cmp(&b.target));
        if !rooms.is_empty() {
            let turn = self.turn.fetch_add(1, Ordering::Relaxed) % rooms.len();
            rooms.rotate_left(turn);
        }
        rooms
    }

    /// Leases while there is room and effects are due; sleeps until woken
    /// (a commit, the idle poll) otherwise. Each lease takes its room
    /// first, and each effect holds its share until its decision is queued
    /// for the recorder: a crash turns every leased effect `unknown`, and
    /// those not yet sent are few.
    async fn lease_loop(
        self: &Arc<Self>,
        room: &Arc<Semaphore>,
        done: &mpsc::Sender<Decision>,
        shutdown: &CancellationToken,
    ) {
        let half = (self.capacity / 2).clamp(1, self.batch()) as u32;
        let mut last_expiry: Option<Instant> = None;
        let mut backlog = false;
        while !shutdown.is_cancelled() {
            let mut taken = tokio::select! {
                () = shutdown.cancelled() => break,
                permit = room.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
            };
            // With a backlog, give the sends a moment to free more room,
            // so that leases come in batches while the rest sends.
            if backlog {
                let more = room
                    .clone()
                    .acquire_many_owned(half.saturating_sub(1).max(1));
                if let Ok(Ok(more)) = tokio::time::timeout(BATCH_GATHER, more).await {
                    taken.merge(more);
                }
            }
            let extra = room
                .available_permits()
                .min(self.batch().saturating_sub(taken.num_permits()));
            if let Ok(more) = room.clone().try_acquire_many_owned(extra as u32) {
                taken.merge(more);
            }
            if last_expiry.is_none_or(|at| at.elapsed() >= EXPIRY_EVERY) {
                last_expiry = Some(Instant::now());
                match self.store.expire_sending().await {
                    Ok(0) => {}
                    Ok(expired) => tracing::warn!(
                        count = expired,
                        "effects whose dispatcher died are now unknown"
                    ),
                    Err(err) => tracing::warn!(error = %err, "expiring dead leases failed"),
                }
            }
            self.switch.refresh_if_due().await;
            // Each target leases within its own share, so that a slow
            // target's backlog never takes the room another target's
            // effects need.
            let rooms = self.rooms(taken.num_permits());
            let want = rooms
                .iter()
                .map(|r| r.limit)
                .sum::<i64>()
                .min(taken.num_permits() as i64);
            let leased_at = Instant::now();
            let leased = if want == 0 {
                Vec::new()
            } else {
                match self
                    .store
                    .lease_effects(&self.owner, self.config.lease_ms, want, &rooms)
                    .await
                {
                    Ok(leased) => leased,
                    Err(err) => {
                        tracing::warn!(error = %err, "leasing effects failed; retrying");
                        Vec::new()
                    }
                }
            };
            backlog = want > 0 && leased.len() as i64 >= want;
            for l in leased {
                // A lease returns at most the room it was given; should it
                // ever return more, the rest waits for room of its own.
                let share = match taken.split(1) {
                    Some(share) => share,
                    None => match room.clone().acquire_owned().await {
                        Ok(share) => share,
                        Err(_) => return,
                    },
                };
                self.take_share(&l.effect.new.target);
                let this = self.clone();
                let done = done.clone();
                let span = observe::dispatch_span(&l);
                tokio::spawn(
                    async move {
                        let target = l.effect.new.target.clone();
                        let decision = this.decide(l, leased_at).await;
                        // Closed only once the recorder is gone (shutdown
                        // waits for it), and then the lease expires.
                        let _ = done.send(decision).await;
                        drop(share);
                        this.free_share(&target);
                    }
                    .instrument(span),
                );
            }
            drop(taken);
            if backlog {
                continue;
            }
            // A target at its share leases again as soon as one of its
            // effects is decided.
            let capped = self.shares.values().any(|s| s.free() == 0);
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = self.wake.notified() => {}
                () = self.freed.notified(), if capped => {}
                () = tokio::time::sleep(Duration::from_millis(self.config.idle_poll_ms)) => {}
            }
        }
    }

    fn take_share(&self, target: &str) {
        if let Some(share) = self.shares.get(target) {
            share.taken.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn free_share(&self, target: &str) {
        if let Some(share) = self.shares.get(target) {
            share.taken.fetch_sub(1, Ordering::AcqRel);
        }
        self.freed.notify_one();
    }

    /// Records decisions as they come, all that are waiting at once (up to
    /// `batch_size`), in up to `RECORDERS` transactions at a time, until
    /// every sender is done. A failed write is retried a few times (the
    /// effects stay leased meanwhile); if it never succeeds their leases
    /// expire to `unknown`, never back to `pending`.
    async fn record_loop(self: Arc<Self>, mut decisions: mpsc::Receiver<Decision>) {
        let slots = Arc::new(Semaphore::new(RECORDERS));
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let mut batch = Vec::with_capacity(self.batch());
            if decisions.recv_many(&mut batch, self.batch()).await == 0 {
                break;
            }
            let this = self.clone();
            tokio::spawn(async move {
                this.record_with_retries(&batch).await;
                drop(slot);
            });
        }
        // Every record in flight finishes before the dispatcher stops.
        let _ = slots.acquire_many(RECORDERS as u32).await;
    }

    async fn record_with_retries(&self, decided: &[Decision]) {
        let mut delay = Duration::from_millis(100);
        while let Err(err) = self.record(decided, &mut StepReport::default()).await {
            if delay > RECORD_RETRY_MAX {
                tracing::error!(error = %err, count = decided.len(), "recording dispatch outcomes failed; their leases will expire to unknown");
                return;
            }
            tracing::warn!(error = %err, retry_in_ms = delay.as_millis() as u64, "recording dispatch outcomes failed");
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
    }

    /// Records decisions in one transaction and counts what happened.
    async fn record(
        &self,
        decisions: &[Decision],
        report: &mut StepReport,
    ) -> Result<(), StoreError> {
        if decisions.iter().any(|d| d.attempt.is_some()) {
            // Sent and answered, not yet recorded (the chaos tests die here).
            crate::chaos::point("after_send_before_record");
        }
        for outcome in &self.store.record_decisions(decisions).await? {
            match outcome {
                Recorded::Lost => report.lost += 1,
                Recorded::Written { ended: Some(run) } => self.metrics.run_moved(run),
                Recorded::Written { ended: None } => {}
            }
        }
        if report.lost > 0 {
            tracing::warn!(
                count = report.lost,
                "leases lost before their outcome was recorded"
            );
        }
        Ok(())
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
            .keys()
            .map(|target| TargetRoom {
                target: target.clone(),
                limit: self.config.batch_size,
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

    /// Sends (or reconciles, or holds) one leased effect and decides what
    /// to record. Touches the network, never the database.
    async fn decide(&self, leased: Leased, leased_at: Instant) -> Decision {
        let hold = |leased: Leased| Decision {
            leased,
            verdict: Verdict::Release,
            attempt: None,
        };
        let Some(target) = self.targets.get(&leased.effect.new.target).cloned() else {
            let reason = format!("target {:?} is not configured", leased.effect.new.target);
            let verdict = Verdict::Failed {
                class: FailClass::Permanent,
                reason,
            };
            return Decision {
                leased,
                verdict,
                attempt: None,
            };
        };
        let _slot = target.slots.acquire().await;
        target.pace().await;
        // A lease half spent waiting for a slot goes back unsent rather
        // than risk expiring mid-send (which would make it unknown).
        if leased_at.elapsed() > Duration::from_millis(self.config.lease_ms as u64 / 2) {
            return hold(leased);
        }
        // Re-checked right before the send, from a value at most 2 s old.
        if !self.switch.allows(&target.config.name).await {
            return hold(leased);
        }
        let probing = leased.reconciling() && !target.config.honours_keys();
        let started = self.clock.now_ms();
        let attempted = if probing {
            match probe_url(&leased) {
                Some(url) => target.probe(&url).await,
                None => {
                    let verdict = verdict::undecidable(
                        "no probe is configured and the target does not honour keys",
                    );
                    return Decision {
                        leased,
                        verdict,
                        attempt: None,
                    };
                }
            }
        } else {
            target.send(&leased).await
        };
        let finished = self.clock.now_ms();
        let (verdict, class) = if probing {
            self.probe_verdict(&target.config, &leased, &attempted, finished)
        } else {
            let outcome = classify(&target.config, &leased.effect.new.spec, &attempted);
            let class = outcome.class();
            (
                self.verdict(&target.config, &leased, outcome, started, finished),
                class,
            )
        };
        observe::count(&self.metrics, &target.config.name, class.as_str(), &verdict);
        let attempt = AttemptRecord {
            started_at: started,
            finished_at: finished,
            class,
            status: match &attempted {
                Attempted::Answered { status, .. } => Some(i64::from(status.as_u16())),
                _ => None,
            },
            error: match &attempted {
                Attempted::NotSent(e) | Attempted::LostAfterSend(e) => Some(e.clone()),
                Attempted::Answered { .. } => None,
            },
            evidence: evidence(&attempted),
            sent: !probing && !matches!(attempted, Attempted::NotSent(_)),
        };
        Decision {
            leased,
            verdict,
            attempt: Some(attempt),
        }
    }

    /// The verdict for a sent attempt's outcome, within the retry budget
    /// ([`verdict::for_attempt`]).
    fn verdict(
        &self,
        target: &TargetConfig,
        leased: &Leased,
        outcome: Outcome,
        started: i64,
        now: i64,
    ) -> Verdict {
        let mut rng = rand::rngs::StdRng::from_entropy();
        let decided = verdict::for_attempt(target, leased, outcome, started, now, true, &mut rng);
        if decided.near_budget {
            self.metrics.retry_near_budget(&target.name);
        }
        decided.verdict
    }

    /// The verdict of a reconciliation probe ([`verdict::for_probe`]).
    fn probe_verdict(
        &self,
        target: &TargetConfig,
        leased: &Leased,
        attempted: &Attempted,
        now: i64,
    ) -> (Verdict, AttemptClass) {
        let status = match attempted {
            Attempted::Answered { status, .. } => Some(status.as_u16()),
            _ => None,
        };
        let mut rng = rand::rngs::StdRng::from_entropy();
        verdict::for_probe(target, leased, status, now, &mut rng)
    }
}

/// The probe URL with `{external_ref}` and `{idempotency_key}` filled in
/// (percent-encoded).
fn probe_url(leased: &Leased) -> Option<String> {
    let template = leased.effect.new.spec.probe_url.as_deref()?;
    let encode = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    Some(
        template
            .replace(
                "{idempotency_key}",
                &encode(&leased.effect.new.idempotency_key),
            )
            .replace(
                "{external_ref}",
                &encode(leased.effect.external_ref.as_deref().unwrap_or("")),
            ),
    )
}
