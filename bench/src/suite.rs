//! `oncegate-bench suite`: the claim path against the real release binary,
//! every figure BENCHMARKS.md reports, side by side in one run.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Result};

use crate::db::Database;
use crate::load::{self, Report, Workload};
use crate::phases::PhaseArgs;
use crate::server::{Server, ServerSpec};
use crate::workloads::{self, DupClaims, Hooks, NewClaims, Noop};
use crate::{growth, pgbench};

/// What the suite runs.
#[derive(Debug, clap::Args)]
pub struct SuiteArgs {
    /// Backends to measure, in one run.
    #[arg(long, value_delimiter = ',', default_value = "sqlite,postgres")]
    pub backends: Vec<String>,
    /// Connection (and pgbench client) counts.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,64")]
    pub connections: Vec<usize>,
    /// Concurrent deliveries of one key in the duplicate storm.
    #[arg(long, default_value_t = 1000)]
    pub storm: usize,
    /// Existing rows for the growth phase (0 is the empty table).
    #[arg(long, value_delimiter = ',', default_value = "0,1000000")]
    pub growth: Vec<u64>,
    /// Also measure growth at 10,000,000 rows (minutes of seeding, GBs of disk).
    #[arg(long)]
    pub with_10m: bool,
    /// Connections during the growth phase.
    #[arg(long, default_value_t = 8)]
    pub growth_connections: usize,
    /// `database.max_connections` of the server (0: its default).
    #[arg(long, default_value_t = 0)]
    pub pool: u32,
    /// Extra `ONCEGATE_*=value` settings for the server (repeatable).
    #[arg(long = "server-env")]
    pub server_env: Vec<String>,
    /// The pgbench binary.
    #[arg(long, default_value = "/usr/bin/pgbench")]
    pub pgbench: PathBuf,
    /// Only these load phases (`noop`, `new`, `dup`, `hook`), no storm,
    /// no growth, no pgbench: one path at a time, e.g. under a profiler.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Phase length, the server binary, PostgreSQL, smoke mode.
    #[command(flatten)]
    pub phase: PhaseArgs,
}

impl SuiteArgs {
    fn smoke(&mut self) {
        self.connections = vec![4];
        self.phase.shorten();
        self.storm = self.storm.min(200);
        self.growth = vec![1_000];
        self.with_10m = false;
        self.growth_connections = 4;
    }
}

/// One measured line of the report.
pub(crate) struct Line {
    pub(crate) backend: &'static str,
    pub(crate) workload: String,
    pub(crate) conns: usize,
    pub(crate) report: Report,
}

/// Everything one run found.
#[derive(Default)]
pub(crate) struct Findings {
    pub(crate) lines: Vec<Line>,
    pub(crate) storms: Vec<String>,
    pub(crate) rss: Vec<(String, u64)>,
    pub(crate) failures: Vec<String>,
}

impl Findings {
    pub(crate) fn find(&self, backend: &str, workload: &str, conns: usize) -> Option<&Report> {
        self.lines
            .iter()
            .find(|l| l.backend == backend && l.workload == workload && l.conns == conns)
            .map(|l| &l.report)
    }

    fn push(&mut self, backend: &'static str, workload: &str, conns: usize, report: Report) {
        if report.errors > 0 {
            self.failures.push(format!(
                "{backend} {workload} at {conns}: {} wrong answers, e.g. {}",
                report.errors,
                report.sample_error.as_deref().unwrap_or("?")
            ));
        }
        eprintln!(
            "  {backend:8} {workload:18} {conns:>4} conns: {:>8.0}/s p50 {:.2} ms p99 {:.2} ms",
            report.throughput(),
            report.ms(0.5),
            report.ms(0.99)
        );
        // After the other lines of its backend and connection count, so
        // the table reads the same whichever order the phases ran in.
        let grouped = |l: &Line| !l.workload.starts_with("claim @");
        let at = match workload.starts_with("claim @") {
            true => None,
            false => self
                .lines
                .iter()
                .rposition(|l| l.backend == backend && l.conns == conns && grouped(l)),
        }
        .map_or(self.lines.len(), |i| i + 1);
        self.lines.insert(
            at,
            Line {
                backend,
                workload: workload.to_owned(),
                conns,
                report,
            },
        );
    }
}

/// Runs the suite and prints its report; fails when an answer was wrong.
pub async fn run(mut args: SuiteArgs) -> Result<()> {
    if args.phase.server.smoke {
        args.smoke();
    }
    if args.with_10m && !args.growth.contains(&10_000_000) {
        args.growth.push(10_000_000);
    }
    let bin = args.phase.server.server_bin()?;
    let mut found = Findings::default();
    for backend in args.backends.clone() {
        eprintln!("{backend}:");
        throughput_phases(&args, &bin, &backend, &mut found).await?;
        if args.only.is_empty() {
            growth_phases(&args, &bin, &backend, &mut found).await?;
        }
    }
    println!("{}", render(&args, &found));
    if args.phase.server.smoke {
        // Every measured phase and every storm is one correctness check.
        let checks = found.lines.len() + found.storms.len();
        let failed = found.failures.len();
        println!(
            "smoke: {} passed, {failed} failed",
            checks.saturating_sub(failed)
        );
    }
    if !found.failures.is_empty() {
        bail!("wrong answers:\n{}", found.failures.join("\n"));
    }
    Ok(())
}

async fn throughput_phases(
    args: &SuiteArgs,
    bin: &std::path::Path,
    backend: &str,
    found: &mut Findings,
) -> Result<()> {
    let db = Database::create(backend, &args.phase.server.pg_url, "main").await?;
    let name = db.backend;
    let server = Server::start(&ServerSpec {
        bin,
        db_url: &db.url,
        max_connections: args.pool,
        env: &args.server_env,
        extra_config: "",
    })?;
    let addr = server.addr;
    let (warmup, window) = (args.phase.warmup(), args.phase.window());
    let runs = |phase: &str| args.only.is_empty() || args.only.iter().any(|p| p == phase);
    for &c in &args.connections {
        if runs("noop") {
            let noop = load::run(addr, Arc::new(Noop), c, warmup, window).await?;
            found.push(name, "noop (floor)", c, noop);
        }
        let tag = format!("n{c}");
        if runs("new") || runs("dup") {
            let fresh: Arc<dyn Workload> = Arc::new(NewClaims { tag: tag.clone() });
            let new = load::run(addr, fresh, c, warmup, window).await?;
            let sent = new.sent.clone();
            found.push(name, "claim new key", c, new);
            if runs("dup") {
                let dup = Arc::new(DupClaims { tag, sent });
                found.push(
                    name,
                    "claim duplicate",
                    c,
                    load::run(addr, dup, c, warmup, window).await?,
                );
            }
        }
        if runs("hook") {
            let hooks = Arc::new(Hooks {
                tag: format!("h{c}"),
            });
            found.push(
                name,
                "signed webhook",
                c,
                load::run(addr, hooks, c, warmup, window).await?,
            );
        }
    }
    if !args.only.is_empty() {
        found
            .rss
            .push((format!("{name}, load phases"), server.peak_rss_kib()?));
        server.stop()?;
        return db.drop_now().await;
    }
    let before = server.peak_rss_kib()?;
    found.rss.push((format!("{name}, load phases"), before));
    storms(args, &server, &db, found).await?;
    let after = server.peak_rss_kib()?;
    found.rss.push((
        format!("{name}, with the {}-connection storm", args.storm),
        after,
    ));
    server.stop()?;
    // pgbench runs once the server and its pool are gone: its clients and
    // a full pool together could pass PostgreSQL's `max_connections`.
    if let Some(db_name) = db.pg_name() {
        if pgbench::available(&args.pgbench) {
            for &c in &args.connections {
                pgbench::wait_for_slots(&args.phase.server.pg_url, c).await?;
                let raw = pgbench::run(
                    &args.pgbench,
                    &args.phase.server.pg_url,
                    db_name,
                    c,
                    warmup,
                    window,
                )?;
                found.push(name, "raw pgbench", c, raw);
            }
        } else {
            eprintln!(
                "  {} not found: no raw pgbench comparison",
                args.pgbench.display()
            );
        }
    }
    db.drop_now().await
}

async fn storms(
    args: &SuiteArgs,
    server: &Server,
    db: &Database,
    found: &mut Findings,
) -> Result<()> {
    let n = args.storm;
    let (answers, took) = load::burst(server.addr, n, |_| {
        workloads::claim_request("storm_one_key")
    })
    .await?;
    let closed = answers.iter().filter(|a| a.is_none()).count();
    let answers: Vec<_> = answers.into_iter().flatten().collect();
    let winners = answers
        .iter()
        .filter(|(_, b)| workloads::claimed(b))
        .count();
    let bad = answers.iter().filter(|(s, _)| *s != 200).count();
    found.storms.push(format!(
        "| {} | `POST /v1/claims` | {n} | {winners} | {bad} | {closed} | {:.1} ms |",
        db.backend,
        took.as_secs_f64() * 1000.0
    ));
    if winners != 1 || bad != 0 {
        found.failures.push(format!(
            "{} claim storm: {winners} winners, {bad} non-200 answers",
            db.backend
        ));
    }
    let body = workloads::stripe_event("evt_storm_one_id");
    let (answers, took) =
        load::burst(server.addr, n, |_| workloads::hook_request(body.clone())).await?;
    let closed = answers.iter().filter(|a| a.is_none()).count();
    let answers: Vec<_> = answers.into_iter().flatten().collect();
    let winners = answers
        .iter()
        .filter(|(_, b)| workloads::first_receipt(b))
        .count();
    let bad = answers.iter().filter(|(s, _)| *s != 200).count();
    let stored = db
        .count("SELECT COUNT(*) FROM effects WHERE run_key = 'evt_storm_one_id'")
        .await?;
    found.storms.push(format!(
        "| {} | `POST /hooks/stripe` | {n} | {winners} | {bad} | {closed} | {:.1} ms |",
        db.backend,
        took.as_secs_f64() * 1000.0
    ));
    if winners != 1 || bad != 0 || stored != 1 {
        found.failures.push(format!(
            "{} webhook storm: {winners} first receipts, {bad} non-200 answers, {stored} forward effects",
            db.backend
        ));
    }
    Ok(())
}

/// The growth server runs without the periodic audit checkpoint: the
/// seeded runs' chains were never checkpointed, so a checkpoint falling in
/// the phase would be one over every seeded chain (minutes of scanning,
/// and every head written), where a real ledger of that size has
/// checkpointed them along the way. The phase measures the claims.
const GROWTH_CONFIG: &str = "\n[audit]\ncheckpoint_interval_secs = 0\n";

async fn growth_phases(
    args: &SuiteArgs,
    bin: &std::path::Path,
    backend: &str,
    found: &mut Findings,
) -> Result<()> {
    for &rows in &args.growth {
        let db = Database::create(backend, &args.phase.server.pg_url, &format!("g{rows}")).await?;
        let server = Server::start(&ServerSpec {
            bin,
            db_url: &db.url,
            max_connections: args.pool,
            env: &args.server_env,
            extra_config: GROWTH_CONFIG,
        })?;
        growth::seed(&db, rows).await?;
        let c = args.growth_connections;
        let work = Arc::new(NewClaims {
            tag: format!("g{rows}"),
        });
        let report = load::run(
            server.addr,
            work,
            c,
            args.phase.warmup(),
            args.phase.window(),
        )
        .await?;
        found.push(
            db.backend,
            &format!("claim @ {} rows", human(rows)),
            c,
            report,
        );
        found.rss.push((
            format!("{} @ {} rows", db.backend, human(rows)),
            server.peak_rss_kib()?,
        ));
        server.stop()?;
        db.drop_now().await?;
    }
    Ok(())
}

pub(crate) fn human(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

fn render(args: &SuiteArgs, found: &Findings) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n| backend | workload | conns | req/s | p50 ms | p99 ms | p99.9 ms | vs floor |"
    );
    let _ = writeln!(
        out,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for l in &found.lines {
        let floor = found.find(l.backend, "noop (floor)", l.conns);
        let ratio = match floor {
            Some(f) if !l.workload.starts_with("noop") && !l.workload.starts_with("claim @") => {
                format!("{:.2}", l.report.throughput() / f.throughput())
            }
            _ => "".into(),
        };
        let r = &l.report;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {ratio} |",
            l.backend,
            l.workload,
            l.conns,
            r.throughput(),
            r.ms(0.5),
            r.ms(0.99),
            r.ms(0.999)
        );
    }
    let _ = writeln!(
        out,
        "\n| backend | storm | deliveries | winners | non-200 | closed at the cap | drained in |"
    );
    let _ = writeln!(out, "| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for s in &found.storms {
        let _ = writeln!(out, "{s}");
    }
    let _ = writeln!(out, "\n| server | peak RSS (VmHWM) |");
    let _ = writeln!(out, "| --- | ---: |");
    for (what, kib) in &found.rss {
        let _ = writeln!(out, "| {what} | {:.1} MiB |", *kib as f64 / 1024.0);
    }
    if args.phase.server.smoke {
        out.push_str("\nsmoke run: answers checked; these figures are not measurements\n");
    } else {
        out.push_str(&crate::targets::render(args, found));
    }
    out
}
