//! A programmable HTTP target for the dispatcher tests.
//!
//! [`MockTarget`] listens on `127.0.0.1:0` inside the test process, records
//! every request and answers each one as the test says, including outcomes
//! a framework handler cannot produce: committing an effect and then
//! hanging, or closing the connection before any response byte. It counts
//! what these tests care about: the *effects* the target committed (once
//! per key when it honours idempotency keys), so a test asserts "exactly
//! once" at the target, not in the logs.
//!
//! HTTP/1.1 is parsed by hand (request line, headers, `Content-Length`
//! body, keep-alive) because closing a socket mid-exchange needs control
//! that a framework does not give.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::{CancellationToken, DropGuard};

/// One request as the target received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// Names are lower-case; values are trimmed.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The value of the key header (see [`MockTarget::honour_keys`]).
    pub idempotency_key: Option<String>,
}

impl Recorded {
    /// The first value of header `name`, matched case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        let mut values = self
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name));
        values.next().map(|(_, v)| v.as_str())
    }
}

/// How the target answers a request.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// Commits the effect (whatever the status) and answers.
    Respond {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Answers without committing: a 503 from a proxy in front of the
    /// target, a 404 from a webhook that is not registered yet.
    RespondNoCommit {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Reads the request, commits nothing and never answers; the connection
    /// stays open until the client gives up.
    Hang,
    /// Commits, then never answers: the client times out after sending and
    /// cannot know whether the effect happened.
    CommitThenHang,
    /// Commits, then closes the connection without a single response byte.
    CommitThenClose,
    /// Reads the request, then closes the connection without committing.
    CloseWithoutCommit,
    /// Commits and answers `status` reflecting the request's headers: all
    /// of them as a JSON body, and their values in `x-request-id` (a debug
    /// endpoint, an error page that quotes the request).
    EchoHeaders { status: u16 },
    /// Commits, then answers `status` with `body` only once the test adds
    /// a permit to `gate` (a slow upstream the test releases by hand).
    Held {
        status: u16,
        body: String,
        gate: Arc<tokio::sync::Semaphore>,
    },
    /// Commits, then answers 200 with a chunked body that never ends (a
    /// stream), until the client hangs up.
    Stream,
}

impl Behaviour {
    /// [`Behaviour::Respond`] with `status` and the JSON body `{}`.
    pub fn status(status: u16) -> Self {
        Self::json(status, "{}")
    }

    /// [`Behaviour::Respond`] with `status` and a JSON `body`.
    pub fn json(status: u16, body: &str) -> Self {
        let Reply { headers, body, .. } = Reply::json(status, body);
        Self::Respond {
            status,
            headers,
            body,
        }
    }

    /// [`Behaviour::RespondNoCommit`] with `status` and the JSON body `{}`.
    pub fn no_commit(status: u16) -> Self {
        let Reply { headers, body, .. } = Reply::json(status, "{}");
        Self::RespondNoCommit {
            status,
            headers,
            body,
        }
    }
}

/// A response to write, or one stored under a committed key.
#[derive(Debug, Clone)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn json(status: u16, body: &str) -> Self {
        let headers = vec![("content-type".into(), "application/json".into())];
        let body = body.to_owned();
        Self {
            status,
            headers,
            body,
        }
    }
}

/// What the connection does once the target has decided.
enum Action {
    Reply(Reply),
    Held(Reply, Arc<tokio::sync::Semaphore>),
    Stream,
    Hang,
    Close,
}

impl From<Behaviour> for Action {
    fn from(behaviour: Behaviour) -> Self {
        match behaviour {
            Behaviour::Respond {
                status,
                headers,
                body,
            }
            | Behaviour::RespondNoCommit {
                status,
                headers,
                body,
            } => Action::Reply(Reply {
                status,
                headers,
                body,
            }),
            Behaviour::Held { status, body, gate } => {
                Action::Held(Reply::json(status, &body), gate)
            }
            Behaviour::Stream => Action::Stream,
            Behaviour::Hang | Behaviour::CommitThenHang | Behaviour::EchoHeaders { .. } => {
                Action::Hang
            }
            Behaviour::CommitThenClose | Behaviour::CloseWithoutCommit => Action::Close,
        }
    }
}

/// The behaviours for one path, in order; the last one repeats.
struct Rule {
    seq: Vec<Behaviour>,
    next: usize,
}

struct State {
    default: Behaviour,
    rules: HashMap<String, Rule>,
    probes: Vec<String>,
    key_header: String,
    honour_keys: bool,
    requests: Vec<Recorded>,
    effects: Vec<Recorded>,
    /// The first reply committed under each key, replayed while keys are honoured.
    stored: HashMap<String, Reply>,
}

/// A local HTTP server that records requests and answers them as configured.
///
/// Clones share one server; it stops, closing its connections, when the
/// last clone is dropped.
#[derive(Clone)]
pub struct MockTarget {
    state: Arc<Mutex<State>>,
    addr: SocketAddr,
    _shutdown: Arc<DropGuard>,
}

impl MockTarget {
    /// Binds `127.0.0.1:0` and starts serving. Until configured otherwise,
    /// every request commits and gets `200 {}`.
    pub async fn start() -> MockTarget {
        Self::start_on("127.0.0.1:0").await
    }

    /// As [`MockTarget::start`], bound to `addr` (a loopback address).
    pub async fn start_on(addr: &str) -> MockTarget {
        let listener = TcpListener::bind(addr).await.expect("bind mock target");
        let addr = listener.local_addr().expect("mock target address");
        let state = Arc::new(Mutex::new(State {
            default: Behaviour::status(200),
            rules: HashMap::new(),
            probes: Vec::new(),
            key_header: "idempotency-key".into(),
            honour_keys: false,
            requests: Vec::new(),
            effects: Vec::new(),
            stored: HashMap::new(),
        }));
        let cancel = CancellationToken::new();
        tokio::spawn(accept_loop(listener, Arc::clone(&state), cancel.clone()));
        let _shutdown = Arc::new(cancel.drop_guard());
        MockTarget {
            state,
            addr,
            _shutdown,
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The base URL followed by `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url())
    }

    /// Sets the behaviour for paths that have none of their own.
    pub fn set_default(&self, behaviour: Behaviour) {
        self.state().default = behaviour;
    }

    /// Answers every request to `path` (without the query) with `behaviour`.
    pub fn on_path(&self, path: &str, behaviour: Behaviour) {
        self.on_path_seq(path, vec![behaviour]);
    }

    /// Answers successive requests to `path` with `seq` in order, then
    /// repeats its last behaviour. Replays of honoured keys do not advance it.
    ///
    /// # Panics
    /// If `seq` is empty.
    pub fn on_path_seq(&self, path: &str, seq: Vec<Behaviour>) {
        assert!(!seq.is_empty(), "on_path_seq({path}) needs a behaviour");
        self.state()
            .rules
            .insert(path.into(), Rule { seq, next: 0 });
    }

    /// Makes `GET` requests under `prefix` a read-by-reference probe: `200
    /// {"found":true,"key":…}` when the path after `prefix/`, or any query
    /// value, percent-decoded, is a committed key; else `404
    /// {"found":false}`. Probes are recorded but never count as effects.
    pub fn on_probe(&self, prefix: &str) {
        self.state().probes.push(prefix.into());
    }

    /// Reads keys from `header` (initially `idempotency-key`). While `on`,
    /// a request whose key was already committed gets the stored response
    /// again, with `idempotent-replayed: true`, and is not a new effect.
    /// When that response was never sent (`CommitThenHang`,
    /// `CommitThenClose`), the stored one is `200 {}`.
    pub fn honour_keys(&self, header: &str, on: bool) {
        let mut state = self.state();
        state.key_header = header.to_ascii_lowercase();
        state.honour_keys = on;
    }

    /// Every request received, in order, including replays and probes.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state().requests.clone()
    }

    /// The requests that committed an effect, in order.
    pub fn effects(&self) -> Vec<Recorded> {
        self.state().effects.clone()
    }

    /// How many effects were committed under `key`.
    pub fn effect_count_for_key(&self, key: &str) -> usize {
        let effects = self.effects();
        effects
            .iter()
            .filter(|e| e.idempotency_key.as_deref() == Some(key))
            .count()
    }

    /// Polls until at least `n` requests have arrived, then returns them all.
    ///
    /// # Panics
    /// If they have not arrived within `timeout`; the message lists those that did.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<Recorded> {
        // A wall-clock deadline, so this also works while tokio time is paused.
        let deadline = Instant::now() + timeout;
        loop {
            let seen = self.requests();
            if seen.len() >= n {
                return seen;
            }
            if Instant::now() >= deadline {
                let seen: Vec<_> = seen
                    .iter()
                    .map(|r| format!("{} {}", r.method, r.path))
                    .collect();
                panic!("mock target: expected {n} request(s) within {timeout:?}, got {seen:?}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("mock target state")
    }
}

/// [`Behaviour::EchoHeaders`] for `request`.
fn echo(status: u16, request: &Recorded) -> Behaviour {
    let headers: serde_json::Map<String, serde_json::Value> = request
        .headers
        .iter()
        .map(|(n, v)| (n.clone(), json!(v)))
        .collect();
    let values: Vec<&str> = request.headers.iter().map(|(_, v)| v.as_str()).collect();
    let mut reply = Reply::json(status, &json!({ "headers": headers }).to_string());
    reply
        .headers
        .push(("x-request-id".into(), values.join(" ")));
    Behaviour::Respond {
        status,
        headers: reply.headers,
        body: reply.body,
    }
}

impl State {
    /// Records `request` and decides its fate. Callers hold the lock
    /// throughout, so two concurrent requests with one honoured key never
    /// both commit.
    fn handle(&mut self, mut request: Recorded) -> Action {
        request.idempotency_key = request.header(&self.key_header).map(str::to_owned);
        self.requests.push(request.clone());
        if request.method == "GET" {
            if let Some(reply) = self.probe(&request) {
                return Action::Reply(reply);
            }
        }
        let stored = request
            .idempotency_key
            .as_ref()
            .and_then(|k| self.stored.get(k));
        if let (true, Some(stored)) = (self.honour_keys, stored) {
            let mut replay = stored.clone();
            replay
                .headers
                .push(("idempotent-replayed".into(), "true".into()));
            return Action::Reply(replay);
        }
        let behaviour = match self.next_behaviour(&request.path) {
            Behaviour::EchoHeaders { status } => echo(status, &request),
            other => other,
        };
        let commits = matches!(
            behaviour,
            Behaviour::Respond { .. }
                | Behaviour::CommitThenHang
                | Behaviour::CommitThenClose
                | Behaviour::Held { .. }
                | Behaviour::Stream
        );
        let action = Action::from(behaviour);
        if commits {
            let reply = match &action {
                Action::Reply(reply) | Action::Held(reply, _) => reply.clone(),
                Action::Stream | Action::Hang | Action::Close => Reply::json(200, "{}"),
            };
            if let Some(key) = &request.idempotency_key {
                self.stored.entry(key.clone()).or_insert(reply);
            }
            self.effects.push(request);
        }
        action
    }

    fn next_behaviour(&mut self, path: &str) -> Behaviour {
        let Some(rule) = self.rules.get_mut(path) else {
            return self.default.clone();
        };
        let behaviour = rule.seq[rule.next.min(rule.seq.len() - 1)].clone();
        rule.next += 1;
        behaviour
    }

    /// The probe's answer, if `request` is under a probe prefix.
    fn probe(&self, request: &Recorded) -> Option<Reply> {
        let path = &request.path;
        let tail = self.probes.iter().find_map(|prefix| {
            let rest = path.strip_prefix(prefix.as_str())?;
            (rest.is_empty() || rest.starts_with('/') || prefix.ends_with('/'))
                .then(|| rest.trim_start_matches('/'))
        })?;
        let query = request.query.iter().flat_map(|q| q.split('&'));
        let found = query
            .map(|pair| pair.split_once('=').map_or(pair, |(_, value)| value))
            .chain(Some(tail).filter(|t| !t.is_empty()))
            .map(percent_decode)
            .find(|key| {
                self.effects
                    .iter()
                    .any(|e| e.idempotency_key.as_ref() == Some(key))
            });
        let reply = match found {
            Some(key) => Reply::json(200, &json!({ "found": true, "key": key }).to_string()),
            None => Reply::json(404, r#"{"found":false}"#),
        };
        Some(reply)
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>, cancel: CancellationToken) {
    loop {
        let stream = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        let (state, cancel) = (Arc::clone(&state), cancel.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = serve_connection(stream, &state) => {}
            }
        });
    }
}

/// Serves requests on one connection until either side closes it.
async fn serve_connection(stream: TcpStream, state: &Mutex<State>) {
    let mut conn = BufReader::new(stream);
    while let Ok(Some(request)) = read_request(&mut conn).await {
        let closing = request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let action = state.lock().expect("mock target state").handle(request);
        match action {
            Action::Reply(reply) => {
                if write_reply(conn.get_mut(), &reply).await.is_err() || closing {
                    return;
                }
            }
            Action::Held(reply, gate) => {
                if let Ok(permit) = gate.acquire().await {
                    permit.forget();
                }
                if write_reply(conn.get_mut(), &reply).await.is_err() || closing {
                    return;
                }
            }
            Action::Stream => {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                            transfer-encoding: chunked\r\n\r\n";
                if conn.get_mut().write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = format!("400\r\n{}\r\n", "x".repeat(1024));
                // Bounded, so a client that never hangs up cannot keep it forever.
                for _ in 0..65_536 {
                    if conn.get_mut().write_all(chunk.as_bytes()).await.is_err() {
                        return;
                    }
                }
                return;
            }
            Action::Hang => {
                // Ignore whatever the client sends; end when it closes.
                let mut sink = [0u8; 1024];
                while matches!(conn.read(&mut sink).await, Ok(n) if n > 0) {}
                return;
            }
            // Returning drops the stream: closed before any response byte.
            Action::Close => return,
        }
    }
}

/// Reads one request; `None` on end of stream or a malformed request line.
async fn read_request(conn: &mut BufReader<TcpStream>) -> std::io::Result<Option<Recorded>> {
    let mut request_line = String::new();
    conn.read_line(&mut request_line).await?;
    let mut parts = request_line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Ok(None);
    };
    let (path, query) = target
        .split_once('?')
        .map_or((target, None), |(p, q)| (p, Some(q)));
    let mut headers = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if conn.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        let Some((name, value)) = line.trim_end().split_once(':') else {
            break; // the blank line that ends the head
        };
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let mut request = Recorded {
        method: method.into(),
        path: path.into(),
        query: query.map(str::to_owned),
        headers,
        body: Vec::new(),
        idempotency_key: None,
    };
    let length = request
        .header("content-length")
        .and_then(|v| v.parse().ok());
    request.body = vec![0; length.unwrap_or(0)];
    conn.read_exact(&mut request.body).await?;
    Ok(Some(request))
}

async fn write_reply(stream: &mut TcpStream, reply: &Reply) -> std::io::Result<()> {
    let reason = StatusCode::from_u16(reply.status)
        .ok()
        .and_then(|s| s.canonical_reason());
    let mut out = format!("HTTP/1.1 {} {}\r\n", reply.status, reason.unwrap_or("Mock"));
    for (name, value) in &reply.headers {
        out += &format!("{name}: {value}\r\n");
    }
    let length = reply.body.len();
    out += &format!("content-length: {length}\r\nconnection: keep-alive\r\n\r\n");
    out += &reply.body;
    stream.write_all(out.as_bytes()).await?;
    stream.flush().await
}

/// Decodes `%XX` escapes, leaving invalid ones as they are.
fn percent_decode(s: &str) -> String {
    let mut out = Vec::with_capacity(s.len());
    let mut rest = s.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        let hex = tail
            .get(..2)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit));
        match (byte, hex.and_then(|h| std::str::from_utf8(h).ok())) {
            (b'%', Some(hex)) => {
                out.push(u8::from_str_radix(hex, 16).expect("two hex digits"));
                rest = &tail[2..];
            }
            _ => {
                out.push(byte);
                rest = tail;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use reqwest::{Client, Response};

    use super::*;

    async fn post(client: &Client, url: String, key: &str) -> reqwest::Result<Response> {
        let request = client.post(url).header("Idempotency-Key", key);
        request.body("payload").send().await
    }

    #[tokio::test]
    async fn respond_records_and_counts_effects() {
        let target = MockTarget::start().await;
        target.on_path("/send", Behaviour::json(201, r#"{"id":"m1"}"#));
        target.set_default(Behaviour::no_commit(503));
        let client = Client::new();

        let res = post(&client, target.url("/send?to=a%40b"), "k1")
            .await
            .unwrap();
        assert_eq!(res.status(), 201);
        assert_eq!(res.text().await.unwrap(), r#"{"id":"m1"}"#);
        let res = post(&client, target.url("/other"), "k2").await.unwrap();
        assert_eq!(res.status(), 503);

        let requests = target.requests();
        let first = &requests[0];
        assert_eq!(
            (first.method.as_str(), first.path.as_str()),
            ("POST", "/send")
        );
        assert_eq!(first.query.as_deref(), Some("to=a%40b"));
        assert_eq!(first.header("IDEMPOTENCY-KEY"), Some("k1"));
        assert_eq!(first.idempotency_key.as_deref(), Some("k1"));
        assert_eq!(first.body, b"payload");
        assert_eq!(
            (requests.len(), target.effects().len()),
            (2, 1),
            "503 is no effect"
        );
        assert_eq!(target.effect_count_for_key("k1"), 1);
    }

    #[tokio::test]
    async fn honoured_keys_replay_the_stored_response_once() {
        let target = MockTarget::start().await;
        let (one, two) = (r#"{"n":1}"#, r#"{"n":2}"#);
        target.on_path_seq(
            "/send",
            vec![Behaviour::json(201, one), Behaviour::json(201, two)],
        );
        target.honour_keys("X-Key", true);
        let client = Client::new();
        let send = |key: &str| client.post(target.url("/send")).header("x-key", key).send();

        let first = send("k1").await.unwrap();
        assert!(first.headers().get("idempotent-replayed").is_none());
        assert_eq!(first.text().await.unwrap(), one);
        let replay = send("k1").await.unwrap();
        assert_eq!(replay.status(), 201);
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
        assert_eq!(replay.text().await.unwrap(), one);
        // The replay did not advance the sequence.
        assert_eq!(send("k2").await.unwrap().text().await.unwrap(), two);
        assert_eq!((target.requests().len(), target.effects().len()), (3, 2));
        assert_eq!(target.effect_count_for_key("k1"), 1);

        target.honour_keys("X-Key", false);
        send("k1").await.unwrap();
        assert_eq!(
            target.effect_count_for_key("k1"),
            2,
            "unhonoured retry duplicates"
        );
    }

    #[tokio::test]
    async fn commit_then_close_fails_the_client_after_one_effect() {
        let target = MockTarget::start().await;
        target.on_path("/send", Behaviour::CommitThenClose);
        let client = Client::new();

        let err = post(&client, target.url("/send"), "k1").await.unwrap_err();
        assert!(
            err.is_request() && !err.is_timeout(),
            "not a connection error: {err:?}"
        );
        assert_eq!(target.requests().len(), 1, "the client retried silently");
        assert_eq!(target.effect_count_for_key("k1"), 1);
        let res = post(&client, target.url("/next"), "k2").await.unwrap();
        assert_eq!(res.status(), 200, "the target still serves new connections");
    }

    #[tokio::test]
    async fn hang_makes_the_client_time_out() {
        let target = MockTarget::start().await;
        target.on_path_seq("/slow", vec![Behaviour::Hang, Behaviour::CommitThenHang]);
        let client = Client::builder()
            .timeout(Duration::from_millis(300))
            .build()
            .unwrap();

        for key in ["k1", "k2"] {
            let err = post(&client, target.url("/slow"), key).await.unwrap_err();
            assert!(err.is_timeout(), "expected a timeout, got {err:?}");
        }
        assert_eq!(target.effect_count_for_key("k1"), 0, "Hang commits nothing");
        assert_eq!(
            target.effect_count_for_key("k2"),
            1,
            "CommitThenHang commits"
        );
    }

    #[tokio::test]
    async fn a_sequence_runs_in_order_and_repeats_its_last() {
        let target = MockTarget::start().await;
        let seq = [
            Behaviour::no_commit(503),
            Behaviour::status(429),
            Behaviour::status(202),
        ];
        target.on_path_seq("/send", seq.to_vec());
        let client = Client::new();

        let mut statuses = Vec::new();
        for key in ["k1", "k2", "k3", "k4", "k5"] {
            let res = post(&client, target.url("/send"), key).await.unwrap();
            statuses.push(res.status().as_u16());
        }
        assert_eq!(statuses, [503, 429, 202, 202, 202]);
        assert_eq!(target.effects().len(), 4, "only the 503 did not commit");
    }

    #[tokio::test]
    async fn probe_reports_committed_keys_only() {
        let target = MockTarget::start().await;
        target.on_probe("/probe");
        target.on_path("/drop", Behaviour::CloseWithoutCommit);
        let client = Client::new();
        let probe = |tail: &str| client.get(target.url(&format!("/probe{tail}"))).send();

        assert_eq!(
            probe("?key=stripe%3Aevt_1%3Asend").await.unwrap().status(),
            404
        );
        let dropped = post(&client, target.url("/drop"), "stripe:evt_2:send").await;
        assert!(dropped.is_err());
        post(&client, target.url("/send"), "stripe:evt_1:send")
            .await
            .unwrap();

        let found = probe("/stripe%3Aevt_1%3Asend").await.unwrap();
        assert_eq!(found.status(), 200);
        let body: serde_json::Value = found.json().await.unwrap();
        assert_eq!(body, json!({ "found": true, "key": "stripe:evt_1:send" }));
        assert_eq!(
            probe("?key=stripe%3Aevt_1%3Asend").await.unwrap().status(),
            200
        );
        assert_eq!(probe("/stripe:evt_2:send").await.unwrap().status(), 404);
        assert_eq!((target.requests().len(), target.effects().len()), (6, 1));
    }

    #[tokio::test]
    async fn wait_for_requests_returns_once_they_arrive() {
        let target = MockTarget::start().await;
        let url = target.url("/send");
        let sender = tokio::spawn(async move { Client::new().post(url).send().await });

        let seen = target
            .clone()
            .wait_for_requests(1, Duration::from_secs(5))
            .await;
        assert_eq!(seen[0].path, "/send");
        assert_eq!(sender.await.unwrap().unwrap().status(), 200);
    }

    #[tokio::test]
    #[should_panic(expected = "expected 1 request(s)")]
    async fn wait_for_requests_panics_at_the_deadline() {
        let target = MockTarget::start().await;
        target.wait_for_requests(1, Duration::from_millis(50)).await;
    }
}
