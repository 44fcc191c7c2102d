//! Fault plans and the provider.
//!
//! A plan fixes, per event and before any strategy runs, when it first
//! arrives, how many copies the provider sends, and how the fault hits it,
//! so every strategy faces exactly the same events. The provider then
//! behaves like a real webhook sender: each copy is a delivery chain that
//! waits up to 10 s for a 2xx and otherwise redelivers on a fixed schedule
//! (connection refused, a reset, a timeout or a non-2xx answer all count as
//! failure), giving up after eight attempts.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::sim::{Task, World, ACK_TIMEOUT_MS, ARRIVAL_MEAN_MS, NET_MS, REDELIVERY_MS};
use super::strategy::Delivery;
use super::{CrashPoint, Fault};
use crate::clock::Millis;

/// How one event is delivered and how the fault hits it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct EventPlan {
    /// The fault is injected into this event.
    pub(super) hit: bool,
    /// When each copy's first attempt starts.
    pub(super) copies: Vec<Millis>,
    /// Lose the first 2xx acknowledgement.
    pub(super) lose_first_ack: bool,
    /// Crash the process at this point of the first attempt.
    pub(super) crash: Option<CrashPoint>,
    /// The target commits the first request, then its answer is lost.
    pub(super) lose_first_answer: bool,
    /// The target is slow for this event.
    pub(super) slow: bool,
    /// No probe can find this event's effect at the target (its search
    /// lags or it keeps no reference): reconciliation cannot decide.
    pub(super) probe_blind: bool,
}

/// Share of hit events whose effect no probe can find.
const PROBE_BLIND_RATE: f64 = 0.05;

/// The plan of every event for one fault: the same for every strategy.
pub(super) fn plan(fault: Fault, events: usize, rate: f64, seed: u64) -> Vec<EventPlan> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x1AB0_0000 ^ fault.index() as u64);
    let mut clock = 0.0f64;
    (0..events)
        .map(|_| {
            // Exponential gaps: a Poisson stream of events.
            clock += -ARRIVAL_MEAN_MS * (1.0 - rng.gen::<f64>()).ln();
            let first = clock as Millis;
            let hit = rng.gen_bool(rate);
            let probe_blind = rng.gen_bool(PROBE_BLIND_RATE);
            let copies = match fault {
                Fault::Concurrent if hit => spread(&mut rng, first, 2..=4, 5),
                Fault::Storm if hit => spread(&mut rng, first, 5..=12, 3_000),
                _ => vec![first],
            };
            EventPlan {
                hit,
                copies,
                lose_first_ack: hit && fault == Fault::LostAck,
                crash: match fault {
                    Fault::Crash(point) if hit => Some(point),
                    _ => None,
                },
                lose_first_answer: hit && fault == Fault::Timeout,
                slow: hit && fault == Fault::Storm,
                probe_blind: hit && probe_blind,
            }
        })
        .collect()
}

/// `count` copies: the first at `first`, the others within `window` ms.
fn spread(
    rng: &mut ChaCha8Rng,
    first: Millis,
    count: std::ops::RangeInclusive<usize>,
    window: Millis,
) -> Vec<Millis> {
    let n = rng.gen_range(count);
    let mut copies: Vec<Millis> = (0..n)
        .map(|i| {
            if i == 0 {
                first
            } else {
                first + rng.gen_range(0..=window)
            }
        })
        .collect();
    copies.sort_unstable();
    copies
}

/// One copy of an event as the provider sends it, with its retries.
#[derive(Debug, Clone)]
pub(super) struct Chain {
    pub(super) event: usize,
    /// Attempts made so far; the current one's number.
    pub(super) attempt: u32,
    /// The current attempt has its answer (or timed out).
    pub(super) settled: bool,
    /// The provider got its 2xx and stopped.
    pub(super) done: bool,
    /// This chain loses its first 2xx.
    pub(super) lose_ack: bool,
}

impl World {
    /// Schedules the first attempt of every copy of every event.
    pub(super) fn start_chains(&mut self) {
        for event in 0..self.plans.len() {
            let copies = self.plans[event].copies.clone();
            for (i, start) in copies.into_iter().enumerate() {
                let chain = self.chains.len();
                self.chains.push(Chain {
                    event,
                    attempt: 0,
                    settled: true,
                    done: false,
                    lose_ack: i == 0 && self.plans[event].lose_first_ack,
                });
                self.at(start, Task::Arrive { chain });
            }
        }
    }

    /// The provider sends an attempt; a process that is down refuses it.
    pub(super) fn arrive(&mut self, chain: usize) {
        self.delivery_count += 1;
        let c = &mut self.chains[chain];
        c.attempt += 1;
        c.settled = false;
        let (event, attempt) = (c.event, c.attempt);
        if !self.up {
            self.marks[event].disrupted = true;
            self.chains[chain].settled = true;
            self.redeliver(chain);
            return;
        }
        self.at(ACK_TIMEOUT_MS, Task::AckTimeout { chain, attempt });
        let id = self.deliveries.len();
        self.deliveries.push(Delivery::new(chain, attempt, event));
        self.live.insert(id);
        let net = self.draw(NET_MS);
        self.at(
            net,
            Task::Step {
                delivery: id,
                epoch: self.epoch,
            },
        );
    }

    /// The handler's answer reaches the provider.
    pub(super) fn ack(&mut self, chain: usize, attempt: u32, ok: bool) {
        let c = &mut self.chains[chain];
        if c.attempt != attempt || c.settled {
            return; // it already timed out: a late answer changes nothing
        }
        c.settled = true;
        if ok && c.lose_ack {
            c.lose_ack = false;
        } else if ok {
            c.done = true;
            return;
        }
        self.redeliver(chain);
    }

    /// The provider stops waiting.
    pub(super) fn ack_timeout(&mut self, chain: usize, attempt: u32) {
        let c = &mut self.chains[chain];
        if c.attempt == attempt && !c.settled {
            c.settled = true;
            self.redeliver(chain);
        }
    }

    fn redeliver(&mut self, chain: usize) {
        let attempt = self.chains[chain].attempt as usize;
        if let Some(wait) = REDELIVERY_MS.get(attempt - 1) {
            self.at(*wait, Task::Arrive { chain });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_seeded_and_hit_about_the_rate() {
        let a = plan(Fault::Concurrent, 2_000, 0.2, 9);
        assert_eq!(a, plan(Fault::Concurrent, 2_000, 0.2, 9));
        assert_ne!(a, plan(Fault::Concurrent, 2_000, 0.2, 10));
        let hit = a.iter().filter(|p| p.hit).count();
        assert!((300..500).contains(&hit), "{hit} of 2000");
        for p in &a {
            let n = p.copies.len();
            assert!(if p.hit { (2..=4).contains(&n) } else { n == 1 });
            assert!(p.copies.last().unwrap() - p.copies[0] <= 5);
        }
    }

    #[test]
    fn each_fault_sets_only_its_own_switch() {
        let crash = plan(Fault::Crash(CrashPoint::After), 500, 0.5, 1);
        assert!(crash.iter().any(|p| p.crash == Some(CrashPoint::After)));
        assert!(crash
            .iter()
            .all(|p| !p.lose_first_ack && !p.slow && !p.lose_first_answer));
        let storm = plan(Fault::Storm, 500, 0.5, 1);
        assert!(storm
            .iter()
            .filter(|p| p.hit)
            .all(|p| p.slow && p.copies.len() >= 5));
        assert!(plan(Fault::LostAck, 10, 1.0, 1)
            .iter()
            .all(|p| p.lose_first_ack && p.copies.len() == 1));
    }
}
