//! The sections the configuration's own module defines, each checking
//! itself: `[server]`, `[database]`, `[ledger]`, `[log]` and `[[tokens]]`.
//! The parts' sections (`[dispatcher]`, `[[targets]]`, `[[sources]]`,
//! `[retention]`…) live beside their parts and check themselves there.

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use super::ConfigError;
use crate::tokens::{is_digest, TokenConfig};

/// `[server]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Largest request body accepted by the API, in bytes.
    pub max_body_bytes: usize,
    /// A request that takes longer is answered 408, in milliseconds.
    pub request_timeout_ms: u64,
    /// How long shutdown waits for in-flight requests, in milliseconds.
    pub shutdown_grace_ms: u64,
    /// The address people reach the service at, for approval links
    /// (`https://…`; plain http only on loopback). Default: the listen
    /// address when it is loopback.
    pub public_base_url: Option<String>,
    /// The TLS proxy's addresses: from these peers `X-Forwarded-For` (or
    /// `X-Real-IP`) names the client in the request log; from any other
    /// peer those headers are ignored and the client is the peer
    /// (docs/tls.md). Empty: the client is always the peer.
    pub trusted_proxies: Vec<IpAddr>,
    /// A client must send a request's whole head (request line and
    /// headers) within this long of the connection opening or the previous
    /// response, in milliseconds, or its connection is closed.
    pub header_read_timeout_ms: u64,
    /// A request body that sends nothing for this long is abandoned
    /// (408), in milliseconds.
    pub body_read_timeout_ms: u64,
    /// A connection on which no byte is read or written for this long is
    /// closed, whatever it is doing (e.g. a client that stopped reading its
    /// response), in milliseconds.
    pub idle_timeout_ms: u64,
    /// Most connections served at once; a connection beyond them is closed
    /// as soon as it is accepted. Keep it well under the open-file limit
    /// (`ulimit -n`), which the database and the targets share.
    pub max_connections: usize,
    /// Most bytes of request bodies held at once for requests that are not
    /// authenticated yet (webhook deliveries, sign-in and approval forms);
    /// a body beyond it is answered 503 with `Retry-After`.
    pub unauthenticated_body_budget_bytes: usize,
    /// When set (a `sha256:` digest, as `oncegate token new` prints),
    /// `/metrics` needs `Authorization: Bearer <token>` for the token with
    /// this digest. Unset: `/metrics` answers anyone who reaches the
    /// listener.
    pub metrics_token_digest: Option<String>,
    /// The environment variable holding the server secret (at least 32
    /// bytes), which keys `approve_by_exception`'s human sample. Unset:
    /// a secret generated at the first start and kept in the database.
    pub secret_env: Option<String>,
}

impl ServerConfig {
    /// The base every approval link starts with: `public_base_url`, or
    /// `http://<listen>` when the service listens on loopback.
    pub fn public_base(&self) -> Option<String> {
        match &self.public_base_url {
            Some(url) => Some(url.trim_end_matches('/').to_owned()),
            None if self.listen.ip().is_loopback() => Some(format!("http://{}", self.listen)),
            None => None,
        }
    }

    /// Whether the public base is https: cookies are then `Secure`.
    pub fn is_https(&self) -> bool {
        self.public_base_url
            .as_deref()
            .is_some_and(|base| base.starts_with("https://"))
    }

    /// Writes the public base in its normal form (scheme and host
    /// lower-cased), once at load, so `HTTPS://` reads as https everywhere.
    /// A base that does not parse is left for [`Self::validate`] to refuse.
    pub(crate) fn normalise_public_base(&mut self) {
        if let Some(base) = self.public_base_url.as_mut() {
            if let Ok(url) = url::Url::parse(base) {
                *base = String::from(url);
            }
        }
    }

    /// Checks the limits and the public address.
    ///
    /// # Errors
    /// [`ConfigError::Field`] for the first bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_body_bytes < 1024 {
            return Err(ConfigError::field(
                "server.max_body_bytes",
                "must be at least 1024",
            ));
        }
        if self.request_timeout_ms == 0 {
            return Err(ConfigError::field(
                "server.request_timeout_ms",
                "must be positive",
            ));
        }
        self.validate_limits()?;
        if let Some(digest) = &self.metrics_token_digest {
            if !is_digest(digest) {
                return Err(ConfigError::field(
                    "server.metrics_token_digest",
                    "must be sha256:<64 lowercase hex digits> (`oncegate token new` prints one)",
                ));
            }
        }
        if let Some(base) = &self.public_base_url {
            let url = url::Url::parse(base).map_err(|e| {
                ConfigError::field("server.public_base_url", format!("not a URL: {e}"))
            })?;
            if !crate::approval::oidc::config::https_or_loopback(&url) {
                return Err(ConfigError::field(
                    "server.public_base_url",
                    "must be https (plain http only for loopback development): approval links are bearer credentials",
                ));
            }
        }
        Ok(())
    }
}

impl ServerConfig {
    /// The connection limits: timeouts positive, a cap and a budget.
    fn validate_limits(&self) -> Result<(), ConfigError> {
        for (field, ms) in [
            ("server.header_read_timeout_ms", self.header_read_timeout_ms),
            ("server.body_read_timeout_ms", self.body_read_timeout_ms),
            ("server.idle_timeout_ms", self.idle_timeout_ms),
        ] {
            if ms == 0 {
                return Err(ConfigError::field(field, "must be positive"));
            }
        }
        if self.max_connections == 0 {
            return Err(ConfigError::field(
                "server.max_connections",
                "must be positive",
            ));
        }
        if self.unauthenticated_body_budget_bytes < self.max_body_bytes
            || self.unauthenticated_body_budget_bytes > u32::MAX as usize
        {
            return Err(ConfigError::field(
                "server.unauthenticated_body_budget_bytes",
                "must be at least server.max_body_bytes and at most 4294967295",
            ));
        }
        Ok(())
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_body_bytes: 256 * 1024,
            request_timeout_ms: 30_000,
            shutdown_grace_ms: 30_000,
            public_base_url: None,
            trusted_proxies: Vec::new(),
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            max_connections: 512,
            unauthenticated_body_budget_bytes: 16 * 1024 * 1024,
            metrics_token_digest: None,
            secret_env: None,
        }
    }
}

/// `[database]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `sqlite://PATH` (default `sqlite://oncegate.db`) or `postgres://…`.
    pub url: String,
    /// Most connections in the pool; 0 picks by backend (see
    /// [`DatabaseConfig::pool_size`]).
    pub max_connections: u32,
    /// SQLite: how long to wait on a locked database, in milliseconds.
    pub busy_timeout_ms: u64,
    /// SQLite: most writes committed in one durable transaction.
    pub group_commit_max_batch: usize,
    /// SQLite: how long a batch waits for more writes once none is queued,
    /// in microseconds (0: commit as soon as the queue is empty).
    pub group_commit_max_wait_us: u64,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: "sqlite://oncegate.db".into(),
            max_connections: 0,
            busy_timeout_ms: 5_000,
            group_commit_max_batch: 64,
            group_commit_max_wait_us: 0,
        }
    }
}

/// Readers of a SQLite store when `max_connections` is 0: the writer is
/// one connection of its own, and each reader may cache up to 2 MiB.
pub const SQLITE_DEFAULT_POOL: u32 = 8;
/// PostgreSQL connections when `max_connections` is 0: enough concurrent
/// transactions for the server to group their commits (measured in
/// BENCHMARKS.md: 8 halves claim throughput at 32 clients).
pub const POSTGRES_DEFAULT_POOL: u32 = 32;

impl DatabaseConfig {
    /// The pool size: `max_connections`, or the backend's default when 0.
    pub fn pool_size(&self) -> u32 {
        match self.max_connections {
            0 if self.url.starts_with("sqlite:") => SQLITE_DEFAULT_POOL,
            0 => POSTGRES_DEFAULT_POOL,
            n => n,
        }
    }

    /// Checks the URL's backend, the pool size and the group-commit bounds.
    ///
    /// # Errors
    /// [`ConfigError::Field`] for the first bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let url = &self.url;
        if !(url.starts_with("sqlite:")
            || url.starts_with("postgres://")
            || url.starts_with("postgresql://"))
        {
            return Err(ConfigError::field(
                "database.url",
                format!("{:?} is not sqlite://PATH or postgres://…", redact_url(url)),
            ));
        }
        if self.max_connections > 10_000 {
            return Err(ConfigError::field(
                "database.max_connections",
                "must be at most 10000 (0 picks by backend)",
            ));
        }
        if self.max_connections == 1 && !url.starts_with("sqlite:") {
            return Err(ConfigError::field(
                "database.max_connections",
                "must be at least 2 on PostgreSQL (0 picks by backend): an audit checkpoint \
                 reads the head scan on one connection while it writes on another",
            ));
        }
        if !(1..=4096).contains(&self.group_commit_max_batch) {
            return Err(ConfigError::field(
                "database.group_commit_max_batch",
                "must be between 1 and 4096",
            ));
        }
        if self.group_commit_max_wait_us > 100_000 {
            return Err(ConfigError::field(
                "database.group_commit_max_wait_us",
                "must be at most 100000 (0.1 s): every write in a batch waits this long",
            ));
        }
        Ok(())
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

/// `[log]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `human` or `json`.
    pub format: LogFormat,
    /// A `tracing` filter such as `info` or `oncegate=debug,sqlx=warn`.
    pub level: String,
}

impl LogConfig {
    /// Checks that the level is a filter `tracing` accepts.
    ///
    /// # Errors
    /// [`ConfigError::Field`] naming `log.level`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        tracing_subscriber::EnvFilter::try_new(&self.level)
            .map_err(|e| ConfigError::field("log.level", e.to_string()))?;
        Ok(())
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Human,
            level: "info".into(),
        }
    }
}

/// Checks every `[[tokens]]` entry: a subject, a digest (never the token
/// itself) listed once, at least one scope.
///
/// # Errors
/// [`ConfigError::Field`] for the first bad field.
pub fn validate_tokens(tokens: &[TokenConfig]) -> Result<(), ConfigError> {
    let mut seen = std::collections::HashSet::new();
    for (i, token) in tokens.iter().enumerate() {
        let at = |f: &str| format!("tokens[{i}].{f}");
        if token.subject.trim().is_empty() {
            return Err(ConfigError::field(at("subject"), "must not be empty"));
        }
        if !is_digest(&token.digest) {
            return Err(ConfigError::field(
                at("digest"),
                "must be \"sha256:\" followed by 64 lowercase hex digits (never the token itself)",
            ));
        }
        if !seen.insert(&token.digest) {
            return Err(ConfigError::field(at("digest"), "is listed twice"));
        }
        if token.scopes.is_empty() {
            return Err(ConfigError::field(
                at("scopes"),
                "must name at least one scope",
            ));
        }
        if token.namespaces.as_ref().is_some_and(Vec::is_empty) {
            return Err(ConfigError::field(
                at("namespaces"),
                "must name at least one namespace (leave it out for every namespace)",
            ));
        }
    }
    Ok(())
}

/// Redacts the password of a database URL for logs and errors.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}
