//! The dispatcher's steps: expire and lease, send or probe, classify,
//! record by compare-and-set on the lease and move the run.

use super::{probe_verdict, send_verdict, Send, SendPc, BATCH, EFFECT_LEASE_MS};
use crate::lab::sim::{Task, World, DB_MS};
use crate::lab::target::Reply;
use crate::lab::CrashPoint;
use crate::ledger::Move;
use crate::outbox::classify::{classify, Outcome};
use crate::outbox::{EffectState, FailClass, Leased, Verdict};

/// A read by reference is quick.
const PROBE_MS: (i64, i64) = (20, 80);

impl World {
    /// One dispatcher step: expire dead leases, lease what is due, start
    /// each send, and plan the next step.
    pub(in crate::lab) fn tick(&mut self, generation: u64) -> Result<(), String> {
        if generation != self.dispatcher.generation {
            return Ok(()); // superseded by an earlier step
        }
        self.dispatcher.next_tick = None;
        self.dispatcher.expire(self.now);
        for send in self.lease_due() {
            let db = self.draw(DB_MS);
            let epoch = self.epoch;
            self.at(db, Task::Send { send, epoch });
        }
        self.schedule_tick();
        Ok(())
    }

    /// Leases the due effects and prepares a send (or probe) for each.
    fn lease_due(&mut self) -> Vec<usize> {
        let now = self.now;
        let owner = format!("lab-dispatcher-{}", self.epoch);
        let due = self.due_effects();
        let mut sends = Vec::with_capacity(due.len());
        for event in due {
            let run_version = self.ledger.version(event);
            let dispatcher = &mut self.dispatcher;
            let Some(row) = dispatcher.rows[event].as_mut() else {
                continue;
            };
            row.effect.state = EffectState::Sending;
            row.lease = Some((owner.clone(), now + EFFECT_LEASE_MS));
            let leased = Leased {
                effect: row.effect.clone(),
                owner: owner.clone(),
                run_version,
                correlation_id: format!("lab-{event}"),
                first_sent_at: row.effect.first_sent_at,
                probe: false,
            };
            // The real dispatcher's rule: reconcile an unknown outcome by a
            // probe unless the target honours keys (then resend the key).
            let probing =
                dispatcher.reconcile && leased.reconciling() && !dispatcher.config.honours_keys();
            sends.push(dispatcher.sends.len());
            dispatcher.sends.push(Send {
                event,
                leased,
                probing,
                started: now,
                pc: SendPc::Start,
                reply: None,
                decision: None,
                done: false,
            });
        }
        sends
    }

    /// Due effects of `approved` runs, unknown ones first and then by due
    /// time (the store's order), at most a batch.
    fn due_effects(&self) -> Vec<usize> {
        let now = self.now;
        let mut due: Vec<(u8, i64, usize)> = Vec::new();
        for &event in &self.dispatcher.active {
            let Some(row) = self.dispatcher.rows[event].as_ref() else {
                continue;
            };
            let order = match row.effect.state {
                EffectState::Unknown => 0,
                EffectState::Pending => 1,
                _ => continue,
            };
            if row.effect.next_attempt_at <= now && self.ledger.approved(event) {
                due.push((order, row.effect.next_attempt_at, event));
            }
        }
        due.sort_unstable();
        due.truncate(BATCH);
        due.into_iter().map(|(_, _, event)| event).collect()
    }

    /// Runs the next step of one send.
    pub(in crate::lab) fn send_step(&mut self, send: usize) -> Result<(), String> {
        if self.dispatcher.sends[send].done {
            return Ok(());
        }
        match self.dispatcher.sends[send].pc {
            SendPc::Start => self.send_start(send),
            SendPc::Answered => self.send_answered(send),
            SendPc::Record => self.send_record(send)?,
        }
        Ok(())
    }

    /// Sends with the effect's key, or probes; the crash before the
    /// effect strikes here.
    fn send_start(&mut self, send: usize) {
        let (event, probing) = {
            let s = &self.dispatcher.sends[send];
            (s.event, s.probing)
        };
        if !probing && self.crash_due(event, CrashPoint::Before) {
            self.crash();
            return;
        }
        let (reply, after) = if probing {
            let blind = self.plans[event].probe_blind;
            let reply = self.target.probe(event, blind);
            (reply, self.draw(PROBE_MS))
        } else {
            let exchange = self.call_target(event, true);
            (exchange.reply, exchange.after)
        };
        let s = &mut self.dispatcher.sends[send];
        s.reply = Some(reply);
        s.started = self.now;
        s.pc = SendPc::Answered;
        let epoch = self.epoch;
        self.at(after, Task::Send { send, epoch });
    }

    /// Classifies the answer and decides; the crash after the effect and
    /// before the record strikes here.
    fn send_answered(&mut self, send: usize) {
        let s = &mut self.dispatcher.sends[send];
        let reply = s.reply.take().unwrap_or(Reply::Lost);
        let (event, probing, started) = (s.event, s.probing, s.started);
        let leased = s.leased.clone();
        let decision = if probing {
            let (verdict, class) = probe_verdict(self, &leased, reply);
            (verdict, class, false)
        } else {
            let outcome = classify(
                &self.dispatcher.config,
                &leased.effect.new.spec,
                &reply.attempted(),
            );
            if matches!(outcome, Outcome::Success { .. })
                && self.crash_due(event, CrashPoint::After)
            {
                self.crash();
                return;
            }
            let class = outcome.class();
            (send_verdict(self, &leased, outcome, started), class, true)
        };
        let s = &mut self.dispatcher.sends[send];
        s.decision = Some(decision);
        s.pc = SendPc::Record;
        let (db, epoch) = (self.draw(DB_MS), self.epoch);
        self.at(db, Task::Send { send, epoch });
    }

    /// Records the verdict by compare-and-set on the lease, then moves the
    /// run when the verdict decides it.
    fn send_record(&mut self, send: usize) -> Result<(), String> {
        let s = &mut self.dispatcher.sends[send];
        s.done = true;
        let (verdict, class, sent) = s.decision.take().ok_or("no decision to record")?;
        let (event, started, owner) = (s.event, s.started, s.leased.owner.clone());
        let row = self.dispatcher.rows[event]
            .as_mut()
            .ok_or("the effect vanished")?;
        let owns = row.effect.state == EffectState::Sending
            && row.lease.as_ref().is_some_and(|(o, _)| *o == owner);
        if !owns {
            return Ok(()); // the lease was lost: nothing is written
        }
        row.effect.state = verdict.state().parse::<EffectState>()?;
        if sent {
            row.effect.attempts += 1;
            row.effect.first_sent_at.get_or_insert(started);
        }
        row.effect.last_class = Some(class);
        row.lease = None;
        let mv = match &verdict {
            Verdict::Retry { at } | Verdict::Unknown { at } => {
                row.effect.next_attempt_at = *at;
                None
            }
            Verdict::Completed { .. } => Some(Move::EffectsCompleted),
            Verdict::Failed {
                class: FailClass::Rejected,
                ..
            } => Some(Move::EffectRejected),
            Verdict::Failed { .. } => Some(Move::EffectsFailed),
            Verdict::Release | Verdict::Held { .. } => None,
        };
        if let Some(mv) = mv {
            self.ledger.settle(event, mv, self.now)?;
        }
        let approved = self.ledger.approved(event);
        self.dispatcher.retire_if_settled(event, approved);
        self.schedule_tick();
        Ok(())
    }
}
