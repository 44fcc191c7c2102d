//! The leaser: keeps up to `max_in_flight` effects leased, each target
//! within its own share, and hands each to a send as soon as its target
//! has a slot.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{Dispatcher, BATCH_GATHER, EXPIRY_EVERY};

/// The longest sleep of a leaser whose last lease took effects of a
/// rate-limited target.
const PACED_POLL: Duration = Duration::from_millis(50);
use crate::outbox::observe;
use crate::outbox::{ClusterLimits, Decision, TargetRoom};

impl Dispatcher {
    /// What each target with free share may lease now, up to `room` in
    /// all, starting with a different target each time.
    pub(super) fn rooms(&self, room: usize) -> Vec<TargetRoom> {
        let mut rooms: Vec<TargetRoom> = self
            .shares
            .iter()
            .filter_map(|(target, share)| {
                let free = share.free().min(room);
                let cluster = self
                    .targets
                    .get(target)
                    .map(|t| ClusterLimits::of(&t.config))
                    .unwrap_or_default();
                (free > 0).then(|| TargetRoom {
                    target: target.clone(),
                    limit: free as i64,
                    cluster,
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
    pub(super) async fn lease_loop(
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
            // A target paced by its rate leases again soon: its bucket
            // refills while this instance would otherwise sleep.
            let paced = leased.iter().any(|l| {
                self.targets
                    .get(&l.effect.new.target)
                    .is_some_and(|t| t.config.rate_per_second > 0)
            });
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
            // A lease short of its room (no backlog here) under a
            // cluster-wide concurrency may have been held back by effects
            // decided but not yet recorded (still `sending` in the database,
            // for every instance): lease again once a record frees them,
            // not at the idle poll.
            let held_back = want > 0 && rooms.iter().any(|r| r.cluster.concurrency > 0);
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = self.wake.notified() => {}
                () = self.freed.notified(), if capped => {}
                () = self.recorded.notified(), if held_back => {}
                () = tokio::time::sleep(self.idle_poll(paced)) => {}
            }
        }
    }

    /// How long the leaser sleeps with nothing more to lease: the idle
    /// poll, or at most `PACED_POLL` after leasing for a rate-limited
    /// target (whose next effects become leasable as its bucket refills).
    fn idle_poll(&self, paced: bool) -> Duration {
        let idle = Duration::from_millis(self.config.idle_poll_ms);
        if paced {
            idle.min(PACED_POLL)
        } else {
            idle
        }
    }

    pub(super) fn take_share(&self, target: &str) {
        if let Some(share) = self.shares.get(target) {
            share.taken.fetch_add(1, Ordering::AcqRel);
        }
    }

    pub(super) fn free_share(&self, target: &str) {
        if let Some(share) = self.shares.get(target) {
            share.taken.fetch_sub(1, Ordering::AcqRel);
        }
        self.freed.notify_one();
    }
}
