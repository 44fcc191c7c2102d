//! The soak's targets on 127.0.0.1, counting what arrives:
//!
//! - [`KeyTarget`]: honours `Idempotency-Key` (applies each key once, a
//!   repeat is answered as a replay and counted as a duplicate) and counts
//!   applies per business id (the body's `id`), so an effect applied under
//!   two keys shows as a double apply. It may answer 503 for an outage
//!   window. Also the rate-limited target, which notes every arrival.
//! - [`IgnoringTarget`]: ignores keys and counts every request per key;
//!   for some keys it reads the request, then resets the connection
//!   instead of answering (the outcome is unknown to the sender).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::{CancellationToken, DropGuard};

/// What a key-honouring target saw.
#[derive(Debug, Default)]
pub struct KeyBook {
    /// Every request, refused ones included.
    pub requests: u64,
    /// Answered 503 during the outage.
    pub refused: u64,
    /// Requests whose key was applied before (answered as a replay).
    pub duplicates: u64,
    /// Requests without an idempotency key (refused with 400).
    pub keyless: u64,
    /// Applied keys and the business id each applied.
    pub applied: HashMap<String, String>,
    /// Applies per business id: more than one is a double apply.
    pub applies_per_id: HashMap<String, u32>,
    /// When each request arrived.
    pub arrivals: Vec<Instant>,
}

#[derive(Default)]
struct KeyState {
    book: Mutex<KeyBook>,
    outage: Mutex<Option<(Instant, Instant)>>,
}

/// A key-honouring target; stops when dropped.
pub struct KeyTarget {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    state: Arc<KeyState>,
    _stop: DropGuard,
}

/// The business id of a body: its JSON `id`, else the key.
fn business_id(body: &[u8], key: &str) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["id"].as_str().map(str::to_owned))
        .unwrap_or_else(|| key.to_owned())
}

async fn honour(State(state): State<Arc<KeyState>>, headers: HeaderMap, body: Bytes) -> Response {
    let now = Instant::now();
    let down = state
        .outage
        .lock()
        .unwrap()
        .is_some_and(|(from, to)| from <= now && now < to);
    let mut book = state.book.lock().unwrap();
    book.requests += 1;
    book.arrivals.push(now);
    if down {
        book.refused += 1;
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", "1")],
            "{}",
        )
            .into_response();
    }
    let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok()) else {
        book.keyless += 1;
        return (StatusCode::BAD_REQUEST, "no Idempotency-Key").into_response();
    };
    if book.applied.contains_key(key) {
        book.duplicates += 1;
        return (StatusCode::OK, "{\"replayed\":true}").into_response();
    }
    let id = business_id(&body, key);
    *book.applies_per_id.entry(id.clone()).or_default() += 1;
    book.applied.insert(key.to_owned(), id);
    (StatusCode::OK, "{\"applied\":true}").into_response()
}

impl KeyTarget {
    /// Starts one on a free port.
    pub async fn start() -> Result<Self> {
        let state = Arc::new(KeyState::default());
        let app = Router::new().fallback(honour).with_state(state.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await })
                .await;
        });
        Ok(Self {
            base,
            state,
            _stop: stop.drop_guard(),
        })
    }

    /// Answers 503 (`Retry-After: 1`) from `from` for `length`.
    pub fn set_outage(&self, from: Instant, length: Duration) {
        *self.state.outage.lock().unwrap() = Some((from, from + length));
    }

    /// Runs `f` on what it saw.
    pub fn with<T>(&self, f: impl FnOnce(&KeyBook) -> T) -> T {
        f(&self.state.book.lock().unwrap())
    }

    /// Distinct keys applied so far.
    pub fn applied(&self) -> usize {
        self.with(|b| b.applied.len())
    }

    /// The most requests that arrived within any `window`.
    pub fn busiest(&self, window: Duration) -> usize {
        let mut all = self.with(|b| b.arrivals.clone());
        all.sort();
        let mut first = 0;
        let mut most = 0;
        for (last, at) in all.iter().enumerate() {
            while *at - all[first] >= window {
                first += 1;
            }
            most = most.max(last - first + 1);
        }
        most
    }
}

/// What the key-ignoring target saw.
#[derive(Debug, Default)]
pub struct IgnoreBook {
    /// Every request.
    pub requests: u64,
    /// Requests per idempotency key (the target ignores it; the soak
    /// counts by it).
    pub per_key: HashMap<String, u32>,
    /// Keys whose request was read and then answered with a reset.
    pub reset: HashSet<String>,
}

/// A key-ignoring target that resets the connection after reading some
/// requests; stops when dropped.
pub struct IgnoringTarget {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    book: Arc<Mutex<IgnoreBook>>,
    _stop: DropGuard,
}

/// One key in `every` is answered with a reset (FNV-1a of the key, so a
/// run is reproducible).
fn resets(key: &str, every: u64) -> bool {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    every > 0 && hash % every == 0
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Serves one keep-alive connection with a minimal HTTP/1.1 reader.
async fn serve_ignoring(
    mut stream: TcpStream,
    book: Arc<Mutex<IgnoreBook>>,
    every: u64,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let head_end = loop {
            if let Some(at) = find(&buf, b"\r\n\r\n") {
                break at + 4;
            }
            let n = stream.read(&mut chunk).await?;
            if n == 0 || buf.len() > 1 << 20 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let header = |name: &str| {
            head.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        let length: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let key = header("idempotency-key").unwrap_or_default();
        while buf.len() < head_end + length {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        buf.drain(..head_end + length);
        let reset = resets(&key, every);
        {
            let mut book = book.lock().unwrap();
            book.requests += 1;
            *book.per_key.entry(key.clone()).or_default() += 1;
            if reset {
                book.reset.insert(key);
            }
        }
        if reset {
            // SO_LINGER 0: closing sends RST at once (it never blocks).
            #[allow(deprecated)]
            stream.set_linger(Some(Duration::ZERO))?;
            return Ok(());
        }
        let body = "{\"applied\":true}";
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(answer.as_bytes()).await?;
    }
}

impl IgnoringTarget {
    /// Starts one on a free port; one key in `reset_every` gets a reset.
    pub async fn start(reset_every: u64) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let book = Arc::new(Mutex::new(IgnoreBook::default()));
        let stop = CancellationToken::new();
        let (stopped, shared) = (stop.clone(), book.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = stopped.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(serve_ignoring(stream, shared.clone(), reset_every));
                }
            }
        });
        Ok(Self {
            base,
            book,
            _stop: stop.drop_guard(),
        })
    }

    /// Runs `f` on what it saw.
    pub fn with<T>(&self, f: impl FnOnce(&IgnoreBook) -> T) -> T {
        f(&self.book.lock().unwrap())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_key_in_n_is_reset_and_the_choice_is_stable() {
        let keys: Vec<String> = (0..1000).map(|i| format!("crm:w0_{i}:upsert")).collect();
        let n = keys.iter().filter(|k| resets(k, 8)).count();
        assert!((60..=190).contains(&n), "{n} of 1000");
        assert!(keys.iter().all(|k| resets(k, 8) == resets(k, 8)));
        assert!(!keys.iter().any(|k| resets(k, 0)));
    }

    #[test]
    fn the_business_id_is_the_bodys_id_else_the_key() {
        assert_eq!(business_id(br#"{"id":"evt_1"}"#, "k"), "evt_1");
        assert_eq!(business_id(b"not json", "k"), "k");
    }
}
