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
    let r = ratio("sqlite", "claim new key", "noop (floor)", c64);
    verdicts.push(Verdict {
        target: format!("SQLite new-key claims ≥ 0.60 × no-op floor at {c64} connections"),
        measured: r.map_or("not measured".into(), |r| format!("{r:.2}")),
        met: r.map(|r| r >= 0.60),
    });
    let c32 = at(32);
    let p99 = found
        .find("sqlite", "claim new key", c32)
        .map(|r| r.ms(0.99));
    verdicts.push(Verdict {
        target: format!("SQLite new-key claim p99 < 5 ms at {c32} connections"),
        measured: p99.map_or("not measured".into(), |v| format!("{v:.2} ms")),
        met: p99.map(|v| v < 5.0),
    });
    for &c in &args.connections {
        let r = ratio("postgres", "claim new key", "raw pgbench", c);
        if let Some(r) = r {
            verdicts.push(Verdict {
                target: format!("PostgreSQL claims ≥ 0.80 × raw pgbench at {c} clients"),
                measured: format!("{r:.2}"),
                met: Some(r >= 0.80),
            });
        }
    }
    let p99 = found
        .find("postgres", "claim new key", c32)
        .map(|r| r.ms(0.99));
    if let Some(v) = p99 {
        verdicts.push(Verdict {
            target: format!("PostgreSQL claim p99 < 10 ms at {c32} connections"),
            measured: format!("{v:.2} ms"),
            met: Some(v < 10.0),
        });
    }
    for backend in ["sqlite", "postgres"] {
        for &c in &args.connections {
            if let Some(r) = ratio(backend, "claim duplicate", "claim new key", c) {
                verdicts.push(Verdict {
                    target: format!("{backend} duplicates at least as fast as new claims at {c}"),
                    measured: format!("{r:.2}×"),
                    met: Some(r >= 1.0),
                });
            }
        }
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
