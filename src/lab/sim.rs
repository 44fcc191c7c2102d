//! The world one strategy lives in while one fault is injected: a
//! simulated clock, a queue of timed tasks, one service process that can
//! crash, its durable store, the provider and the downstream target.
//!
//! Each task is one step of one actor (a delivery being handled, the
//! provider waiting for an answer, the target applying an effect, the
//! dispatcher leasing or sending). Steps of different actors interleave in
//! time order, ties broken by scheduling order, so concurrency is real:
//! whatever another delivery did between two of my steps is what my next
//! step sees. A crash bumps the process epoch: every task of the old epoch
//! is dropped (in-memory work is gone) while the store, the provider and
//! the target carry on.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::fault::{Chain, EventPlan};
use super::ledger::SimLedger;
use super::outbox::Dispatcher;
use super::strategy::Delivery;
use super::target::Target;
use super::{Downstream, Strategy, Tally};
use crate::clock::Millis;
use crate::ledger::RunState;

/// One hop on the network between provider, service and target.
pub(super) const NET_MS: (i64, i64) = (1, 3);
/// One database statement.
pub(super) const DB_MS: (i64, i64) = (1, 4);
/// The target's usual time to apply an effect and answer.
pub(super) const TARGET_MS: (i64, i64) = (40, 250);
/// The target's time per call during a storm.
pub(super) const SLOW_TARGET_MS: (i64, i64) = (1_000, 6_000);
/// The caller's timeout for a call to the target.
pub(super) const CALL_TIMEOUT_MS: i64 = 10_000;
/// How long the provider waits for an acknowledgement.
pub(super) const ACK_TIMEOUT_MS: i64 = 10_000;
/// The provider's waits before each redelivery (8 attempts over ~21 h).
pub(super) const REDELIVERY_MS: [i64; 7] = [
    10_000, 60_000, 300_000, 1_800_000, 7_200_000, 21_600_000, 43_200_000,
];
/// How long a crashed process stays down.
pub(super) const RESTART_MS: i64 = 1_000;
/// Mean time between two events' first deliveries.
pub(super) const ARRIVAL_MEAN_MS: f64 = 1_000.0;
/// Nothing is simulated past this (a week).
const HORIZON_MS: Millis = 7 * 24 * 3_600_000;
/// A runaway guard: no cell needs anywhere near this many steps per event.
const MAX_STEPS_PER_EVENT: u64 = 2_000;

/// A timed step of one actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Task {
    /// The provider sends the next attempt of a delivery chain.
    Arrive { chain: usize },
    /// The provider stops waiting for an attempt's answer.
    AckTimeout { chain: usize, attempt: u32 },
    /// An attempt's answer reaches the provider.
    Ack {
        chain: usize,
        attempt: u32,
        ok: bool,
    },
    /// The next step of a delivery being handled.
    Step { delivery: usize, epoch: u32 },
    /// The target finishes a request and applies its effect.
    Apply { request: usize },
    /// The crashed process is back.
    Restart,
    /// The dispatcher expires and leases effects.
    Tick { epoch: u32, generation: u64 },
    /// The next step of one dispatcher send.
    Send { send: usize, epoch: u32 },
}

/// Per-event bookkeeping that no actor can see.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Marks {
    /// Its first attempt was disrupted (crash, timeout, refused delivery).
    pub(super) disrupted: bool,
    /// The planned crash has fired.
    pub(super) crashed: bool,
    /// The planned lost answer has been lost.
    pub(super) answer_lost: bool,
}

/// The simulated world of one cell.
#[derive(Debug)]
pub(super) struct World {
    pub(super) now: Millis,
    seq: u64,
    queue: BinaryHeap<Reverse<(Millis, u64, Task)>>,
    pub(super) rng: ChaCha8Rng,
    pub(super) strategy: Strategy,
    pub(super) plans: Vec<EventPlan>,
    pub(super) marks: Vec<Marks>,
    pub(super) chains: Vec<Chain>,
    pub(super) deliveries: Vec<Delivery>,
    /// Deliveries being handled by the current process.
    pub(super) live: BTreeSet<usize>,
    /// The process incarnation; bumped by every crash.
    pub(super) epoch: u32,
    pub(super) up: bool,
    /// Durable: the "seen" flags of strategies (b) and (c).
    pub(super) seen: Vec<bool>,
    /// Durable: the runs of strategies (d) to (g).
    pub(super) ledger: SimLedger,
    /// Durable outbox rows and the in-memory dispatcher of (f) and (g).
    pub(super) dispatcher: Dispatcher,
    pub(super) target: Target,
    pub(super) delivery_count: u64,
}

impl World {
    /// A world for one cell; `plans` fixes when each event arrives and how
    /// the fault hits it, `seed` every latency.
    pub(super) fn new(
        strategy: Strategy,
        downstream: Downstream,
        plans: Vec<EventPlan>,
        seed: u64,
    ) -> Self {
        let events = plans.len();
        let mut world = Self {
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            strategy,
            marks: vec![Marks::default(); events],
            chains: Vec::new(),
            deliveries: Vec::new(),
            live: BTreeSet::new(),
            epoch: 0,
            up: true,
            seen: vec![false; events],
            ledger: SimLedger::new(events),
            dispatcher: Dispatcher::new(events, strategy, downstream),
            target: Target::new(events, downstream == Downstream::KeyHonoured),
            delivery_count: 0,
            plans,
        };
        world.start_chains();
        world
    }

    /// Schedules `task` to run `after` milliseconds from now.
    pub(super) fn at(&mut self, after: Millis, task: Task) {
        self.seq += 1;
        self.queue
            .push(Reverse((self.now + after.max(0), self.seq, task)));
    }

    /// The provider hears the delivery's answer (`ok`, or not) one network
    /// delay from now.
    pub(super) fn answer_provider(&mut self, chain: usize, attempt: u32, ok: bool) {
        let net = self.draw(NET_MS);
        self.at(net, Task::Ack { chain, attempt, ok });
    }

    /// A uniform draw from an inclusive range of milliseconds.
    pub(super) fn draw(&mut self, (low, high): (i64, i64)) -> Millis {
        self.rng.gen_range(low..=high)
    }

    /// Runs until nothing is left to happen, then counts.
    ///
    /// # Errors
    /// A move the real ledger refused, or a runaway simulation.
    pub(super) fn run(mut self) -> Result<Tally, String> {
        let mut steps = 0u64;
        let max_steps = MAX_STEPS_PER_EVENT * self.plans.len() as u64 + 100_000;
        while let Some(Reverse((time, _, task))) = self.queue.pop() {
            if time > HORIZON_MS {
                break;
            }
            steps += 1;
            if steps > max_steps {
                return Err(format!("still busy after {max_steps} steps"));
            }
            self.now = time;
            self.handle(task)?;
        }
        Ok(self.tally())
    }

    fn handle(&mut self, task: Task) -> Result<(), String> {
        match task {
            Task::Arrive { chain } => self.arrive(chain),
            Task::AckTimeout { chain, attempt } => self.ack_timeout(chain, attempt),
            Task::Ack { chain, attempt, ok } => self.ack(chain, attempt, ok),
            Task::Step { delivery, epoch } if epoch == self.epoch => self.step(delivery)?,
            Task::Apply { request } => self.target.apply(request),
            Task::Restart => self.restart(),
            Task::Tick { epoch, generation } if epoch == self.epoch => {
                self.tick(generation)?;
            }
            Task::Send { send, epoch } if epoch == self.epoch => self.send_step(send)?,
            // A step of a process incarnation that crashed: its memory is gone.
            Task::Step { .. } | Task::Tick { .. } | Task::Send { .. } => {}
        }
        Ok(())
    }

    /// The process dies: in-memory work is lost, connections reset.
    pub(super) fn crash(&mut self) {
        self.epoch += 1;
        self.up = false;
        for id in std::mem::take(&mut self.live) {
            let delivery = &mut self.deliveries[id];
            delivery.done = true;
            let (chain, attempt, event) = (delivery.chain, delivery.attempt, delivery.event);
            self.marks[event].disrupted = true;
            // The provider sees its connection reset.
            self.answer_provider(chain, attempt, false);
        }
        for event in self.dispatcher.crash() {
            self.marks[event].disrupted = true;
        }
        self.at(RESTART_MS, Task::Restart);
    }

    fn restart(&mut self) {
        self.up = true;
        if self.dispatcher.enabled() {
            // A fresh dispatcher looks for work it owes, expired leases included.
            self.schedule_tick();
        }
    }

    /// Whether a planned crash at this point fires now (once per event).
    pub(super) fn crash_due(&mut self, event: usize, point: super::CrashPoint) -> bool {
        let due = self.plans[event].crash == Some(point) && !self.marks[event].crashed;
        if due {
            self.marks[event].crashed = true;
        }
        due
    }

    /// The counts over every event, once the world is quiet.
    fn tally(&self) -> Tally {
        let mut tally = Tally {
            deliveries: self.delivery_count,
            target_requests: self.target.requests,
            ..Tally::default()
        };
        for (event, plan) in self.plans.iter().enumerate() {
            let applied = u64::from(self.target.applied(event));
            let waiting = self.waiting_for_human(event);
            tally.hit += u64::from(plan.hit);
            tally.duplicates += applied.saturating_sub(1);
            let lost = applied == 0 && !waiting;
            tally.lost += u64::from(lost);
            tally.waiting_for_human += u64::from(waiting);
            tally.recovered += u64::from(self.marks[event].disrupted && applied == 1 && !waiting);
            tally.operator_actions += u64::from(applied > 1 || lost || waiting);
        }
        tally
    }

    /// A run that did not finish is shown to a person: dead-lettered,
    /// awaiting a decision, or left in flight where the stale-run alert
    /// names it. Strategies without states have nothing to show.
    fn waiting_for_human(&self, event: usize) -> bool {
        if self.strategy < Strategy::Leases {
            return false;
        }
        match self.ledger.state(event) {
            Some(RunState::Completed | RunState::FailedTerminal) | None => false,
            Some(
                RunState::Processing
                | RunState::AwaitingHuman
                | RunState::Approved
                | RunState::FailedRetryable
                | RunState::DeadLettered,
            ) => true,
        }
    }
}
