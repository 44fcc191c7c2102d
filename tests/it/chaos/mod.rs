//! Chaos tests: the real `oncegate serve`, killed with SIGKILL at named
//! crash points (cargo feature `chaos`, see src/chaos.rs), restarted, and
//! counted at real HTTP targets. docs/reliability.md explains the method
//! and holds the counts.
//!
//! `ONCEGATE_CHAOS_EVENTS` sets the events per target mode and crash point
//! (CI: 200; `--full`: 1000). `ONCEGATE_CHAOS_REPORT=FILE` appends each
//! run's counts to FILE as one JSON line.

mod cluster;
mod db;
mod driver;
mod people;
mod pg_restart;
mod points;
mod supervisor;
mod verdict;
mod workflow;

use std::io::Write;

/// Events per target mode and crash point.
pub fn events() -> usize {
    std::env::var("ONCEGATE_CHAOS_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(200)
}

/// Prints a run's counts and appends them to `ONCEGATE_CHAOS_REPORT`.
pub fn report(line: &serde_json::Value) {
    eprintln!("chaos report: {line}");
    let Ok(path) = std::env::var("ONCEGATE_CHAOS_REPORT") else {
        return;
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("ONCEGATE_CHAOS_REPORT={path}: {e}"));
    writeln!(file, "{line}").unwrap();
}
