//! Configuration: `oncegate.toml` layered with `ONCEGATE_*` variables.
//!
//! The file is optional; every field has a default that runs a single node
//! on SQLite at `127.0.0.1:8080`. Environment variables (see [`ENV_VARS`])
//! override the file. Everything is checked at start, and every error names
//! the field it is about (`database.url: …`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ingress::{KeyTemplate, Locator, SchemeName, SourceConfig};
use crate::outbox::{DispatcherConfig, GatePolicy, OperationConfig, TargetConfig};

/// Errors found while loading or checking the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("config file {path} is not valid TOML: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A field has the wrong type, an unknown name, or a bad value.
    #[error("{field}: {message}")]
    Field {
        /// Dotted path of the field (`server.listen`, `tokens[0].scopes`).
        field: String,
        /// What is wrong.
        message: String,
    },
}

impl ConfigError {
    fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Field {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The whole configuration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// HTTP server settings.
    pub server: ServerConfig,
    /// Which database and how to reach it.
    pub database: DatabaseConfig,
    /// Lease bounds of the ledger.
    pub ledger: LedgerConfig,
    /// Logging.
    pub log: LogConfig,
    /// API tokens, by digest.
    pub tokens: Vec<TokenConfig>,
    /// Where effects may be sent (the allow-list).
    pub targets: Vec<TargetConfig>,
    /// Webhook providers accepted at `POST /hooks/{name}`.
    pub sources: Vec<SourceConfig>,
    /// Declared operations and their gates.
    pub operations: Vec<OperationConfig>,
    /// The dispatcher inside `serve`.
    pub dispatcher: DispatcherConfig,
    /// Metric label bounds (ops/metrics).
    pub metrics: crate::metrics::MetricsConfig,
    /// Dead letters: owners, retention, the bulk replay runner (issue 6, branch dlq).
    pub dead_letters: crate::deadletter::DeadLetterConfig,
    // Audit integrity, redaction and retention (issue 6: audit).
    /// Audit checkpoints and periodic verification.
    pub audit: crate::audit::AuditConfig,
    /// Fields replaced by `"[redacted]"` before storage, per namespace.
    pub redact: Vec<crate::audit::RedactionRule>,
    /// Archiving old runs, slimming them to tombstones, deleting tombstones.
    pub retention: crate::retention::RetentionConfig,
    /// Approval sessions, single sign-on and the expiry sweeper.
    pub approvals: crate::approval::ApprovalsConfig,
}

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
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_body_bytes: 256 * 1024,
            request_timeout_ms: 30_000,
            shutdown_grace_ms: 30_000,
            public_base_url: None,
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
    // Group commit (the benchmark issue): SQLite batching of writes.
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

    /// SQLite's group-commit batching, from `group_commit_*`.
    pub fn group_commit(&self) -> crate::store::group_commit::GroupCommitOptions {
        crate::store::group_commit::GroupCommitOptions {
            max_batch: self.group_commit_max_batch,
            max_wait: std::time::Duration::from_micros(self.group_commit_max_wait_us),
        }
    }
}

/// `[ledger]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LedgerConfig {
    /// Lease length when a claim names none, in milliseconds.
    pub default_lease_ms: i64,
    /// Longest lease a claim or renewal may ask for, in milliseconds.
    pub max_lease_ms: i64,
    /// Longest total life of one owner's lease across renewals, in milliseconds.
    pub max_lease_life_ms: i64,
    /// `retry_after` told to duplicates of runs awaiting a human or
    /// approved, in milliseconds.
    pub in_flight_retry_after_ms: i64,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        Self {
            default_lease_ms: 30_000,
            max_lease_ms: 15 * 60_000,
            max_lease_life_ms: 60 * 60_000,
            in_flight_retry_after_ms: 30_000,
        }
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

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Human,
            level: "info".into(),
        }
    }
}

/// What a token may do.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Hash, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Claim and move runs (a workflow engine).
    Workflow,
    /// Read runs, operate dead letters and the kill switch.
    Operator,
    /// Decide approval challenges.
    Approver,
    /// Everything.
    Admin,
}

impl Scope {
    /// The configured name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Workflow => "workflow",
            Self::Operator => "operator",
            Self::Approver => "approver",
            Self::Admin => "admin",
        }
    }

    /// Parses a configured name.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Workflow, Self::Operator, Self::Approver, Self::Admin]
            .into_iter()
            .find(|s| s.as_str() == name)
    }
}

/// `[[tokens]]`: one API token, by the SHA-256 digest of its value.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// The person or workflow the token speaks for.
    pub subject: String,
    /// `sha256:<64 hex>` of the token (`oncegate token new` prints it).
    pub digest: String,
    /// What the token may do.
    pub scopes: Vec<Scope>,
    /// Roles, for approval policies.
    #[serde(default)]
    pub roles: Vec<String>,
}

/// Environment variables that override the file, and the field each sets.
pub const ENV_VARS: &[(&str, &str)] = &[
    ("ONCEGATE_LISTEN", "server.listen"),
    ("ONCEGATE_MAX_BODY_BYTES", "server.max_body_bytes"),
    ("ONCEGATE_REQUEST_TIMEOUT_MS", "server.request_timeout_ms"),
    ("ONCEGATE_SHUTDOWN_GRACE_MS", "server.shutdown_grace_ms"),
    ("ONCEGATE_PUBLIC_BASE_URL", "server.public_base_url"),
    ("ONCEGATE_DATABASE_URL", "database.url"),
    (
        "ONCEGATE_DATABASE_MAX_CONNECTIONS",
        "database.max_connections",
    ),
    (
        "ONCEGATE_DATABASE_BUSY_TIMEOUT_MS",
        "database.busy_timeout_ms",
    ),
    (
        "ONCEGATE_DATABASE_GROUP_COMMIT_MAX_BATCH",
        "database.group_commit_max_batch",
    ),
    (
        "ONCEGATE_DATABASE_GROUP_COMMIT_MAX_WAIT_US",
        "database.group_commit_max_wait_us",
    ),
    ("ONCEGATE_DEFAULT_LEASE_MS", "ledger.default_lease_ms"),
    ("ONCEGATE_MAX_LEASE_MS", "ledger.max_lease_ms"),
    ("ONCEGATE_MAX_LEASE_LIFE_MS", "ledger.max_lease_life_ms"),
    ("ONCEGATE_ACTIONS_ENABLED", "dispatcher.actions_enabled"),
    ("ONCEGATE_DISPATCHER_ENABLED", "dispatcher.enabled"),
    // Dead letters (issue 6, branch dlq).
    (
        "ONCEGATE_REPLAY_RUNNER_ENABLED",
        "dead_letters.runner_enabled",
    ),
    // Audit integrity and retention (issue 6: audit).
    (
        "ONCEGATE_AUDIT_CHECKPOINT_INTERVAL_SECS",
        "audit.checkpoint_interval_secs",
    ),
    (
        "ONCEGATE_AUDIT_VERIFY_INTERVAL_SECS",
        "audit.verify_interval_secs",
    ),
    ("ONCEGATE_RETENTION_ENABLED", "retention.enabled"),
    (
        "ONCEGATE_RETENTION_INTERVAL_SECS",
        "retention.interval_secs",
    ),
    (
        "ONCEGATE_RETENTION_ARCHIVE_AFTER_DAYS",
        "retention.archive_after_days",
    ),
    (
        "ONCEGATE_RETENTION_TOMBSTONE_DAYS",
        "retention.tombstone_days",
    ),
    ("ONCEGATE_RETENTION_ARCHIVE_DIR", "retention.archive_dir"),
    ("ONCEGATE_RETENTION_BATCH_SIZE", "retention.batch_size"),
    ("ONCEGATE_LOG_FORMAT", "log.format"),
    ("ONCEGATE_LOG_LEVEL", "log.level"),
];

impl Config {
    /// Loads the file (if any) and applies `env` overrides, then checks it.
    /// `env` is the process environment: its `ONCEGATE_*` variables override
    /// the file, and `env:NAME` target secret headers are read from it.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file, line or field that is wrong.
    pub fn load(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut table = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                text.parse::<toml::Table>()
                    .map_err(|e| ConfigError::Syntax {
                        path: path.to_owned(),
                        message: e.to_string(),
                    })?
            }
            None => toml::Table::new(),
        };
        let env: std::collections::HashMap<String, String> = env.into_iter().collect();
        for (name, value) in &env {
            if let Some((_, field)) = ENV_VARS.iter().find(|(var, _)| var == name) {
                set_field(&mut table, field, value);
            }
        }
        let mut config: Config = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| {
                let field = e.path().to_string();
                ConfigError::field(field, e.into_inner().message().to_string())
            })?;
        // n8n integration: `env:NAME` target credentials (e.g. the secret
        // header an n8n Webhook node checks) are read once, here.
        for (i, target) in config.targets.iter_mut().enumerate() {
            target
                .resolve_env_secrets(&format!("targets[{i}]"), |var| env.get(var).cloned())
                .map_err(|(field, message)| ConfigError::field(field, message))?;
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks relations between fields that types alone cannot.
    ///
    /// # Errors
    /// [`ConfigError::Field`] for the first bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let url = &self.database.url;
        if !(url.starts_with("sqlite:")
            || url.starts_with("postgres://")
            || url.starts_with("postgresql://"))
        {
            return Err(ConfigError::field(
                "database.url",
                format!(
                    "{:?} is not sqlite://PATH or postgres://…",
                    crate::store::redact_url(url)
                ),
            ));
        }
        if self.database.max_connections > 10_000 {
            return Err(ConfigError::field(
                "database.max_connections",
                "must be at most 10000 (0 picks by backend)",
            ));
        }
        if !(1..=4096).contains(&self.database.group_commit_max_batch) {
            return Err(ConfigError::field(
                "database.group_commit_max_batch",
                "must be between 1 and 4096",
            ));
        }
        if self.database.group_commit_max_wait_us > 100_000 {
            return Err(ConfigError::field(
                "database.group_commit_max_wait_us",
                "must be at most 100000 (0.1 s): every write in a batch waits this long",
            ));
        }
        let l = &self.ledger;
        if l.default_lease_ms < 100 {
            return Err(ConfigError::field(
                "ledger.default_lease_ms",
                "must be at least 100",
            ));
        }
        if l.max_lease_ms < l.default_lease_ms {
            return Err(ConfigError::field(
                "ledger.max_lease_ms",
                "must be at least ledger.default_lease_ms",
            ));
        }
        if l.max_lease_life_ms < l.max_lease_ms {
            return Err(ConfigError::field(
                "ledger.max_lease_life_ms",
                "must be at least ledger.max_lease_ms",
            ));
        }
        if l.in_flight_retry_after_ms < 0 {
            return Err(ConfigError::field(
                "ledger.in_flight_retry_after_ms",
                "must not be negative",
            ));
        }
        if self.server.max_body_bytes < 1024 {
            return Err(ConfigError::field(
                "server.max_body_bytes",
                "must be at least 1024",
            ));
        }
        if self.server.request_timeout_ms == 0 {
            return Err(ConfigError::field(
                "server.request_timeout_ms",
                "must be positive",
            ));
        }
        tracing_subscriber::EnvFilter::try_new(&self.log.level)
            .map_err(|e| ConfigError::field("log.level", e.to_string()))?;
        self.validate_tokens()?;
        self.validate_targets()?;
        self.validate_sources()?;
        self.validate_operations()?;
        // ops/metrics
        self.metrics
            .validate()
            .map_err(|(field, message)| ConfigError::field(field, message))?;
        self.dead_letters
            .validate()
            .map_err(|(field, message)| ConfigError::field(field, message))?;
        self.validate_audit()?;
        self.validate_approvals()?;
        let d = &self.dispatcher;
        if d.batch_size < 1 || d.batch_size > 10_000 {
            return Err(ConfigError::field(
                "dispatcher.batch_size",
                "must be between 1 and 10000",
            ));
        }
        let longest = self
            .targets
            .iter()
            .map(|t| t.timeout_ms + t.connect_timeout_ms)
            .max()
            .unwrap_or(0);
        if d.lease_ms <= longest as i64 {
            return Err(ConfigError::field(
                "dispatcher.lease_ms",
                format!("must exceed the longest target timeout ({longest} ms), or a slow send would look dead"),
            ));
        }
        Ok(())
    }

    /// Audit integrity, redaction and retention (issue 6: audit).
    fn validate_audit(&self) -> Result<(), ConfigError> {
        let as_error = |(field, message): (String, String)| ConfigError::field(field, message);
        for (i, rule) in self.redact.iter().enumerate() {
            rule.validate(&format!("redact[{i}]")).map_err(as_error)?;
        }
        self.retention.validate().map_err(as_error)
    }

    /// The redaction rules, compiled.
    pub fn redactor(&self) -> crate::audit::Redactor {
        crate::audit::Redactor::new(&self.redact)
    }

    /// The operation with this name.
    pub fn operation(&self, name: &str) -> Option<&OperationConfig> {
        self.operations.iter().find(|o| o.name == name)
    }

    fn validate_operations(&self) -> Result<(), ConfigError> {
        let mut seen = std::collections::HashSet::new();
        for (i, op) in self.operations.iter().enumerate() {
            let at = format!("operations[{i}]");
            op.validate(&at)
                .map_err(|(field, message)| ConfigError::field(field, message))?;
            if op.name == crate::ingress::FORWARD_OPERATION
                || op.name == crate::approval::CALLBACK_OPERATION
            {
                return Err(ConfigError::field(
                    format!("{at}.name"),
                    "is reserved for oncegate's own effects",
                ));
            }
            if !seen.insert(&op.name) {
                return Err(ConfigError::field(
                    format!("{at}.name"),
                    format!("{:?} is declared twice", op.name),
                ));
            }
        }
        Ok(())
    }

    fn validate_approvals(&self) -> Result<(), ConfigError> {
        self.approvals
            .validate()
            .map_err(|(field, message)| ConfigError::field(field, message))?;
        if let Some(base) = &self.server.public_base_url {
            let url = url::Url::parse(base).map_err(|e| {
                ConfigError::field("server.public_base_url", format!("not a URL: {e}"))
            })?;
            let loopback = match url.host() {
                Some(url::Host::Domain(d)) => d == "localhost",
                Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                None => false,
            };
            if url.scheme() != "https" && !(url.scheme() == "http" && loopback) {
                return Err(ConfigError::field(
                    "server.public_base_url",
                    "must be https (plain http only for loopback development): approval links are bearer credentials",
                ));
            }
        }
        let gated = self.operations.iter().any(|op| {
            matches!(
                op.gate(),
                Some(GatePolicy::ApproveBeforeAct | GatePolicy::ApproveByException)
            )
        });
        if gated && crate::approval::public_base(self).is_none() {
            return Err(ConfigError::field(
                "server.public_base_url",
                "operations have approval gates and the service does not listen on loopback: set the https address approval links should use",
            ));
        }
        Ok(())
    }

    /// The target with this name.
    pub fn target(&self, name: &str) -> Option<&TargetConfig> {
        self.targets.iter().find(|t| t.name == name)
    }

    /// The source with this name.
    pub fn source(&self, name: &str) -> Option<&SourceConfig> {
        self.sources.iter().find(|s| s.name == name)
    }

    fn validate_targets(&self) -> Result<(), ConfigError> {
        let mut seen = std::collections::HashSet::new();
        for (i, target) in self.targets.iter().enumerate() {
            let at = format!("targets[{i}]");
            target
                .validate(&at)
                .map_err(|(field, message)| ConfigError::field(field, message))?;
            if !seen.insert(&target.name) {
                return Err(ConfigError::field(
                    format!("{at}.name"),
                    format!("{:?} is used twice", target.name),
                ));
            }
        }
        Ok(())
    }

    fn validate_sources(&self) -> Result<(), ConfigError> {
        let mut seen = std::collections::HashSet::new();
        for (i, source) in self.sources.iter().enumerate() {
            let at = |f: &str| format!("sources[{i}].{f}");
            if crate::ledger::Namespace::parse(source.name.clone()).is_err()
                || !source
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(ConfigError::field(
                    at("name"),
                    "must be 1-64 letters, digits, '_' or '-'",
                ));
            }
            if !seen.insert(&source.name) {
                return Err(ConfigError::field(
                    at("name"),
                    format!("{:?} is used twice", source.name),
                ));
            }
            let target = self.target(&source.target).ok_or_else(|| {
                ConfigError::field(
                    at("target"),
                    format!("no [[targets]] entry is named {:?}", source.target),
                )
            })?;
            target
                .join(&source.path)
                .map_err(|e| ConfigError::field(at("path"), e))?;
            match source.scheme {
                SchemeName::None if !source.secrets.is_empty() => {
                    return Err(ConfigError::field(
                        at("secrets"),
                        "scheme \"none\" verifies nothing; remove the secrets or pick a scheme",
                    ));
                }
                SchemeName::None => {}
                _ => {
                    let secrets = source
                        .resolved_secrets()
                        .map_err(|e| ConfigError::field(at("secrets"), e))?;
                    if secrets.is_empty() {
                        return Err(ConfigError::field(
                            at("secrets"),
                            "a signing scheme needs at least one secret",
                        ));
                    }
                }
            }
            if source.scheme == SchemeName::Hmac && source.hmac.is_none() {
                return Err(ConfigError::field(
                    at("hmac"),
                    "scheme \"hmac\" needs [sources.hmac] with its header",
                ));
            }
            let id = source.event_id_locator().ok_or_else(|| {
                ConfigError::field(
                    at("event_id"),
                    "this scheme has no default: give \"/pointer\" or \"header:Name\"",
                )
            })?;
            Locator::parse(&id).map_err(|e| ConfigError::field(at("event_id"), e))?;
            if let Some(kind) = source.event_type_locator() {
                Locator::parse(&kind).map_err(|e| ConfigError::field(at("event_type"), e))?;
            }
            if let Some(template) = &source.business_key {
                KeyTemplate::parse(template)
                    .map_err(|e| ConfigError::field(at("business_key"), e))?;
            }
            if !(0..=86_400).contains(&source.tolerance_secs) {
                return Err(ConfigError::field(
                    at("tolerance_secs"),
                    "must be between 0 and 86400",
                ));
            }
            if source.max_body_bytes < 1024 {
                return Err(ConfigError::field(
                    at("max_body_bytes"),
                    "must be at least 1024",
                ));
            }
        }
        Ok(())
    }

    fn validate_tokens(&self) -> Result<(), ConfigError> {
        let mut seen = std::collections::HashSet::new();
        for (i, token) in self.tokens.iter().enumerate() {
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
        }
        Ok(())
    }
}

/// Whether `value` looks like a stored token digest.
pub fn is_digest(value: &str) -> bool {
    value.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Sets a dotted field from an environment string, typed by its look.
fn set_field(table: &mut toml::Table, dotted: &str, raw: &str) {
    let (section, field) = dotted.split_once('.').unwrap_or(("", dotted));
    let value = if let Ok(n) = raw.parse::<i64>() {
        toml::Value::Integer(n)
    } else if let Ok(b) = raw.parse::<bool>() {
        toml::Value::Boolean(b)
    } else {
        toml::Value::String(raw.to_owned())
    };
    let entry = table
        .entry(section.to_owned())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let toml::Value::Table(inner) = entry {
        inner.insert(field.to_owned(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn load_text(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Config::load(Some(file.path()), env)
    }

    #[test]
    fn defaults_need_no_file() {
        let config = Config::load(None, Vec::new()).unwrap();
        assert_eq!(config.database.url, "sqlite://oncegate.db");
        assert_eq!(config.server.listen.to_string(), "127.0.0.1:8080");
    }

    #[test]
    fn pool_and_group_commit_defaults_follow_the_backend() {
        let config = Config::load(None, Vec::new()).unwrap();
        assert_eq!(config.database.pool_size(), SQLITE_DEFAULT_POOL);
        let group = config.database.group_commit();
        assert_eq!((group.max_batch, group.max_wait.as_micros()), (64, 0));
        let pg = load_text("[database]\nurl = \"postgres://h/db\"\n", &[]).unwrap();
        assert_eq!(pg.database.pool_size(), POSTGRES_DEFAULT_POOL);
        let set = load_text(
            "[database]\nmax_connections = 5\ngroup_commit_max_batch = 8\n",
            &[("ONCEGATE_DATABASE_GROUP_COMMIT_MAX_WAIT_US", "250")],
        )
        .unwrap();
        assert_eq!(set.database.pool_size(), 5);
        let group = set.database.group_commit();
        assert_eq!((group.max_batch, group.max_wait.as_micros()), (8, 250));
    }

    #[test]
    fn environment_overrides_file() {
        let config = load_text(
            "[database]\nurl = \"sqlite://a.db\"\n",
            &[
                ("ONCEGATE_DATABASE_URL", "sqlite://b.db"),
                ("ONCEGATE_LISTEN", "127.0.0.1:9"),
            ],
        )
        .unwrap();
        assert_eq!(config.database.url, "sqlite://b.db");
        assert_eq!(config.server.listen.port(), 9);
    }

    #[test]
    fn errors_name_the_field() {
        let err = load_text("[server]\nlisten = \"nowhere\"\n", &[]).unwrap_err();
        assert!(err.to_string().starts_with("server.listen:"), "{err}");
        let err = load_text("[server]\nlisen = \"127.0.0.1:1\"\n", &[]).unwrap_err();
        assert!(err.to_string().contains("lisen"), "{err}");
        let err = load_text("[database]\nurl = \"mysql://x\"\n", &[]).unwrap_err();
        assert!(err.to_string().starts_with("database.url:"), "{err}");
        let err = load_text(
            "[[tokens]]\nsubject = \"n8n\"\ndigest = \"plain-token\"\nscopes = [\"workflow\"]\n",
            &[],
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("tokens[0].digest:"), "{err}");
        let err = load_text(
            &format!(
                "[[tokens]]\nsubject = \"x\"\ndigest = \"sha256:{}\"\nscopes = [\"root\"]\n",
                "a".repeat(64)
            ),
            &[],
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("tokens[0].scopes"), "{err}");
        let err = load_text("[ledger]\nmax_lease_ms = 10\n", &[]).unwrap_err();
        assert!(err.to_string().starts_with("ledger.max_lease_ms:"), "{err}");
        let err = load_text("[database]\ngroup_commit_max_batch = 0\n", &[]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("database.group_commit_max_batch:"),
            "{err}"
        );
        let err = load_text(
            "",
            &[("ONCEGATE_DATABASE_GROUP_COMMIT_MAX_WAIT_US", "1000000")],
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("database.group_commit_max_wait_us:"),
            "{err}"
        );
        let err = load_text("server = [\n", &[]).unwrap_err();
        assert!(matches!(err, ConfigError::Syntax { .. }), "{err}");
    }

    // Audit integrity, redaction and retention (issue 6: audit).
    #[test]
    fn audit_retention_and_redaction_errors_name_the_field() {
        let config = load_text(
            "[audit]\ncheckpoint_interval_secs = 60\n[[redact]]\nnamespace = \"stripe\"\n\
             pointers = [\"/data/object/email\"]\n[retention]\narchive_dir = \"/tmp/a\"\n\
             [[retention.overrides]]\nnamespace = \"stripe\"\narchive_after_days = 7\n",
            &[("ONCEGATE_RETENTION_TOMBSTONE_DAYS", "120")],
        )
        .unwrap();
        assert_eq!(config.audit.checkpoint_interval_secs, 60);
        assert_eq!(config.retention.windows("stripe"), (7, 120));
        assert!(config.redactor().applies("stripe"));
        let err = load_text(
            "[[redact]]\nnamespace = \"x\"\npointers = [\"email\"]\n",
            &[],
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with("redact[0].pointers[0]:"),
            "{err}"
        );
        let err = load_text("[retention]\ntombstone_days = 10\n", &[]).unwrap_err();
        assert!(
            err.to_string().starts_with("retention.tombstone_days:"),
            "{err}"
        );
    }
}
