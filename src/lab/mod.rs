//! The Retry Lab: a deterministic, seeded simulator that shows why each
//! safeguard exists (DESIGN.md §1).
//!
//! Seven delivery strategies ([`Strategy`], from "no guard" to "atomic claim
//! with leases, outbox, downstream key and reconciliation") each handle the
//! same seeded stream of webhook events while one [`Fault`] is injected into
//! a share of them. A discrete-event scheduler ([`sim`]) interleaves the
//! steps of concurrent deliveries, so a lookup-then-insert guard really races
//! when two copies interleave between its lookup and its insert; a simulated
//! downstream target counts the effects it applied per event and honours or
//! ignores idempotency keys; a crash loses everything in memory and keeps
//! what was stored; the provider redelivers on its own schedule.
//!
//! Strategies (d) to (g) drive the real ledger: their runs are
//! [`crate::ledger::Run`] rows moved only through [`RunState::apply`] and
//! the [`Move`] table, answered with [`ClaimOutcome::for_existing`]; their
//! effects are [`crate::outbox::Effect`] rows whose outcomes are classified
//! by [`crate::outbox::classify::classify`] and timed by
//! [`crate::outbox::backoff::next_attempt_at`]. A move the real table
//! refuses stops the simulation with an error instead of being papered over.
//!
//! [`run`] returns a [`Report`]; [`report`] renders it as a terminal table
//! or JSON, [`html`] as a self-contained page.
//!
//! [`RunState::apply`]: crate::ledger::RunState::apply
//! [`Move`]: crate::ledger::Move
//! [`ClaimOutcome::for_existing`]: crate::ledger::ClaimOutcome::for_existing

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

mod fault;
pub mod html;
mod ledger;
mod outbox;
pub mod report;
mod sim;
mod strategy;
mod target;
mod types;

pub use types::{CrashPoint, Downstream, Fault, FaultKind, Strategy};

/// What to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Seeds every random choice: the same scenario gives the same report.
    pub seed: u64,
    /// Events per strategy and fault.
    pub events: usize,
    /// The share of events each fault is injected into, in `(0, 1]`.
    pub rate: f64,
    /// The strategies to compare, in order.
    pub strategies: Vec<Strategy>,
    /// The faults to inject, in order.
    pub faults: Vec<Fault>,
}

impl Scenario {
    /// The largest accepted number of events.
    pub const MAX_EVENTS: usize = 100_000;

    /// The default scenario: seed 1, 1,000 events, 20 % hit, every
    /// strategy and every fault (both crash points).
    pub fn standard() -> Self {
        Self {
            seed: 1,
            events: 1_000,
            rate: 0.2,
            strategies: Strategy::ALL.to_vec(),
            faults: Fault::all(&[CrashPoint::Before, CrashPoint::After]),
        }
    }

    fn check(&self) -> Result<(), LabError> {
        if self.events == 0 || self.events > Self::MAX_EVENTS {
            return Err(LabError::Invalid(format!(
                "events must be between 1 and {}, got {}",
                Self::MAX_EVENTS,
                self.events
            )));
        }
        if !(self.rate > 0.0 && self.rate <= 1.0) {
            return Err(LabError::Invalid(format!(
                "rate must be above 0 and at most 1, got {}",
                self.rate
            )));
        }
        if self.strategies.is_empty() || self.faults.is_empty() {
            return Err(LabError::Invalid(
                "choose at least one strategy and one fault".into(),
            ));
        }
        Ok(())
    }
}

/// What one strategy did under one fault.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    /// Events the fault was injected into.
    pub hit: u64,
    /// Side effects applied beyond the first, summed over events.
    pub duplicates: u64,
    /// Events never applied and not waiting for anyone: nothing will bring
    /// them back, and nothing says they are missing.
    pub lost: u64,
    /// Events whose first attempt was disrupted (crash, timeout, refused
    /// delivery) that still ended applied exactly once, without a person.
    pub recovered: u64,
    /// Events parked where oncegate shows them to a person: a dead letter,
    /// an unknown outcome, or a stale run the alerting names.
    pub waiting_for_human: u64,
    /// Events a person must act on: each duplicated event (compensate),
    /// each lost one (find and replay, if anyone notices) and each waiting one (decide).
    pub operator_actions: u64,
    /// Deliveries the provider made (first attempts, copies and redeliveries).
    pub deliveries: u64,
    /// Requests the downstream target received (sends and probes).
    pub target_requests: u64,
}

/// One strategy, downstream and fault, and what happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cell {
    /// The injected fault.
    pub fault: Fault,
    /// The delivery strategy.
    pub strategy: Strategy,
    /// What the downstream target does with idempotency keys.
    pub downstream: Downstream,
    /// The counts.
    #[serde(flatten)]
    pub tally: Tally,
}

/// The outcome of a scenario: one cell per fault, strategy and downstream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The seed used.
    pub seed: u64,
    /// Events per cell.
    pub events: usize,
    /// The share of events each fault was injected into.
    pub rate: f64,
    /// Cells, grouped by fault in the scenario's order.
    pub cells: Vec<Cell>,
}

impl Report {
    /// The faults in the order they were simulated.
    pub fn faults(&self) -> Vec<Fault> {
        let mut faults: Vec<Fault> = Vec::new();
        for cell in &self.cells {
            if !faults.contains(&cell.fault) {
                faults.push(cell.fault);
            }
        }
        faults
    }

    /// The cells of one fault.
    pub fn cells_of(&self, fault: Fault) -> impl Iterator<Item = &Cell> {
        self.cells.iter().filter(move |c| c.fault == fault)
    }

    /// The cell of one fault, strategy and downstream, if simulated.
    pub fn cell(&self, fault: Fault, strategy: Strategy, downstream: Downstream) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.fault == fault && c.strategy == strategy && c.downstream == downstream)
    }
}

/// Why the lab could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LabError {
    /// The scenario or a command-line value is out of range.
    #[error("{0}")]
    Invalid(String),
    /// The simulation asked the real state machine for a move it refuses:
    /// a bug in a strategy, reported rather than hidden.
    #[error("simulated {strategy} under {fault}: {detail}")]
    Refused {
        /// The strategy being simulated.
        strategy: Strategy,
        /// The fault being injected.
        fault: Fault,
        /// What was refused.
        detail: String,
    },
}

/// Runs every chosen strategy (under each downstream it supports) against
/// every chosen fault.
///
/// # Errors
/// [`LabError::Invalid`] for an out-of-range scenario;
/// [`LabError::Refused`] when a simulated strategy attempts a move the real
/// ledger refuses.
pub fn run(scenario: &Scenario) -> Result<Report, LabError> {
    scenario.check()?;
    let mut cells = Vec::new();
    for &fault in &scenario.faults {
        let plans = fault::plan(fault, scenario.events, scenario.rate, scenario.seed);
        for &strategy in &scenario.strategies {
            for &downstream in strategy.downstreams() {
                let seed = cell_seed(scenario.seed, fault, strategy, downstream);
                let tally = sim::World::new(strategy, downstream, plans.clone(), seed)
                    .run()
                    .map_err(|detail| LabError::Refused {
                        strategy,
                        fault,
                        detail,
                    })?;
                cells.push(Cell {
                    fault,
                    strategy,
                    downstream,
                    tally,
                });
            }
        }
    }
    Ok(Report {
        seed: scenario.seed,
        events: scenario.events,
        rate: scenario.rate,
        cells,
    })
}

/// A per-cell seed: every cell gets its own stream of latencies, fixed by
/// the scenario seed alone (SplitMix64 over the cell's coordinates).
fn cell_seed(seed: u64, fault: Fault, strategy: Strategy, downstream: Downstream) -> u64 {
    let mut x = seed
        ^ (fault.index() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ ((strategy.index() as u64) << 20)
        ^ ((downstream.index() as u64) << 40);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Parses one command-line name (either of two spellings, any case).
fn parse_named<T: Copy>(
    value: &str,
    all: &[T],
    names: impl Fn(T) -> [&'static str; 2],
    what: &str,
) -> Result<T, LabError> {
    let wanted = value.trim().to_ascii_lowercase();
    all.iter()
        .copied()
        .find(|item| names(*item).contains(&wanted.as_str()))
        .ok_or_else(|| {
            let known: Vec<String> = all
                .iter()
                .map(|i| match names(*i) {
                    [a, b] if a == b => a.to_owned(),
                    [a, b] => format!("{a}|{b}"),
                })
                .collect();
            LabError::Invalid(format!(
                "unknown {what} {value:?}; choose one of {}",
                known.join(", ")
            ))
        })
}

impl FromStr for Strategy {
    type Err = LabError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_named(s, &Strategy::ALL, |st| [st.letter(), st.slug()], "strategy")
    }
}

impl FromStr for FaultKind {
    type Err = LabError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_named(s, &FaultKind::ALL, |f| [f.slug(), f.slug()], "fault")
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}) {}", self.letter(), self.title())
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.title())
    }
}

#[cfg(test)]
mod tests;
