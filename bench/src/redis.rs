//! `oncegate-bench redis`: the Redis tier (docs/redis.md) against the real
//! release binary, in one run: a redis-server of its own (the recommended
//! `deploy/redis/redis.conf`, AOF with `appendfsync everysec`, on a free
//! port in a temporary directory), `redis-benchmark` running
//! `SET key val NX PX` against it at each client count, and per
//! connection count the no-op floor, new-key and duplicate claims with
//! the namespace on the Redis tier, then the same on the SQL tier; last a
//! storm of concurrent claims of one key (exactly one winner).

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::db::Database;
use crate::load::{self, Report, Workload};
use crate::phases::PhaseArgs;
use crate::server::{Server, ServerSpec};
use crate::workloads::{self, DupClaims, NewClaims, Noop};

/// What the Redis benchmark runs.
#[derive(Debug, clap::Args)]
pub struct RedisArgs {
    /// Connection counts (the same client counts for redis-benchmark).
    #[arg(long, value_delimiter = ',', default_value = "64")]
    pub connections: Vec<usize>,
    /// SQL backends measured beside the Redis tier.
    #[arg(long, value_delimiter = ',', default_value = "sqlite")]
    pub sql: Vec<String>,
    /// Concurrent claims of one key in the storm.
    #[arg(long, default_value_t = 1000)]
    pub storm: usize,
    /// Phase length, the server binary, PostgreSQL, smoke mode.
    #[command(flatten)]
    pub phase: PhaseArgs,
}

/// A redis-server of the benchmark's own, killed on drop.
struct OwnRedis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl OwnRedis {
    fn start() -> Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let dir = tempfile::tempdir()?;
        let conf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/redis/redis.conf");
        let child = Command::new("redis-server")
            .arg(&conf)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting redis-server (apt-get install redis-server)")?;
        let redis = Self {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !redis.answers() {
            if Instant::now() > deadline {
                bail!("redis-server on port {port} did not answer within 20 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "  redis-server pid {} on 127.0.0.1:{port}",
            redis.child.id()
        );
        Ok(redis)
    }

    fn answers(&self) -> bool {
        Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "ping"])
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"PONG"))
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `redis-benchmark` running `SET key val NX PX` with `clients` clients:
/// requests per second and the p50 and p99 latencies in milliseconds.
fn redis_benchmark(port: u16, clients: usize, requests: usize) -> Result<(f64, f64, f64)> {
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &clients.to_string(), "-n", &requests.to_string()])
        .args(["-r", "1000000000", "-P", "1", "--csv"])
        .args(["SET", "bench:__rand_int__", "val", "NX", "PX", "86400000"])
        .output()
        .context("running redis-benchmark (apt-get install redis-tools)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms",…
    let row = text
        .lines()
        .find(|l| l.starts_with("\"SET"))
        .with_context(|| format!("no result in redis-benchmark's output: {text}"))?;
    let cells: Vec<f64> = row
        .split("\",\"")
        .skip(1)
        .filter_map(|c| c.trim_matches('"').parse().ok())
        .collect();
    match cells.as_slice() {
        [rps, _avg, _min, p50, _p95, p99, ..] => Ok((*rps, *p50, *p99)),
        _ => bail!("unexpected redis-benchmark row: {row}"),
    }
}

/// One measured line.
struct Line {
    tier: String,
    name: &'static str,
    conns: usize,
    rps: f64,
    p50: f64,
    p99: f64,
    errors: u64,
    sample: Option<String>,
}

impl Line {
    fn of(tier: &str, name: &'static str, conns: usize, r: &Report) -> Self {
        Self {
            tier: tier.to_owned(),
            name,
            conns,
            rps: r.throughput(),
            p50: r.ms(0.5),
            p99: r.ms(0.99),
            errors: r.errors,
            sample: r.sample_error.clone(),
        }
    }
}

fn redis_tier_config(port: u16, storm: usize) -> String {
    format!(
        "\n[server]\nmax_connections = {}\n\n[redis]\nurl = \"redis://127.0.0.1:{port}\"\n\
         pool_size = 4\n\n[[ledger.namespaces]]\nnamespace = \"bench\"\ntier = \"redis\"\n",
        storm + 64
    )
}

/// Runs the phases and prints the report; fails when an answer was wrong
/// or the storm did not have exactly one winner.
pub async fn run(mut args: RedisArgs) -> Result<()> {
    if args.phase.server.smoke {
        args.connections = vec![4];
        args.phase.shorten();
        args.storm = args.storm.min(100);
    }
    let bin = args.phase.server.server_bin()?;
    let redis = OwnRedis::start()?;
    let mut lines = Vec::new();
    for &c in &args.connections {
        let n = if args.phase.server.smoke {
            2_000
        } else {
            200_000
        };
        let (rps, p50, p99) = redis_benchmark(redis.port, c, n)?;
        eprintln!("  redis-benchmark SET NX PX {c:>4} clients: {rps:>8.0}/s p50 {p50:.2} ms p99 {p99:.2} ms");
        lines.push(Line {
            tier: "redis-benchmark".into(),
            name: "SET NX PX",
            conns: c,
            rps,
            p50,
            p99,
            errors: 0,
            sample: None,
        });
    }
    let mut storm = None;
    let tiers = std::iter::once("redis".to_owned()).chain(args.sql.iter().cloned());
    for tier in tiers {
        eprintln!("{tier} tier:");
        let backend: &str = if tier == "redis" { "sqlite" } else { &tier };
        let db = Database::create(backend, &args.phase.server.pg_url, "redis").await?;
        let extra = if tier == "redis" {
            redis_tier_config(redis.port, args.storm)
        } else {
            String::new()
        };
        let server = Server::start(&ServerSpec {
            bin: &bin,
            db_url: &db.url,
            max_connections: 0,
            env: &[],
            extra_config: &extra,
        })?;
        for &c in &args.connections {
            phases(&args, &server, &tier, c, &mut lines).await?;
        }
        if tier == "redis" {
            storm = Some(one_key_storm(&server, args.storm).await?);
        }
        server.stop()?;
        db.drop_now().await?;
    }
    println!("{}", render(&lines, storm));
    report(args.phase.server.smoke, &lines, storm)
}

/// The floor, new keys and duplicates at `c` connections.
async fn phases(
    args: &RedisArgs,
    server: &Server,
    tier: &str,
    c: usize,
    lines: &mut Vec<Line>,
) -> Result<()> {
    let (warmup, window) = (args.phase.warmup(), args.phase.window());
    let floor = load::run(server.addr, Arc::new(Noop), c, warmup, window).await?;
    let tag = format!("{tier}{c}");
    let fresh: Arc<dyn Workload> = Arc::new(NewClaims { tag: tag.clone() });
    let new = load::run(server.addr, fresh, c, warmup, window).await?;
    let dup = Arc::new(DupClaims {
        tag,
        sent: new.sent.clone(),
    });
    let dup = load::run(server.addr, dup, c, warmup, window).await?;
    for (name, r) in [
        ("noop (floor)", floor),
        ("new key", new),
        ("duplicate", dup),
    ] {
        eprintln!(
            "  {tier:8} {name:14} {c:>4} conns: {:>8.0}/s p50 {:.2} ms p99 {:.2} ms",
            r.throughput(),
            r.ms(0.5),
            r.ms(0.99)
        );
        lines.push(Line::of(tier, name, c, &r));
    }
    Ok(())
}

/// `n` concurrent claims of one key: (winners, non-200 answers, closed).
async fn one_key_storm(server: &Server, n: usize) -> Result<(usize, usize, usize, usize)> {
    let (answers, took) = load::burst(server.addr, n, |_| {
        workloads::claim_request("redis_storm_one_key")
    })
    .await?;
    let closed = answers.iter().filter(|a| a.is_none()).count();
    let answers: Vec<_> = answers.into_iter().flatten().collect();
    let winners = answers
        .iter()
        .filter(|(_, b)| workloads::claimed(b))
        .count();
    let bad = answers.iter().filter(|(s, _)| *s != 200).count();
    eprintln!(
        "  redis storm: {n} claims, {winners} winners, {bad} non-200, {closed} closed, {:.1} ms",
        took.as_secs_f64() * 1000.0
    );
    Ok((n, winners, bad, closed))
}

fn render(lines: &[Line], storm: Option<(usize, usize, usize, usize)>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n| tier | workload | conns | req/s | p50 ms | p99 ms |"
    );
    let _ = writeln!(out, "| --- | --- | ---: | ---: | ---: | ---: |");
    for l in lines {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.2} | {:.2} |",
            l.tier, l.name, l.conns, l.rps, l.p50, l.p99
        );
    }
    let rps = |tier: &str, name: &str, c: usize| {
        lines
            .iter()
            .find(|l| l.tier == tier && l.name == name && l.conns == c)
            .map(|l| l.rps)
    };
    let _ = writeln!(
        out,
        "\n| conns | redis new / floor (target ≥ 0.6) | redis new / redis-benchmark (≥ 0.5) | redis duplicate / floor (≥ 0.8) |"
    );
    let _ = writeln!(out, "| ---: | ---: | ---: | ---: |");
    let verdict = |r: f64, t: f64| format!("{r:.2} {}", if r >= t { "(met)" } else { "(missed)" });
    for &c in lines
        .iter()
        .filter(|l| l.tier == "redis" && l.name == "new key")
        .map(|l| &l.conns)
    {
        let (Some(floor), Some(new), Some(dup), Some(raw)) = (
            rps("redis", "noop (floor)", c),
            rps("redis", "new key", c),
            rps("redis", "duplicate", c),
            rps("redis-benchmark", "SET NX PX", c),
        ) else {
            continue;
        };
        let _ = writeln!(
            out,
            "| {c} | {} | {} | {} |",
            verdict(new / floor, 0.6),
            verdict(new / raw, 0.5),
            verdict(dup / floor, 0.8)
        );
    }
    if let Some((n, winners, bad, closed)) = storm {
        let _ = writeln!(
            out,
            "\nRedis-tier storm: {n} concurrent claims of one key, {winners} winner(s), {bad} non-200, {closed} closed."
        );
    }
    out
}

fn report(smoke: bool, lines: &[Line], storm: Option<(usize, usize, usize, usize)>) -> Result<()> {
    let mut wrong: Vec<String> = lines
        .iter()
        .filter(|l| l.errors > 0)
        .map(|l| format!("{} {} at {}: {:?}", l.tier, l.name, l.conns, l.sample))
        .collect();
    let checks = lines.len() + 1;
    match storm {
        Some((_, 1, 0, 0)) => {}
        Some((n, winners, bad, closed)) => wrong.push(format!(
            "storm of {n}: {winners} winners, {bad} non-200, {closed} closed (want exactly one winner, all answered)"
        )),
        None => wrong.push("no storm ran".into()),
    }
    if smoke {
        println!(
            "smoke: {} passed, {} failed",
            checks - wrong.len(),
            wrong.len()
        );
    }
    if !wrong.is_empty() {
        bail!("wrong answers:\n{}", wrong.join("\n"));
    }
    Ok(())
}
