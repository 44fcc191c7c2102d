//! `oncegate lab`: the Retry Lab's flags as a scenario, run and reported.

use anyhow::{Context, Result};

use super::args::{LabArgs, LabCrashPoint};
use crate::lab::{CrashPoint, Fault, FaultKind, Scenario, Strategy};

impl LabArgs {
    /// The scenario these flags describe.
    pub fn scenario(&self) -> Scenario {
        let points: &[CrashPoint] = match self.crash_point {
            LabCrashPoint::Before => &[CrashPoint::Before],
            LabCrashPoint::After => &[CrashPoint::After],
            LabCrashPoint::Both => &[CrashPoint::Before, CrashPoint::After],
        };
        let pick = |chosen: &[FaultKind]| {
            if chosen.is_empty() {
                FaultKind::ALL.to_vec()
            } else {
                chosen.to_vec()
            }
        };
        Scenario {
            seed: self.seed,
            events: self.events,
            rate: self.rate,
            strategies: if self.strategies.is_empty() {
                Strategy::ALL.to_vec()
            } else {
                self.strategies.clone()
            },
            faults: Fault::of_kinds(&pick(&self.faults), points),
        }
    }
}

/// Runs the lab and prints (and writes) its report.
pub(super) fn run(args: &LabArgs) -> Result<()> {
    let report = crate::lab::run(&args.scenario())?;
    if let Some(path) = &args.html {
        std::fs::write(path, crate::lab::html::page(&report))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", crate::lab::report::json(&report)?);
    } else {
        print!("{}", crate::lab::report::table(&report));
    }
    Ok(())
}
