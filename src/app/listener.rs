//! The accept loop: every connection served by hyper's HTTP/1 server under
//! the `[server]` limits, so slow or idle clients cannot hold the service.
//!
//! - a cap on connections served at once: a connection beyond it is closed
//!   as soon as it is accepted, so the open-file limit is never reached and
//!   a freed slot serves `/healthz` again;
//! - a header-read timeout (hyper's own): a request head must arrive whole
//!   within it of the connection opening or the previous response, however
//!   slowly it trickles, so it also bounds an idle keep-alive connection;
//! - an idle timeout: a connection on which no byte moves either way for
//!   that long is closed, whatever it is doing (a client that stopped
//!   reading its response holds nothing for longer);
//! - on shutdown every connection is shut down gracefully, and the loop
//!   waits for them (within the grace period, which the caller enforces).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The limits of [`serve_connections`], from `[server]`.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Most connections served at once.
    pub max_connections: usize,
    /// How long a request head may take to arrive.
    pub header_read_timeout: Duration,
    /// How long a connection may read and write nothing.
    pub idle_timeout: Duration,
}

impl ConnectionLimits {
    /// The limits `[server]` configures.
    pub fn from_config(server: &crate::config::ServerConfig) -> Self {
        Self {
            max_connections: server.max_connections,
            header_read_timeout: Duration::from_millis(server.header_read_timeout_ms),
            idle_timeout: Duration::from_millis(server.idle_timeout_ms),
        }
    }
}

/// Accepts connections and serves `app` on each until `shutdown`, then
/// shuts every connection down gracefully and returns once all are closed.
pub async fn serve_connections(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    loop {
        let (stream, remote) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors or a connection reset before
                    // it was accepted: wait a little instead of spinning.
                    tracing::warn!(error = %err, "accepting a connection failed");
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(Duration::from_millis(50)) => continue,
                    }
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%remote, max = limits.max_connections, "connection cap reached; closed");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = app.clone().map_request(move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(remote));
            req
        });
        let (io, activity) = Tracked::new(stream);
        let conn = http.serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
        let shutdown = shutdown.clone();
        let idle = limits.idle_timeout;
        tokio::spawn(async move {
            let mut conn = std::pin::pin!(conn);
            let mut closing = false;
            loop {
                tokio::select! {
                    result = conn.as_mut() => {
                        if let Err(err) = result {
                            tracing::debug!(error = %err, %remote, "connection ended with an error");
                        }
                        break;
                    }
                    () = shutdown.cancelled(), if !closing => {
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                    // Nothing moved either way for that long: even a response
                    // in progress is stuck (its client stopped reading), so
                    // the connection is dropped, not drained.
                    () = activity.idle_for(idle) => {
                        tracing::debug!(%remote, "connection idle; closed");
                        break;
                    }
                }
            }
            drop(slot);
        });
    }
    drop(listener);
    // Every slot back means every connection closed.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
}

/// When a connection last read or wrote a byte.
struct Activity {
    opened: Instant,
    /// Milliseconds after `opened`.
    last: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }

    /// Resolves once nothing was read or written for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let last = self.opened + Duration::from_millis(self.last.load(Ordering::Relaxed));
            if Instant::now() >= last + idle {
                return;
            }
            tokio::time::sleep_until(last + idle).await;
        }
    }
}

/// A TCP stream that records its activity.
struct Tracked {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl Tracked {
    fn new(stream: TcpStream) -> (Self, Arc<Activity>) {
        let activity = Arc::new(Activity {
            opened: Instant::now(),
            last: AtomicU64::new(0),
        });
        let tracked = Self {
            stream,
            activity: activity.clone(),
        };
        (tracked, activity)
    }
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
