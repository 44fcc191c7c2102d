//! The load generator: a fixed number of keep-alive HTTP/1.1 connections,
//! each sending its next request as soon as the previous answer is read
//! (a closed loop), latencies in an HDR histogram.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// What one connection sends and what counts as a right answer.
pub trait Workload: Send + Sync + 'static {
    /// Request number `seq` of connection `conn`.
    fn request(&self, conn: usize, seq: u64) -> Request<Full<Bytes>>;
    /// Whether `body` (with `status`) is the answer this workload expects.
    fn check(&self, status: u16, body: &[u8]) -> bool;
}

/// What one timed phase measured.
pub struct Report {
    /// Requests answered inside the measured window.
    pub requests: u64,
    /// Answers (warm-up, window and the last ones after it) that were not
    /// the expected one.
    pub errors: u64,
    /// One wrong answer, to show.
    pub sample_error: Option<String>,
    /// The window's length.
    pub window: Duration,
    /// Latency of the window's requests, in microseconds.
    pub hist: Histogram<u64>,
    /// Requests each connection sent in total (warm-up included).
    pub sent: Vec<u64>,
}

impl Report {
    /// Answers per second in the window.
    pub fn throughput(&self) -> f64 {
        self.requests as f64 / self.window.as_secs_f64()
    }

    /// A latency quantile in milliseconds.
    pub fn ms(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }
}

/// Opens one HTTP/1.1 connection.
pub async fn connect(addr: SocketAddr) -> Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true)?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// Sends one request and reads the whole answer.
pub async fn send(
    sender: &mut SendRequest<Full<Bytes>>,
    req: Request<Full<Bytes>>,
) -> Result<(u16, Bytes)> {
    sender.ready().await?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

/// Runs `workload` on `connections` connections: `warmup`, then a
/// measured `window`.
pub async fn run(
    addr: SocketAddr,
    workload: Arc<dyn Workload>,
    connections: usize,
    warmup: Duration,
    window: Duration,
) -> Result<Report> {
    let mut senders = Vec::with_capacity(connections);
    for _ in 0..connections {
        senders.push(connect(addr).await?);
    }
    let start = Instant::now() + Duration::from_millis(20);
    let from = start + warmup;
    let until = from + window;
    let tasks: Vec<_> = senders
        .into_iter()
        .enumerate()
        .map(|(conn, sender)| {
            let workload = workload.clone();
            tokio::spawn(connection_loop(workload, conn, sender, start, from, until))
        })
        .collect();
    let mut report = Report {
        requests: 0,
        errors: 0,
        sample_error: None,
        window,
        hist: new_histogram(),
        sent: Vec::with_capacity(connections),
    };
    for task in tasks {
        let one = task.await??;
        report.requests += one.requests;
        report.errors += one.errors;
        report.sample_error = report.sample_error.or(one.sample_error);
        report.hist.add(&one.hist)?;
        report.sent.extend(one.sent);
    }
    if report.sent.iter().all(|&n| n == 0) {
        bail!("no request was answered");
    }
    Ok(report)
}

/// A histogram from 1 µs to 100 s at three significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000, 3).expect("valid histogram bounds")
}

async fn connection_loop(
    workload: Arc<dyn Workload>,
    conn: usize,
    mut sender: SendRequest<Full<Bytes>>,
    start: Instant,
    from: Instant,
    until: Instant,
) -> Result<Report> {
    tokio::time::sleep_until(start.into()).await;
    let mut one = Report {
        requests: 0,
        errors: 0,
        sample_error: None,
        window: until - from,
        hist: new_histogram(),
        sent: vec![0],
    };
    let mut seq = 0u64;
    loop {
        let began = Instant::now();
        if began >= until {
            break;
        }
        let (status, body) = send(&mut sender, workload.request(conn, seq)).await?;
        seq += 1;
        let done = Instant::now();
        // Every answer is checked, in the window or not: on a loaded
        // machine a short window (the smoke run's) may close before the
        // first answer, and a wrong answer must still fail the run.
        if !workload.check(status, &body) {
            one.errors += 1;
            if one.sample_error.is_none() {
                one.sample_error = Some(format!("{status} {}", String::from_utf8_lossy(&body)));
            }
        }
        if began >= from && done <= until {
            one.requests += 1;
            one.hist
                .saturating_record(done.duration_since(began).as_micros() as u64);
        }
    }
    one.sent[0] = seq;
    Ok(one)
}

/// Opens `n` connections, then sends one request on each at the same
/// moment; returns every answer and the time until the last one.
pub async fn burst(
    addr: SocketAddr,
    n: usize,
    request: impl Fn(usize) -> Request<Full<Bytes>>,
) -> Result<(Vec<Option<(u16, Bytes)>>, Duration)> {
    let mut senders = Vec::with_capacity(n);
    for _ in 0..n {
        senders.push(connect(addr).await?);
    }
    let gate = Arc::new(tokio::sync::Barrier::new(n + 1));
    let tasks: Vec<_> = senders
        .into_iter()
        .enumerate()
        .map(|(i, mut sender)| {
            let gate = gate.clone();
            let req = request(i);
            tokio::spawn(async move {
                // Every task reaches the gate, even one whose connection the
                // server closed (beyond its `max_connections`), so the
                // burst never waits for a task that gave up.
                let ready = sender.ready().await;
                gate.wait().await;
                match ready {
                    Ok(()) => send(&mut sender, req).await.ok(),
                    Err(_) => None,
                }
            })
        })
        .collect();
    gate.wait().await;
    let started = Instant::now();
    let mut answers = Vec::with_capacity(n);
    for task in tasks {
        answers.push(task.await?);
    }
    Ok((answers, started.elapsed()))
}
