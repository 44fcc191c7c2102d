//! The report as a terminal table or JSON.

use std::fmt::Write as _;

use super::{Cell, Report};

/// The column headers of every table, after strategy and downstream.
pub const COLUMNS: [&str; 5] = ["duplicates", "lost", "recovered", "human", "operator"];

/// The numbers of a cell in [`COLUMNS`] order.
pub fn numbers(cell: &Cell) -> [u64; 5] {
    let t = &cell.tally;
    [
        t.duplicates,
        t.lost,
        t.recovered,
        t.waiting_for_human,
        t.operator_actions,
    ]
}

/// The headline: what was run.
pub fn headline(report: &Report) -> String {
    format!(
        "Retry Lab: seed {}, {} events per run, each fault injected into {}% of them",
        report.seed,
        report.events,
        trim_float(report.rate * 100.0)
    )
}

/// The legend under the tables.
pub const LEGEND: &str = "duplicates: side effects applied beyond the first (summed over events)\n\
lost: events never applied that nothing will retry and nothing reports\n\
recovered: events whose first attempt was disrupted that still ended applied exactly once, unaided\n\
human: events parked for a person with a record (dead letter, unknown outcome, stale run)\n\
operator: events a person must act on (duplicated + lost + waiting for a human)";

/// One table per fault, for the terminal.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}\n", headline(report));
    for fault in report.faults() {
        let cells: Vec<&Cell> = report.cells_of(fault).collect();
        let hit = cells.first().map_or(0, |c| c.tally.hit);
        let _ = writeln!(out, "{} ({hit} events hit)", fault.title());
        let _ = writeln!(out, "  {}", fault.description());
        let _ = write!(out, "  {:<36} {:<20}", "strategy", "downstream");
        for column in COLUMNS {
            let _ = write!(out, " {column:>10}");
        }
        out.push('\n');
        for cell in cells {
            let _ = write!(
                out,
                "  {:<36} {:<20}",
                cell.strategy.to_string(),
                cell.downstream.title()
            );
            for n in numbers(cell) {
                let _ = write!(out, " {n:>10}");
            }
            out.push('\n');
        }
        out.push('\n');
    }
    out.push_str(LEGEND);
    out.push('\n');
    out
}

/// The report as pretty-printed JSON.
///
/// # Errors
/// Serialisation failed (it cannot for these types; kept for honesty).
pub fn json(report: &Report) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(report)
}

fn trim_float(value: f64) -> String {
    let text = format!("{value:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::{Downstream, Fault, Strategy, Tally};

    fn report() -> Report {
        Report {
            seed: 7,
            events: 10,
            rate: 0.25,
            cells: vec![Cell {
                fault: Fault::Concurrent,
                strategy: Strategy::SeenAfter,
                downstream: Downstream::NoKey,
                tally: Tally {
                    hit: 3,
                    duplicates: 4,
                    operator_actions: 3,
                    ..Tally::default()
                },
            }],
        }
    }

    #[test]
    fn the_table_names_fault_strategy_and_counts() {
        let text = table(&report());
        assert!(text.starts_with("Retry Lab: seed 7, 10 events per run"));
        assert!(text.contains("25% of them"));
        assert!(text.contains("concurrent duplicate deliveries (3 events hit)"));
        let row = text
            .lines()
            .find(|l| l.contains("(b) seen flag after the effect"))
            .unwrap();
        let counts: Vec<&str> = row.split_whitespace().rev().take(5).collect();
        assert_eq!(counts, ["3", "0", "0", "0", "4"]);
    }

    #[test]
    fn json_uses_the_command_line_names() {
        let value: serde_json::Value = serde_json::from_str(&json(&report()).unwrap()).unwrap();
        let cell = &value["cells"][0];
        assert_eq!(cell["fault"], "concurrent");
        assert_eq!(cell["strategy"], "seen-after");
        assert_eq!(cell["downstream"], "no-key");
        assert_eq!(cell["duplicates"], 4);
        assert_eq!(cell["waiting_for_human"], 0);
    }
}
