//! The benchmark's targets (throughput ratios to the floor and to raw
//! pgbench, p99 latencies, growth, peak memory), judged on one run's
//! figures.

use std::fmt::Write as _;

use crate::suite::{Findings, SuiteArgs};

/// One judged target.
struct Verdict {
    target: String,
    measured: String,
    met: Option<bool>,
}

/// The targets table (a target whose figures were not measured says so).
pub(crate) fn render(args: &SuiteArgs, found: &Findings) -> String {
    let mut verdicts = Vec::new();
    let top = args.connections.iter().copied().max().unwrap_or(1);
    let at = |wanted: usize| {
        if args.connections.contains(&wanted) {
            wanted
        } else {
            top
        }
    };
    let ratio = |backend: &str, a: &str, b: &str, c: usize| {
        Some(found.find(backend, a, c)?.throughput() / found.find(backend, b, c)?.throughput())
    };
    let c64 = at(64);
    let c8 = at(8);
    // Issue 17: the claim and intake path at machine speed.
    let mut ratio_target = |backend: &str, a: &str, b: &str, c: usize, min: f64| {
        let r = ratio(backend, a, b, c);
        verdicts.push(Verdict {
            target: format!("{backend} {a} ≥ {min:.2} × {b} at {c} connections"),
            measured: r.map_or("not measured".into(), |r| format!("{r:.2}")),
            met: r.map(|r| r >= min),
        });
    };
    ratio_target("sqlite", "claim new key", "noop (floor)", c64, 0.60);
    ratio_target("sqlite", "claim duplicate", "noop (floor)", c64, 0.80);
    ratio_target("sqlite", "signed webhook", "noop (floor)", c64, 0.40);
    for c in [c8, c64] {
        ratio_target("postgres", "claim new key", "raw pgbench", c, 1.00);
    }
    for c in [c8, c64] {
        ratio_target("postgres", "signed webhook", "raw pgbench", c, 0.50);
    }
    for (backend, limit) in [("sqlite", 10.0), ("postgres", 15.0)] {
        let p99 = found
            .find(backend, "claim new key", c64)
            .map(|r| r.ms(0.99));
        verdicts.push(Verdict {
            target: format!("{backend} new-key claim p99 < {limit} ms at {c64} connections"),
            measured: p99.map_or("not measured".into(), |v| format!("{v:.2} ms")),
            met: p99.map(|v| v < limit),
        });
    }
    for backend in ["sqlite", "postgres"] {
        growth_verdict(args, found, backend, &mut verdicts);
    }
    let peak = found.rss.iter().map(|(_, kib)| *kib).max().unwrap_or(0);
    verdicts.push(Verdict {
        target: "server peak RSS < 64 MiB".into(),
        measured: format!("{:.1} MiB", peak as f64 / 1024.0),
        met: Some(peak < 64 * 1024),
    });
    let mut out = String::from("\n| target | measured | verdict |\n| --- | ---: | --- |\n");
    for v in verdicts {
        let verdict = match v.met {
            Some(true) => "met",
            Some(false) => "**missed**",
            None => "—",
        };
        let _ = writeln!(out, "| {} | {} | {verdict} |", v.target, v.measured);
    }
    out
}

fn growth_verdict(args: &SuiteArgs, found: &Findings, backend: &str, out: &mut Vec<Verdict>) {
    let c = args.growth_connections;
    let label = |rows: u64| {
        let name = format!("claim @ {} rows", crate::suite::human(rows));
        found.find(backend, &name, c)
    };
    let Some(empty) = label(0) else { return };
    let Some(&most) = args.growth.iter().filter(|&&n| n > 0).max() else {
        return;
    };
    let Some(big) = label(most) else { return };
    let (p50, p99) = (big.ms(0.5) / empty.ms(0.5), big.ms(0.99) / empty.ms(0.99));
    out.push(Verdict {
        target: format!(
            "{backend} claim latency at {} rows within 1.5 × empty (p50; p99 shown)",
            crate::suite::human(most)
        ),
        measured: format!("p50 {p50:.2}×, p99 {p99:.2}×"),
        met: Some(p50 <= 1.5),
    });
}
