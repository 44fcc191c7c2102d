//! The real binary against hostile or broken surroundings (issue 25): a
//! closed log pipe, trickled headers, idle and surplus connections, a
//! flood of unauthenticated bodies, stalled bodies, framework answers
//! without security headers, files readable by others, an open `/metrics`,
//! and a request framed by both Content-Length and chunked encoding.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use crate::process::{command, write_config_with};

/// A source to post unauthenticated deliveries to, and no dispatcher.
const SOURCE: &str = "\
[dispatcher]\nenabled = false\n\n\
[[targets]]\nname = \"n8n\"\nbase_url = \"http://127.0.0.1:9/webhook\"\nkind = \"workflow\"\n\n\
[[sources]]\nname = \"shop\"\nscheme = \"stripe\"\nsecrets = [\"whsec_current_secret\"]\ntarget = \"n8n\"\nmax_body_bytes = 65536\n";

/// An `oncegate serve` process, killed on drop whatever the test's outcome.
struct Proc {
    child: Child,
    addr: String,
    /// Its stderr, until a test closes it.
    stderr: Option<BufReader<std::process::ChildStderr>>,
    _dir: tempfile::TempDir,
    secret: String,
    /// Where `/metrics` is served (the "listening" line's `metrics`).
    metrics: String,
}

impl Proc {
    /// Starts the binary on a fresh SQLite file with `[server]` lines
    /// `server`; its later log lines are drained so a full pipe never
    /// stalls the logger.
    fn start(server: &str) -> Self {
        let mut proc = Self::start_holding_stderr(server);
        let mut rest = proc.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = rest.read_to_end(&mut sink);
        });
        proc
    }

    /// The same, with stderr left in the test's hands after the
    /// "listening" line.
    fn start_holding_stderr(server: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("oncegate.db").display());
        let extra = format!("{SOURCE}\n[server]\n{server}\n");
        let (config, secret) = write_config_with(dir.path(), &url, &extra);
        let mut child = command(&["--log-format", "json", "serve"])
            .env("ONCEGATE_CONFIG", &config)
            .env("ONCEGATE_LISTEN", "127.0.0.1:0")
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn oncegate");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let (addr, metrics) = loop {
            let mut line = String::new();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "exited early");
            if let Ok(event) = serde_json::from_str::<Value>(&line) {
                if event["message"] == "oncegate listening" {
                    let field = |name: &str| event[name].as_str().unwrap().to_owned();
                    break (field("address"), field("metrics"));
                }
            }
        };
        Self {
            child,
            addr,
            stderr: Some(stderr),
            _dir: dir,
            secret,
            metrics,
        }
    }

    fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        stream
    }

    /// SIGTERM, then the exit status within `deadline` (None: still running).
    fn terminate_within(&mut self, deadline: Duration) -> Option<std::process::ExitStatus> {
        kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM).unwrap();
        let until = Instant::now() + deadline;
        while Instant::now() < until {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads what the server sends until it closes (`true`) or `within`
/// passes (`false`); what was read is appended to `got`.
fn closed_within(stream: &mut TcpStream, within: Duration, got: &mut Vec<u8>) -> bool {
    let until = Instant::now() + within;
    let mut buf = [0u8; 4096];
    while Instant::now() < until {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

/// One raw HTTP/1.1 request on a new connection; the whole answer.
fn raw(proc: &Proc, request: &str) -> String {
    let mut stream = proc.connect();
    stream.write_all(request.as_bytes()).unwrap();
    let mut got = Vec::new();
    closed_within(&mut stream, Duration::from_secs(5), &mut got);
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_log_pipe_stops_neither_requests_nor_shutdown() {
    let mut proc = Proc::start_holding_stderr("");
    // The reading end goes away: every later log line meets EPIPE.
    drop(proc.stderr.take());
    let client = reqwest::Client::new();
    for i in 0..40 {
        // Each request logs a line (claims at info).
        let resp = client
            .post(format!("{}/v1/claims", proc.base()))
            .bearer_auth(&proc.secret)
            .json(&serde_json::json!({ "namespace": "crm", "key": format!("k{i}"), "payload": {} }))
            .send()
            .await
            .unwrap_or_else(|e| panic!("request {i} got no answer: {e}"));
        assert_eq!(resp.status(), 200, "request {i}");
    }
    let resp = client
        .get(format!("{}/nowhere", proc.base()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let status = proc
        .terminate_within(Duration::from_secs(10))
        .expect("SIGTERM with a closed log pipe stops the server within 10 s");
    assert!(status.success(), "{status}");
}

#[test]
fn trickled_headers_are_cut_off_at_the_header_read_timeout() {
    let proc = Proc::start("header_read_timeout_ms = 1000\nidle_timeout_ms = 60000");
    let mut stream = proc.connect();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let started = Instant::now();
    let mut closed = false;
    let mut got = Vec::new();
    // One header line every 200 ms, for up to 10 s.
    for i in 0..50 {
        if stream
            .write_all(format!("X-Slow-{i}: 1\r\n").as_bytes())
            .is_err()
        {
            closed = true;
            break;
        }
        if closed_within(&mut stream, Duration::from_millis(200), &mut got) {
            closed = true;
            break;
        }
    }
    let took = started.elapsed();
    assert!(closed, "a trickled head was still open after {took:?}");
    assert!(took < Duration::from_secs(5), "closed only after {took:?}");
    let text = String::from_utf8_lossy(&got);
    assert!(
        !text.contains("200 OK"),
        "the trickled request was served: {text}"
    );
}

#[test]
fn an_idle_keep_alive_connection_is_closed_at_the_idle_timeout() {
    let proc = Proc::start("header_read_timeout_ms = 60000\nidle_timeout_ms = 1000");
    let mut stream = proc.connect();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let started = Instant::now();
    let mut got = Vec::new();
    let closed = closed_within(&mut stream, Duration::from_secs(10), &mut got);
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(closed, "an idle connection was still open after 10 s");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn connections_beyond_the_cap_are_closed_and_a_freed_slot_serves_healthz() {
    let proc =
        Proc::start("max_connections = 4\nheader_read_timeout_ms = 60000\nidle_timeout_ms = 60000");
    // Four idle connections hold every slot.
    let mut held: Vec<TcpStream> = (0..4).map(|_| proc.connect()).collect();
    // Let the server accept them all (one round trip on the last one
    // would use it; polling the fifth for refusal does the waiting).
    let until = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        let answer = raw(
            &proc,
            "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        if answer.is_empty() {
            break true;
        }
        if Instant::now() > until {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(refused, "a fifth connection was served with the cap at 4");
    // One slot freed: /healthz answers again.
    drop(held.pop());
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = raw(
            &proc,
            "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            Instant::now() < until,
            "/healthz never answered on the freed slot"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(held);
}

/// Whether the server answered on (or closed) `stream`, without waiting.
fn answered(stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let answered = !matches!(
        stream.peek(&mut [0u8; 1]),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
    );
    stream.set_nonblocking(false).unwrap();
    answered
}

/// A delivery's head with `length`, and the first `sent` bytes of its body.
fn start_delivery(proc: &Proc, length: usize, sent: usize) -> TcpStream {
    let mut stream = proc.connect();
    let head = format!(
        "POST /hooks/shop HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&vec![b' '; sent]).unwrap();
    stream
}

#[test]
fn unauthenticated_bodies_beyond_the_budget_are_refused_with_503() {
    // Two 64 KiB deliveries in flight fill a 128 KiB budget.
    let proc = Proc::start(
        "max_body_bytes = 65536\nunauthenticated_body_budget_bytes = 131072\nbody_read_timeout_ms = 60000",
    );
    let mut held = [
        start_delivery(&proc, 65536, 10),
        start_delivery(&proc, 65536, 10),
    ];
    // A deadline, not a timing: on a loaded machine the server may take a
    // while to read the two held heads and reserve their bytes.
    let until = Instant::now() + Duration::from_secs(30);
    let refusal = loop {
        // A probe can reserve its bytes just before the second held
        // delivery's head is read; that delivery is then the one refused,
        // and is sent again.
        for stream in &mut held {
            if answered(stream) {
                *stream = start_delivery(&proc, 65536, 10);
            }
        }
        let body = "{\"id\":\"evt_1\"}";
        let answer = raw(
            &proc,
            &format!("POST /hooks/shop HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()),
        );
        if answer.starts_with("HTTP/1.1 503") {
            break answer;
        }
        assert!(
            Instant::now() < until,
            "never refused with the budget full: {answer}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(refusal.contains("body-budget-exhausted"), "{refusal}");
    assert!(
        refusal.to_ascii_lowercase().contains("retry-after:"),
        "{refusal}"
    );
    // Released: a delivery is read again (and refused for its signature).
    drop(held);
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let body = "{\"id\":\"evt_2\"}";
        let answer = raw(
            &proc,
            &format!("POST /hooks/shop HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()),
        );
        if answer.starts_with("HTTP/1.1 401") {
            break;
        }
        assert!(
            Instant::now() < until,
            "the budget never came back: {answer}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_stalled_body_is_answered_408_at_the_body_read_timeout() {
    let proc = Proc::start("body_read_timeout_ms = 1000");
    let mut stream = start_delivery(&proc, 1000, 10);
    let started = Instant::now();
    let mut got = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while !String::from_utf8_lossy(&got).contains("\r\n\r\n") && Instant::now() < until {
        closed_within(&mut stream, Duration::from_millis(200), &mut got);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_frameworks_own_answers_carry_the_security_headers() {
    let proc = Proc::start("");
    let client = reqwest::Client::new();
    let answers = [
        client
            .get(format!("{}/nowhere", proc.base()))
            .send()
            .await
            .unwrap(),
        client
            .delete(format!("{}/healthz", proc.base()))
            .send()
            .await
            .unwrap(),
        client
            .post(format!("{}/v1/claims", proc.base()))
            .bearer_auth(&proc.secret)
            .header("content-type", "text/plain")
            .body("{}")
            .send()
            .await
            .unwrap(),
        client
            .get(format!("{}/healthz", proc.base()))
            .send()
            .await
            .unwrap(),
    ];
    let statuses: Vec<u16> = answers.iter().map(|r| r.status().as_u16()).collect();
    assert_eq!(statuses[..2], [404, 405]);
    assert!(matches!(statuses[2], 400 | 415), "{statuses:?}");
    for resp in &answers {
        let h = resp.headers();
        assert_eq!(h["x-content-type-options"], "nosniff", "{}", resp.status());
        assert_eq!(h["x-frame-options"], "DENY", "{}", resp.status());
        assert_eq!(h["referrer-policy"], "no-referrer", "{}", resp.status());
        assert!(
            h.contains_key("content-security-policy"),
            "{}",
            resp.status()
        );
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_and_its_backup_are_readable_by_the_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let proc = Proc::start("");
    let dir = proc._dir.path();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.join("oncegate.db")), 0o600);
    for side in ["oncegate.db-wal", "oncegate.db-shm"] {
        if dir.join(side).exists() {
            assert_eq!(mode(&dir.join(side)), 0o600, "{side}");
        }
    }
    let out = command(&["backup", "copy.db"])
        .env("ONCEGATE_CONFIG", dir.join("oncegate.toml"))
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(&dir.join("copy.db")), 0o600);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("copying the database"),
        "no progress spinner into a pipe: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_the_metrics_token_when_one_is_configured() {
    let (secret, digest) = (
        "og_metrics_scraper_token",
        oncegate::tokens::digest("og_metrics_scraper_token"),
    );
    let proc = Proc::start(&format!("metrics_token_digest = \"{digest}\""));
    let client = reqwest::Client::new();
    let url = format!("{}/metrics", proc.base());
    assert_eq!(client.get(&url).send().await.unwrap().status(), 401);
    let wrong = client
        .get(&url)
        .bearer_auth(&proc.secret)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let right = client.get(&url).bearer_auth(secret).send().await.unwrap();
    assert_eq!(right.status(), 200);
    assert!(right.text().await.unwrap().contains("oncegate_"));
    // The probes stay open.
    let health = client
        .get(format!("{}/healthz", proc.base()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}

/// `[metrics] listen` serves `/metrics` on a listener of its own (a
/// private address for the scraper), and the main listener no longer does.
#[tokio::test]
async fn metrics_can_have_a_listener_of_their_own() {
    let proc = Proc::start("[metrics]\nlisten = \"127.0.0.1:0\"");
    assert_ne!(proc.metrics, proc.addr);
    let client = reqwest::Client::new();
    let get = |url: String| {
        let client = client.clone();
        async move { client.get(url).send().await.unwrap() }
    };
    assert_eq!(get(format!("{}/metrics", proc.base())).await.status(), 404);
    assert_eq!(get(format!("{}/healthz", proc.base())).await.status(), 200);
    let scrape = get(format!("http://{}/metrics", proc.metrics)).await;
    assert_eq!(scrape.status(), 200);
    assert!(scrape.text().await.unwrap().contains("oncegate_"));
    let other = get(format!("http://{}/healthz", proc.metrics)).await;
    assert_eq!(
        other.status(),
        404,
        "the metrics listener serves nothing else"
    );
}

/// hyper frames a request that carries both Content-Length and chunked
/// encoding by the chunked encoding alone and drops Content-Length (RFC
/// 9112 §6.3 allows this): one answer, and bytes past the declared
/// length are never served as a request of their own.
#[test]
fn content_length_with_chunked_encoding_is_framed_by_chunked_alone() {
    let proc = Proc::start("");
    let body = "{\"id\":\"evt_smuggle\"}";
    let chunked = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
    let answer = raw(
        &proc,
        &format!("POST /hooks/shop HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n{chunked}GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    );
    // One answer: the delivery, framed by the chunked body (unsigned:
    // 401); nothing past it is served as a request of its own.
    let statuses: Vec<&str> = answer.split("HTTP/1.1 ").skip(1).map(|r| &r[..3]).collect();
    assert_eq!(statuses, ["401"], "{answer}");
}
