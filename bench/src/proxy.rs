//! `oncegate-bench proxy`: the Idempotency-Key proxy against the real
//! release binary. In one run, per backend and connection count: the
//! no-op floor, the same request straight to a local upstream, through
//! the proxy with a new key each time, and through the proxy with keys it
//! already answered (replays). Replays are measured twice: as they come
//! by default (from the answers the server completed lately, in its
//! memory) and through a second proxy that keeps none in memory
//! (`replay_cache_bytes = 0`), so every replay reads the database (a retry
//! that reaches another node, or comes after ten minutes). The report
//! gives the latency the proxy adds for a new key and the replays' share
//! of the floor.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{bail, Result};
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::Request;

use crate::db::Database;
use crate::load::{self, Report, Workload};
use crate::phases::PhaseArgs;
use crate::server::{Server, ServerSpec, TOKEN};
use crate::workloads::{key, Noop};

/// The upstream's answer, and what every proxied answer must be.
const ANSWER: &str = r#"{"id":"lead_1","status":"created"}"#;
/// The request body every phase sends.
const BODY: &str = r#"{"name":"Ada Lovelace","email":"ada@example.com","source":"n8n"}"#;

/// What the proxy benchmark runs.
#[derive(Debug, clap::Args)]
pub struct ProxyArgs {
    /// Backends to measure, in one run.
    #[arg(long, value_delimiter = ',', default_value = "sqlite,postgres")]
    pub backends: Vec<String>,
    /// Connection counts.
    #[arg(long, value_delimiter = ',', default_value = "64")]
    pub connections: Vec<usize>,
    /// Phase length, the server binary, PostgreSQL, smoke mode.
    #[command(flatten)]
    pub phase: PhaseArgs,
}

/// `POST /api/leads` straight to the upstream.
struct Direct;

/// `POST /proxy/{proxy}/leads` with a key per `(tag, conn, seq)`.
struct Proxied {
    /// `bench` (replays from memory) or `bench-read` (from the database).
    proxy: &'static str,
    tag: String,
    /// `Some`: repeat the keys a new-key phase sent (replays).
    sent: Option<Vec<u64>>,
}

fn post(path: &str, key: Option<String>) -> Request<Full<Bytes>> {
    let mut req = Request::post(path)
        .header(HOST, "127.0.0.1")
        .header(CONTENT_TYPE, "application/json")
        .header(AUTHORIZATION, format!("Bearer {TOKEN}"));
    if let Some(key) = key {
        req = req.header("idempotency-key", format!("\"{key}\""));
    }
    req.body(Full::new(Bytes::from_static(BODY.as_bytes())))
        .expect("a valid request")
}

impl Workload for Direct {
    fn request(&self, _conn: usize, _seq: u64) -> Request<Full<Bytes>> {
        post("/api/leads", None)
    }

    fn check(&self, status: u16, body: &[u8]) -> bool {
        status == 201 && body == ANSWER.as_bytes()
    }
}

impl Workload for Proxied {
    fn request(&self, conn: usize, seq: u64) -> Request<Full<Bytes>> {
        let (owner, seq) = match &self.sent {
            Some(sent) => {
                let owner = conn % sent.len();
                (owner, seq % sent[owner].max(1))
            }
            None => (conn, seq),
        };
        let path = format!("/proxy/{}/leads", self.proxy);
        post(&path, Some(key(&self.tag, owner, seq)))
    }

    fn check(&self, status: u16, body: &[u8]) -> bool {
        status == 201 && body == ANSWER.as_bytes()
    }
}

/// A local upstream on 127.0.0.1 that answers every POST with 201.
async fn upstream() -> Result<SocketAddr> {
    use axum::http::StatusCode;
    let app = axum::Router::new().route(
        "/api/leads",
        axum::routing::post(|| async {
            (
                StatusCode::CREATED,
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                ANSWER,
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}

/// The target and proxies the server is started with.
fn proxy_config(upstream: SocketAddr) -> String {
    format!(
        "\n[[targets]]\nname = \"upstream\"\nbase_url = \"http://{upstream}/api\"\n\
         concurrency = 256\n\n[[proxies]]\nname = \"bench\"\ntarget = \"upstream\"\n\
         \n[[proxies]]\nname = \"bench-read\"\ntarget = \"upstream\"\nreplay_cache_bytes = 0\n"
    )
}

/// Runs the phases and prints the report; fails when an answer was wrong.
pub async fn run(mut args: ProxyArgs) -> Result<()> {
    if args.phase.server.smoke {
        args.connections = vec![4];
        args.phase.shorten();
    }
    let bin = args.phase.server.server_bin()?;
    let up = upstream().await?;
    let extra = proxy_config(up);
    let mut lines: Vec<(&'static str, &'static str, usize, Report)> = Vec::new();
    for backend in &args.backends {
        eprintln!("{backend}:");
        let db = Database::create(backend, &args.phase.server.pg_url, "proxy").await?;
        let server = Server::start(&ServerSpec {
            bin: &bin,
            db_url: &db.url,
            max_connections: 0,
            env: &[],
            extra_config: &extra,
        })?;
        for &c in &args.connections {
            for (name, report) in phases(&args, server.addr, up, c).await? {
                show(db.backend, name, c, &report);
                lines.push((db.backend, name, c, report));
            }
        }
        server.stop()?;
        db.drop_now().await?;
    }
    println!("{}", render(&lines));
    let wrong: Vec<String> = lines
        .iter()
        .filter(|l| l.3.errors > 0)
        .map(|l| format!("{} {} at {}: {:?}", l.0, l.1, l.2, l.3.sample_error))
        .collect();
    if args.phase.server.smoke {
        println!(
            "smoke: {} passed, {} failed",
            lines.len() - wrong.len(),
            wrong.len()
        );
    }
    if !wrong.is_empty() {
        bail!("wrong answers:\n{}", wrong.join("\n"));
    }
    Ok(())
}

/// The six phases at `c` connections.
async fn phases(
    args: &ProxyArgs,
    server: SocketAddr,
    up: SocketAddr,
    c: usize,
) -> Result<Vec<(&'static str, Report)>> {
    let (warmup, window) = (args.phase.warmup(), args.phase.window());
    let floor = load::run(server, Arc::new(Noop), c, warmup, window).await?;
    let direct = load::run(up, Arc::new(Direct), c, warmup, window).await?;
    let mut out = vec![("noop (floor)", floor), ("upstream direct", direct)];
    for (proxy, names) in [
        ("bench", ["proxy new key", "proxy replay"]),
        ("bench-read", ["proxy new key (2)", "proxy replay, read"]),
    ] {
        let tag = format!("{proxy}{c}");
        let fresh = Proxied {
            proxy,
            tag: tag.clone(),
            sent: None,
        };
        let new = load::run(server, Arc::new(fresh), c, warmup, window).await?;
        let replay = Proxied {
            proxy,
            tag,
            sent: Some(new.sent.clone()),
        };
        let replayed = load::run(server, Arc::new(replay), c, warmup, window).await?;
        out.extend([(names[0], new), (names[1], replayed)]);
    }
    Ok(out)
}

fn show(backend: &str, name: &str, c: usize, r: &Report) {
    eprintln!(
        "  {backend:8} {name:18} {c:>4} conns: {:>8.0}/s p50 {:.2} ms p99 {:.2} ms",
        r.throughput(),
        r.ms(0.5),
        r.ms(0.99)
    );
}

fn render(lines: &[(&'static str, &'static str, usize, Report)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n| backend | workload | conns | req/s | p50 ms | p99 ms |"
    );
    let _ = writeln!(out, "| --- | --- | ---: | ---: | ---: | ---: |");
    for (backend, name, c, r) in lines {
        let _ = writeln!(
            out,
            "| {backend} | {name} | {c} | {:.0} | {:.2} | {:.2} |",
            r.throughput(),
            r.ms(0.5),
            r.ms(0.99)
        );
    }
    let find = |b: &str, n: &str, c: usize| {
        lines
            .iter()
            .find(|l| l.0 == b && l.1 == n && l.2 == c)
            .map(|l| &l.3)
    };
    let _ = writeln!(
        out,
        "\n| backend | conns | added p50, new key (target < 1 ms) | replay / floor (target ≥ 0.6) | replay read from the database / floor |"
    );
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: |");
    for (backend, name, c, _) in lines.iter().filter(|l| l.1 == "noop (floor)") {
        let _ = name;
        let (Some(floor), Some(direct), Some(new), Some(replay), Some(read)) = (
            find(backend, "noop (floor)", *c),
            find(backend, "upstream direct", *c),
            find(backend, "proxy new key", *c),
            find(backend, "proxy replay", *c),
            find(backend, "proxy replay, read", *c),
        ) else {
            continue;
        };
        let added = new.ms(0.5) - direct.ms(0.5);
        let ratio = replay.throughput() / floor.throughput();
        let read = read.throughput() / floor.throughput();
        let _ = writeln!(
            out,
            "| {backend} | {c} | {added:.2} ms {} | {ratio:.2} {} | {read:.2} |",
            if added < 1.0 { "(met)" } else { "(missed)" },
            if ratio >= 0.6 { "(met)" } else { "(missed)" },
        );
    }
    out
}
