//! Configuration: `oncegate.toml` layered with `ONCEGATE_*` variables.
//!
//! The file is optional; every field has a default that runs a single node
//! on SQLite at `127.0.0.1:8080`. Environment variables (see [`ENV_VARS`])
//! override the file. Everything is checked at start, and every error names
//! the field it is about (`database.url: …`).
//!
//! Each section checks itself (its own `validate`): the ones defined here
//! in [`sections`], the parts' beside their parts. [`Config::validate`]
//! calls each, then checks the relations between sections (a source's
//! target, the approval links' address, the dispatcher's lease against the
//! targets' timeouts). Each part is handed only its own sections.

use std::path::PathBuf;

use serde::Deserialize;

use crate::approval::{GatePolicy, OperationConfig};
use crate::ingress::SourceConfig;
use crate::outbox::{DispatcherConfig, TargetConfig};
use lists::validate_list;

mod lists;
mod load;
pub mod sections;
mod tiers;

pub use crate::ledger::LedgerConfig;
pub use crate::tokens::{is_digest, Scope, TokenConfig};
pub use sections::{
    redact_url, validate_tokens, DatabaseConfig, LogConfig, LogFormat, ServerConfig,
    POSTGRES_DEFAULT_POOL, SQLITE_DEFAULT_POOL,
};

#[cfg(test)]
mod tests;

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

/// A part's section reports `(field, message)`: the parts know nothing of
/// this module's error type.
impl From<(String, String)> for ConfigError {
    fn from((field, message): (String, String)) -> Self {
        Self::field(field, message)
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
    /// Metric label bounds.
    pub metrics: crate::metrics::MetricsConfig,
    /// Dead letters: owners, retention, the bulk replay runner.
    pub dead_letters: crate::deadletter::DeadLetterConfig,
    /// Audit checkpoints and periodic verification.
    pub audit: crate::audit::AuditConfig,
    /// Fields replaced by `"[redacted]"` before storage, per namespace.
    pub redact: Vec<crate::audit::RedactionRule>,
    /// Archiving old runs, slimming them to tombstones, deleting tombstones.
    pub retention: crate::retention::RetentionConfig,
    /// Approval sessions, single sign-on and the expiry sweeper.
    pub approvals: crate::approval::ApprovalsConfig,
    /// The recovery sweeper (stranded runs, spent reclaim budgets).
    pub recovery: crate::ledger::RecoveryConfig,
    /// Idempotency-Key proxies in front of targets (`/proxy/{name}/…`).
    pub proxies: Vec<crate::proxy::ProxyConfig>,
    /// The Redis that holds the `tier = "redis"` namespaces.
    pub redis: crate::ledger::RedisConfig,
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
    (
        "ONCEGATE_REPLAY_RUNNER_ENABLED",
        "dead_letters.runner_enabled",
    ),
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
    (
        "ONCEGATE_RETENTION_DELIVERIES_DAYS",
        "retention.deliveries_days",
    ),
    ("ONCEGATE_RETENTION_OUTPUT_DAYS", "retention.output_days"),
    ("ONCEGATE_LOG_FORMAT", "log.format"),
    ("ONCEGATE_LOG_LEVEL", "log.level"),
];

impl Config {
    /// Checks every section, then the relations between sections.
    ///
    /// # Errors
    /// [`ConfigError::Field`] for the first bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.database.validate()?;
        self.ledger.validate()?;
        self.server.validate()?;
        self.log.validate()?;
        validate_tokens(&self.tokens)?;
        validate_list("targets", &self.targets, "used", TargetConfig::validate)?;
        validate_list("sources", &self.sources, "used", SourceConfig::validate)?;
        validate_list(
            "operations",
            &self.operations,
            "declared",
            validate_operation,
        )?;
        self.metrics.validate()?;
        self.dead_letters.validate()?;
        for (i, rule) in self.redact.iter().enumerate() {
            rule.validate(&format!("redact[{i}]"))?;
        }
        self.retention.validate()?;
        self.recovery.validate()?;
        self.approvals.validate()?;
        self.dispatcher.validate()?;
        validate_list(
            "proxies",
            &self.proxies,
            "used",
            crate::proxy::ProxyConfig::validate,
        )?;
        self.redis.validate(&self.ledger)?;
        self.validate_relations()?;
        lists::validate_dead_letter_operations(&self.dead_letters, &self.operations)?;
        tiers::validate(self)?;
        let bounds = crate::proxy::config::Bounds {
            max_lease_ms: self.ledger.max_lease_ms,
            request_timeout_ms: self.server.request_timeout_ms,
        };
        crate::proxy::config::validate_relations(&self.proxies, &self.targets, bounds)?;
        Ok(())
    }

    /// The checks that read two sections: every source forwards to a
    /// declared target and fits in the unauthenticated body budget,
    /// approval links have an address when operations are
    /// gated, and a dispatcher lease outlives the slowest target's send.
    fn validate_relations(&self) -> Result<(), ConfigError> {
        for (i, source) in self.sources.iter().enumerate() {
            let at = |f: &str| format!("sources[{i}].{f}");
            let target = self.target(&source.target).ok_or_else(|| {
                ConfigError::field(
                    at("target"),
                    format!("no [[targets]] entry is named {:?}", source.target),
                )
            })?;
            target
                .join(&source.path)
                .map_err(|e| ConfigError::field(at("path"), e))?;
            // A delivery that can never fit in the budget could never be read.
            if source.max_body_bytes > self.server.unauthenticated_body_budget_bytes {
                return Err(ConfigError::field(
                    at("max_body_bytes"),
                    "must not exceed server.unauthenticated_body_budget_bytes",
                ));
            }
        }
        let gated = self.operations.iter().any(|op| {
            matches!(
                op.gate(),
                Some(GatePolicy::ApproveBeforeAct | GatePolicy::ApproveByException)
            )
        });
        if gated && self.server.public_base().is_none() {
            return Err(ConfigError::field(
                "server.public_base_url",
                "operations have approval gates and the service does not listen on loopback: set the https address approval links should use",
            ));
        }
        if self.approvals.oidc.is_some() && self.server.public_base().is_none() {
            return Err(ConfigError::field(
                "server.public_base_url",
                "[approvals.oidc] needs the address people reach the service at: the provider sends them back to <public_base_url>/auth/oidc/callback",
            ));
        }
        let longest = self
            .targets
            .iter()
            .map(|t| t.timeout_ms + t.connect_timeout_ms)
            .max()
            .unwrap_or(0);
        if self.dispatcher.lease_ms <= longest as i64 {
            return Err(ConfigError::field(
                "dispatcher.lease_ms",
                format!("must exceed the longest target timeout ({longest} ms), or a slow send would look dead"),
            ));
        }
        Ok(())
    }

    /// The redaction rules, compiled.
    pub fn redactor(&self) -> crate::audit::Redactor {
        crate::audit::Redactor::new(&self.redact)
    }

    /// The operation with this name.
    pub fn operation(&self, name: &str) -> Option<&OperationConfig> {
        self.operations.iter().find(|o| o.name == name)
    }

    /// The target with this name.
    pub fn target(&self, name: &str) -> Option<&TargetConfig> {
        self.targets.iter().find(|t| t.name == name)
    }

    /// The source with this name.
    pub fn source(&self, name: &str) -> Option<&SourceConfig> {
        self.sources.iter().find(|s| s.name == name)
    }
}

/// An operation checks itself; the names of oncegate's own effects are
/// reserved.
fn validate_operation(op: &OperationConfig, at: &str) -> Result<(), (String, String)> {
    op.validate(at)?;
    if op.name == crate::ingress::FORWARD_OPERATION
        || op.name == crate::approval::CALLBACK_OPERATION
    {
        let message = "is reserved for oncegate's own effects";
        return Err((format!("{at}.name"), message.into()));
    }
    Ok(())
}

/// Sets a dotted field from an environment string, typed by its look.
fn set_field(table: &mut toml::Table, dotted: &str, raw: &str) {
    let (section, field) = dotted.split_once('.').unwrap_or(("", dotted));
    let value = match (raw.parse::<i64>(), raw.parse::<bool>()) {
        (Ok(n), _) => toml::Value::Integer(n),
        (_, Ok(b)) => toml::Value::Boolean(b),
        _ => toml::Value::String(raw.to_owned()),
    };
    let entry = table
        .entry(section.to_owned())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let toml::Value::Table(inner) = entry {
        inner.insert(field.to_owned(), value);
    }
}
