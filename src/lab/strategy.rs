//! How each strategy handles one delivery, step by step.
//!
//! Every store statement and every call to the target is its own step, so
//! two deliveries of the same event interleave between them exactly as two
//! workflow executions would: (b) and (c) look the event up in one step and
//! write in a later one, which is the race; (d) to (g) claim in one step,
//! which is the atomic statement. Strategies (a) to (e) act inline, before
//! answering the provider; (f) and (g) only commit the effect to the outbox
//! and answer, and the dispatcher ([`super::outbox`]) sends it.

use super::ledger::ClaimMode;
use super::sim::{Task, World, CALL_TIMEOUT_MS, DB_MS, SLOW_TARGET_MS, TARGET_MS};
use super::target::{Exchange, Reply};
use super::{CrashPoint, Strategy};
use crate::ledger::{ClaimOutcome, Lease, Move};
use crate::outbox::classify::{classify, Outcome};
use crate::outbox::EffectSpec;

/// Where a delivery's handler is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pc {
    /// Received: the guard runs (lookup, claim) or, unguarded, the call.
    Begin,
    /// (c): insert the "seen" row found missing a step earlier.
    Insert,
    /// Call the target.
    Call,
    /// The target's answer (or its loss) is in.
    Answered,
    /// Record success: the "seen" flag, or the run's completion.
    Record,
    /// Undo after a failure: delete the flag or claim, or fail the run.
    Release,
}

/// One delivery being handled by the process (in memory: a crash loses it).
#[derive(Debug, Clone)]
pub(super) struct Delivery {
    pub(super) chain: usize,
    pub(super) attempt: u32,
    pub(super) event: usize,
    pub(super) done: bool,
    pc: Pc,
    reply: Option<Reply>,
    lease: Option<Lease>,
}

impl Delivery {
    pub(super) fn new(chain: usize, attempt: u32, event: usize) -> Self {
        Self {
            chain,
            attempt,
            event,
            done: false,
            pc: Pc::Begin,
            reply: None,
            lease: None,
        }
    }
}

impl World {
    /// Runs the next step of a delivery.
    ///
    /// # Errors
    /// A move the real ledger refused.
    pub(super) fn step(&mut self, id: usize) -> Result<(), String> {
        if self.deliveries[id].done {
            return Ok(());
        }
        let pc = self.deliveries[id].pc;
        let event = self.deliveries[id].event;
        match (self.strategy, pc) {
            (Strategy::Outbox | Strategy::Reconcile, _) => self.accept(id, event)?,
            (_, Pc::Call) | (Strategy::NoGuard, Pc::Begin) => self.call(id, event),
            (_, Pc::Answered) => self.answered(id, event)?,
            (Strategy::SeenAfter | Strategy::LookupInsert, Pc::Begin) => {
                if self.seen[event] {
                    self.respond(id, 200);
                } else if self.strategy == Strategy::SeenAfter {
                    self.goto(id, Pc::Call);
                } else {
                    self.goto(id, Pc::Insert);
                }
            }
            (_, Pc::Insert) => {
                self.seen[event] = true;
                self.goto(id, Pc::Call);
            }
            (Strategy::AtomicClaim | Strategy::Leases, Pc::Begin) => self.claim(id, event)?,
            (_, Pc::Record) => self.record(id, event)?,
            (_, Pc::Release) => self.release(id, event)?,
        }
        Ok(())
    }

    /// (d) and (e): the atomic claim decides who acts.
    fn claim(&mut self, id: usize, event: usize) -> Result<(), String> {
        let mode = if self.strategy == Strategy::AtomicClaim {
            ClaimMode::Once
        } else {
            ClaimMode::Leased
        };
        match self.ledger.claim(event, self.now, mode)? {
            ClaimOutcome::Claimed { lease, .. } => {
                self.deliveries[id].lease = Some(lease);
                self.goto(id, Pc::Call);
            }
            // Without states every existing claim looks done: answer 2xx.
            _ if mode == ClaimMode::Once => self.respond(id, 200),
            ClaimOutcome::Duplicate(_) | ClaimOutcome::Finished(_) | ClaimOutcome::Exhausted(_) => {
                self.respond(id, 200)
            }
            // Someone holds it: ask the provider to come back later.
            ClaimOutcome::InFlight(_) => self.respond(id, 409),
            ClaimOutcome::DuplicateOf(_) | ClaimOutcome::Conflict(_) => self.respond(id, 422),
        }
        Ok(())
    }

    /// Acts inline: the crash before the effect strikes here.
    fn call(&mut self, id: usize, event: usize) {
        if self.crash_due(event, CrashPoint::Before) {
            self.crash();
            return;
        }
        let exchange = self.call_target(event, false);
        let delivery = &mut self.deliveries[id];
        delivery.reply = Some(exchange.reply);
        delivery.pc = Pc::Answered;
        let at = exchange.after;
        self.at(
            at,
            Task::Step {
                delivery: id,
                epoch: self.epoch,
            },
        );
    }

    /// The target answered (or did not); the crash after the effect and
    /// before any record strikes here.
    fn answered(&mut self, id: usize, event: usize) -> Result<(), String> {
        let reply = self.deliveries[id].reply.take().unwrap_or(Reply::Lost);
        let outcome = classify(
            self.dispatcher.target_config(),
            &EffectSpec::default(),
            &reply.attempted(),
        );
        let ok = matches!(outcome, Outcome::Success { .. });
        if ok && self.crash_due(event, CrashPoint::After) {
            self.crash();
            return Ok(());
        }
        match (self.strategy, ok) {
            (Strategy::NoGuard, true) | (Strategy::LookupInsert | Strategy::AtomicClaim, true) => {
                self.respond(id, 200);
            }
            (Strategy::NoGuard | Strategy::SeenAfter, false) => self.respond(id, 500),
            (_, true) => self.goto(id, Pc::Record),
            (_, false) => self.goto(id, Pc::Release),
        }
        Ok(())
    }

    /// (b) writes its flag; (e) completes its run by compare-and-set.
    fn record(&mut self, id: usize, event: usize) -> Result<(), String> {
        if self.strategy == Strategy::SeenAfter {
            self.seen[event] = true;
            self.respond(id, 200);
            return Ok(());
        }
        let lease = self.deliveries[id]
            .lease
            .ok_or("no lease to complete with")?;
        let owned = self.ledger.finish(event, lease, Move::Complete, self.now)?;
        // A lost lease means another owner has the run now: not ours to ack.
        self.respond(id, if owned { 200 } else { 409 });
        Ok(())
    }

    /// After a failed call: (c) deletes its flag and (d) its claim, so a
    /// retry can act again; (e) fails its run as retryable.
    fn release(&mut self, id: usize, event: usize) -> Result<(), String> {
        match self.strategy {
            Strategy::LookupInsert => self.seen[event] = false,
            Strategy::AtomicClaim => self.ledger.release(event),
            _ => {
                let lease = self.deliveries[id].lease.ok_or("no lease to fail with")?;
                self.ledger
                    .finish(event, lease, Move::FailRetryable, self.now)?;
            }
        }
        self.respond(id, 500);
        Ok(())
    }

    /// (f) and (g): claim, move to `approved` and queue the effect in one
    /// transaction, then answer; nothing is sent from the handler.
    fn accept(&mut self, id: usize, event: usize) -> Result<(), String> {
        if let ClaimOutcome::Claimed { .. } = self.ledger.claim_and_approve(event, self.now)? {
            self.dispatcher.enqueue(event, self.now);
            self.wake_dispatcher();
        }
        // Claimed, or already accepted (the outbox finishes it, or a person has it).
        self.respond(id, 200);
        Ok(())
    }

    /// Sends a request for `event`'s effect; the target applies it when it
    /// finishes, whatever happens to the caller.
    pub(super) fn call_target(&mut self, event: usize, keyed: bool) -> Exchange {
        let work = if self.plans[event].slow {
            self.draw(SLOW_TARGET_MS)
        } else {
            self.draw(TARGET_MS)
        };
        let lose = self.plans[event].lose_first_answer && !self.marks[event].answer_lost;
        self.marks[event].answer_lost |= lose;
        let exchange = self
            .target
            .receive(event, keyed, work, lose, CALL_TIMEOUT_MS);
        if let Some((request, after)) = exchange.apply {
            self.at(after, Task::Apply { request });
        }
        if exchange.reply == Reply::Lost {
            self.marks[event].disrupted = true;
        }
        exchange
    }

    /// The next step after one database statement.
    fn goto(&mut self, id: usize, pc: Pc) {
        self.deliveries[id].pc = pc;
        let db = self.draw(DB_MS);
        self.at(
            db,
            Task::Step {
                delivery: id,
                epoch: self.epoch,
            },
        );
    }

    /// Answers the provider; the delivery is over.
    fn respond(&mut self, id: usize, status: u16) {
        let delivery = &mut self.deliveries[id];
        delivery.done = true;
        let (chain, attempt) = (delivery.chain, delivery.attempt);
        self.live.remove(&id);
        self.answer_provider(chain, attempt, (200..300).contains(&status));
    }
}
