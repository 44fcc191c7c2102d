//! The outbox of strategies (f) and (g) and the dispatcher that sends it.
//!
//! Rows are real [`Effect`]s; a leased one is a real [`Leased`], whose
//! [`Leased::reconciling`] decides whether (g) probes instead of sending.
//! Every answer is classified by the dispatcher's own
//! [`classify`](crate::outbox::classify::classify), decided by its own
//! policy ([`verdict`]: retries within budget, reconciliation, failure),
//! and the verdict's effect state comes from [`Verdict::state`]. (g) is
//! the dispatcher exactly; (f) is the same outbox without reconciliation:
//! an unknown outcome or a dead dispatcher's lease is simply sent again.

use std::collections::{BTreeMap, BTreeSet};

use super::sim::{World, DB_MS};
use super::target::Reply;
use super::{Downstream, Strategy};
use crate::clock::Millis;
use crate::outbox::classify::{AttemptClass, Outcome};
use crate::outbox::verdict;
use crate::outbox::{
    default_idempotency_key, Effect, EffectSpec, EffectState, Leased, NewEffect, RetryBudget,
    TargetConfig, TargetKind, Verdict,
};

mod step;

/// How long a dispatcher's lease on a `sending` effect lasts.
pub(super) const EFFECT_LEASE_MS: i64 = 60_000;
/// The longest the dispatcher idles between steps.
pub(super) const POLL_MS: i64 = 250;
/// Effects leased per step.
const BATCH: usize = 64;

/// The target's retry budget in the lab.
fn budget() -> RetryBudget {
    RetryBudget {
        max_attempts: 5,
        base_ms: 500,
        cap_ms: 30_000,
        max_elapsed_ms: 600_000,
    }
}

/// An outbox row: the effect, and the dispatcher lease on it.
#[derive(Debug)]
struct Row {
    effect: Effect,
    lease: Option<(String, Millis)>,
}

/// Where one send is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendPc {
    Start,
    Answered,
    Record,
}

/// One leased effect being sent or probed (in memory).
#[derive(Debug)]
struct Send {
    event: usize,
    leased: Leased,
    probing: bool,
    started: Millis,
    pc: SendPc,
    reply: Option<Reply>,
    decision: Option<(Verdict, AttemptClass, bool)>,
    done: bool,
}

/// The durable outbox and the in-memory dispatcher of one process.
#[derive(Debug)]
pub(super) struct Dispatcher {
    enabled: bool,
    reconcile: bool,
    config: TargetConfig,
    rows: Vec<Option<Row>>,
    /// Events whose effect is still in play (pending, sending, or unknown
    /// under an `approved` run): the only rows a step needs to look at.
    active: BTreeSet<usize>,
    sends: Vec<Send>,
    generation: u64,
    next_tick: Option<Millis>,
}

impl Dispatcher {
    pub(super) fn new(events: usize, strategy: Strategy, downstream: Downstream) -> Self {
        Self {
            enabled: strategy >= Strategy::Outbox,
            reconcile: strategy == Strategy::Reconcile,
            config: TargetConfig {
                name: "downstream".into(),
                base_url: "http://downstream.lab.invalid/".into(),
                kind: TargetKind::Http,
                honours_idempotency_keys: Some(downstream == Downstream::KeyHonoured),
                idempotency_header: "Idempotency-Key".into(),
                secret_headers: BTreeMap::new(),
                signing_secrets: Vec::new(),
                connect_timeout_ms: 2_000,
                timeout_ms: super::sim::CALL_TIMEOUT_MS as u64,
                status_classes: BTreeMap::new(),
                retry: budget(),
                rate_per_second: 0,
                concurrency: BATCH as u32,
                health: crate::outbox::health::HealthConfig::default(),
            },
            rows: (0..events).map(|_| None).collect(),
            active: BTreeSet::new(),
            sends: Vec::new(),
            generation: 0,
            next_tick: None,
        }
    }

    /// The target as the dispatcher's classifier sees it.
    pub(super) fn target_config(&self) -> &TargetConfig {
        &self.config
    }

    /// Whether this strategy has an outbox at all.
    pub(super) fn enabled(&self) -> bool {
        self.enabled
    }

    /// Inserts the event's effect (inside the accepting transaction).
    pub(super) fn enqueue(&mut self, event: usize, now: Millis) {
        let key = format!("evt_{event}");
        let probe = self
            .reconcile
            .then(|| "http://downstream.lab.invalid/effects?key={idempotency_key}".to_owned());
        let new = NewEffect {
            operation: "forward".into(),
            effect_type: "forward".into(),
            target: self.config.name.clone(),
            method: "POST".into(),
            url: "http://downstream.lab.invalid/effects".into(),
            headers: BTreeMap::new(),
            body: None,
            idempotency_key: default_idempotency_key("lab", &key, "forward"),
            spec: EffectSpec {
                probe_url: probe,
                ..EffectSpec::default()
            },
            not_before: None,
            role: crate::outbox::EffectRole::Act,
            schema_version: None,
        };
        self.rows[event] = Some(Row {
            effect: Effect {
                id: format!("eff_{event}"),
                namespace: "lab".into(),
                key,
                new,
                state: EffectState::Pending,
                attempts: 0,
                next_attempt_at: now,
                external_ref: None,
                last_status: None,
                last_class: None,
                last_error: None,
                first_sent_at: None,
                created_at: now,
            },
            lease: None,
        });
        self.active.insert(event);
    }

    /// The process died: sends in flight are forgotten (their rows stay
    /// `sending` until the lease expires). Returns their events.
    pub(super) fn crash(&mut self) -> Vec<usize> {
        self.next_tick = None;
        self.sends
            .iter_mut()
            .filter(|s| !s.done)
            .map(|s| {
                s.done = true;
                s.event
            })
            .collect()
    }

    /// A dead dispatcher's lease ran out. The real store marks the effect
    /// `unknown` (class `lost`) to be reconciled; without reconciliation
    /// (f) it simply goes back to `pending` and is sent again.
    fn expire(&mut self, now: Millis) {
        for &event in &self.active {
            let Some(row) = self.rows[event].as_mut() else {
                continue;
            };
            if row.effect.state == EffectState::Sending
                && row.lease.as_ref().is_some_and(|(_, until)| *until <= now)
            {
                row.lease = None;
                row.effect.next_attempt_at = now;
                if self.reconcile {
                    row.effect.state = EffectState::Unknown;
                    row.effect.last_class = Some(AttemptClass::Lost);
                } else {
                    row.effect.state = EffectState::Pending;
                }
            }
        }
    }

    /// When the dispatcher next has something to do: a due effect or a
    /// lease to expire.
    fn next_work(&self, approved: impl Fn(usize) -> bool) -> Option<Millis> {
        self.active
            .iter()
            .filter_map(|&event| {
                let row = self.rows[event].as_ref()?;
                match row.effect.state {
                    EffectState::Pending | EffectState::Unknown if approved(event) => {
                        Some(row.effect.next_attempt_at)
                    }
                    EffectState::Sending => row.lease.as_ref().map(|(_, until)| *until),
                    _ => None,
                }
            })
            .min()
    }

    /// Drops an event from the active set once its effect is settled or
    /// parked (its run left `approved`).
    fn retire_if_settled(&mut self, event: usize, approved: bool) {
        let in_play = self.rows[event].as_ref().is_some_and(|row| {
            row.effect.state == EffectState::Sending
                || (approved
                    && matches!(
                        row.effect.state,
                        EffectState::Pending | EffectState::Unknown
                    ))
        });
        if !in_play {
            self.active.remove(&event);
        }
    }
}

/// The verdict for a sent attempt: the dispatcher's own policy
/// ([`verdict::for_attempt`]); without reconciliation an ambiguous outcome
/// is simply retried.
fn send_verdict(world: &mut World, leased: &Leased, outcome: Outcome, started: Millis) -> Verdict {
    let (now, reconcile) = (world.now, world.dispatcher.reconcile);
    let target = world.dispatcher.config.clone();
    verdict::for_attempt(
        &target,
        leased,
        outcome,
        started,
        now,
        reconcile,
        &mut world.rng,
    )
    .verdict
}

/// The verdict of a probe: the dispatcher's own ([`verdict::for_probe`]).
fn probe_verdict(world: &mut World, leased: &Leased, reply: Reply) -> (Verdict, AttemptClass) {
    let status = match reply {
        Reply::Status(status) => Some(status),
        _ => None,
    };
    let target = world.dispatcher.config.clone();
    verdict::for_probe(&target, leased, status, world.now, &mut world.rng)
}

impl World {
    /// A commit woke the dispatcher (the real one is notified, too).
    pub(super) fn wake_dispatcher(&mut self) {
        let db = self.draw(DB_MS);
        self.plan_tick(self.now + db);
    }

    /// Plans the next step for when there is work, at least a poll away.
    pub(super) fn schedule_tick(&mut self) {
        let ledger = &self.ledger;
        if let Some(at) = self.dispatcher.next_work(|event| ledger.approved(event)) {
            self.plan_tick(at.max(self.now + POLL_MS));
        }
    }

    fn plan_tick(&mut self, at: Millis) {
        if self
            .dispatcher
            .next_tick
            .is_some_and(|planned| planned <= at)
        {
            return;
        }
        self.dispatcher.generation += 1;
        self.dispatcher.next_tick = Some(at);
        let (epoch, generation) = (self.epoch, self.dispatcher.generation);
        self.at(at - self.now, super::sim::Task::Tick { epoch, generation });
    }
}
