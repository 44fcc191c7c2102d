//! The command line's types: every command, subcommand and flag of the
//! `oncegate` binary (`dlq`'s own live beside its code, in `cli/dlq.rs`).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::dlq::DlqArgs;
use super::remote::Remote;
use crate::config::{LogFormat, Scope};
use crate::lab::{FaultKind, Strategy};

/// oncegate: makes side-effecting workflow automation safe to retry.
#[derive(Debug, Parser)]
#[command(name = "oncegate", version, about)]
pub struct Cli {
    /// Configuration file (TOML). Optional: defaults run on SQLite.
    #[arg(long, global = true, env = "ONCEGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Log format; overrides `log.format`.
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogFormat>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP service (applies migrations first).
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Configuration commands.
    Config {
        /// The configuration command.
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// API token commands.
    Token {
        /// The token command.
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// API tokens made at run time: create (shown once), list, revoke
    /// (through the server; needs an admin token).
    Tokens {
        /// The server and an admin token.
        #[command(flatten)]
        remote: Remote,
        /// Print JSON instead of a table.
        #[arg(long, global = true)]
        json: bool,
        /// What to do.
        #[command(subcommand)]
        command: TokensCommand,
    },
    /// The kill switch: hold or release every effect, or one target's
    /// (through the server with --url/--token, else on the database).
    Actions {
        /// The server and an admin token (operator to read).
        #[command(flatten)]
        remote: Remote,
        /// Print JSON instead of a table.
        #[arg(long, global = true)]
        json: bool,
        /// What to do.
        #[command(subcommand)]
        command: ActionsCommand,
    },
    /// Target health: list every target's state, or enable or disable
    /// one (through the server with --url/--token).
    Targets {
        /// The server and an admin token (operator to list).
        #[command(flatten)]
        remote: Remote,
        /// Print JSON instead of a table.
        #[arg(long, global = true)]
        json: bool,
        /// What to do.
        #[command(subcommand)]
        command: TargetsCommand,
    },
    /// Run (ledger) commands (through the server with --url/--token, else
    /// on the database).
    Runs {
        /// The server and a workflow or operator token.
        #[command(flatten)]
        remote: Remote,
        /// Print JSON instead of a table.
        #[arg(long, global = true)]
        json: bool,
        /// The runs command.
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// Dead letters: list, show, resolve, replay, replace, bulk replay jobs
    /// (talks to the running server; needs an operator token).
    Dlq(DlqArgs),
    /// The Idempotency-Key proxy: resolve an unknown key as found or not
    /// found (talks to the running server; needs an operator token).
    Proxy(super::proxy::ProxyArgs),
    /// The audit log: verify chains and checkpoints, write a checkpoint
    /// (on the database); the latest results (`status`, through the server).
    Audit {
        /// The server and an operator token (for `status`).
        #[command(flatten)]
        remote: Remote,
        /// The audit command.
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Retention: archive old terminal runs, slim them, delete old tombstones.
    Retention {
        /// The retention command.
        #[command(subcommand)]
        command: RetentionCommand,
    },
    /// Recovery: dead-letter stranded runs and runs past their reclaim budget.
    Recovery {
        /// The recovery command.
        #[command(subcommand)]
        command: RecoveryCommand,
    },
    /// Write a consistent copy of the SQLite database (safe while serving).
    Backup {
        /// The new backup file (must not exist).
        file: PathBuf,
    },
    /// Approval challenges (through the server with --url/--token, else on
    /// the database).
    Approvals {
        /// The server and an approver or operator token.
        #[command(flatten)]
        remote: Remote,
        /// The approvals command.
        #[command(subcommand)]
        command: ApprovalsCommand,
    },
    /// The Retry Lab: compare delivery strategies under injected faults in
    /// a seeded simulation (no database, no network).
    Lab(LabArgs),
}

impl Command {
    /// Whether the command runs the service's work (and so needs every
    /// setting, secrets included) rather than a tool's: serving, checking
    /// the configuration, retention and recovery passes.
    pub fn needs_service_config(&self) -> bool {
        matches!(
            self,
            Self::Serve | Self::Config { .. } | Self::Retention { .. } | Self::Recovery { .. }
        )
    }
}

/// `oncegate approvals …`.
#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List approval challenges as cards (pending by default).
    List {
        /// pending, approved, rejected, expired, escalated, or all.
        #[arg(long, default_value = "pending")]
        state: String,
        /// Most rows.
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// `oncegate config …`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the configuration (file and environment) without starting.
    Check {
        /// Also try the database once (5 s at most) and name why it cannot
        /// be used: refused, authentication, unknown database, read-only.
        #[arg(long)]
        connect: bool,
    },
}

/// `oncegate token …`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a fresh token and the config entry that holds its digest.
    New {
        /// Whom it speaks for and what it may do.
        #[command(flatten)]
        grant: TokenGrant,
    },
}

/// What a token is given, in `token new` and `tokens create`.
#[derive(Debug, Args)]
pub struct TokenGrant {
    /// The person or workflow the token speaks for.
    #[arg(long)]
    pub subject: String,
    /// A scope (repeatable): workflow, operator, approver, proxy, admin.
    #[arg(long = "scope", value_enum, required = true)]
    pub scopes: Vec<Scope>,
    /// A role for approval policies (repeatable; for `tokens create`, one
    /// you hold).
    #[arg(long = "role")]
    pub roles: Vec<String>,
}

/// `oncegate tokens …`.
#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Make a token; it is printed once (only its digest is stored).
    Create {
        /// Whom it speaks for and what it may do.
        #[command(flatten)]
        grant: TokenGrant,
        /// A namespace or prefix (`billing:*`) it reaches (repeatable;
        /// none: every namespace).
        #[arg(long = "namespace")]
        namespaces: Vec<String>,
        /// When it stops working (RFC 3339; default: never).
        #[arg(long)]
        expires_at: Option<String>,
    },
    /// List every token (never a token's value).
    List,
    /// Revoke a stored token by its id (every instance refuses it within seconds).
    Revoke {
        /// The token's id, as listed.
        id: String,
    },
}

/// `oncegate targets …`.
#[derive(Debug, Subcommand)]
pub enum TargetsCommand {
    /// Every target's health: healthy, paused, probing or disabled.
    List,
    /// Enable a target (after a 410 or a disable): its held effects go out, each once.
    Enable {
        /// The target's name.
        target: String,
    },
    /// Disable a target: its effects wait until it is enabled.
    Disable {
        /// The target's name.
        target: String,
    },
}

/// `oncegate actions …`.
#[derive(Debug, Subcommand)]
pub enum ActionsCommand {
    /// Engage the kill switch: effects wait, nothing is sent.
    Disable {
        /// Only this target (default: every target).
        #[arg(long)]
        target: Option<String>,
    },
    /// Release the kill switch: waiting effects go out, each once.
    Enable {
        /// Only this target (default: every target).
        #[arg(long)]
        target: Option<String>,
    },
    /// Show every switch.
    Status,
}

/// `oncegate runs …`.
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// Show one run (`--json`: as the API answers it).
    Get {
        /// The run's namespace.
        namespace: String,
        /// The run's key.
        key: String,
    },
}

/// `oncegate audit …`.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Walk every chain, run head and the latest checkpoint; name the first
    /// bad row of each broken chain. Exits non-zero when anything is wrong.
    Verify {
        /// Only this namespace's chains (the checkpoints are always checked).
        #[arg(long)]
        namespace: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write a checkpoint over every chain head now.
    Checkpoint,
    /// What the latest verification and checkpoint found (through the
    /// server: `--url`, `--token`).
    Status {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check an archive file's chains against the heads its runs recorded.
    VerifyArchive {
        /// A `runs-*.jsonl` file written by retention.
        file: PathBuf,
    },
}

/// `oncegate retention …`.
#[derive(Debug, Subcommand)]
pub enum RetentionCommand {
    /// Run one sweep now: scrub, archive and slim, delete old tombstones.
    Run {
        /// Count what a sweep would do; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// `oncegate recovery …`.
#[derive(Debug, Subcommand)]
pub enum RecoveryCommand {
    /// Run one recovery pass now, under the same lease as the passes of `serve`.
    Run,
}

/// `oncegate lab`.
#[derive(Debug, clap::Args)]
pub struct LabArgs {
    /// Seeds every random choice: the same seed prints the same numbers.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Events per strategy and fault (1 to 100000).
    #[arg(long, default_value_t = 1_000)]
    pub events: usize,
    /// The share of events each fault is injected into, above 0 and at most 1.
    #[arg(long, default_value_t = 0.2)]
    pub rate: f64,
    /// Where the crash faults strike: before or after the side effect, or both.
    #[arg(long, value_enum, default_value_t = LabCrashPoint::Both)]
    pub crash_point: LabCrashPoint,
    /// Only these strategies (a-g or their names; repeatable or comma-separated).
    #[arg(long = "strategy", value_delimiter = ',')]
    pub strategies: Vec<Strategy>,
    /// Only these faults: concurrent, lost-ack, crash, timeout, storm.
    #[arg(long = "fault", value_delimiter = ',')]
    pub faults: Vec<FaultKind>,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML page with a chart per fault.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

/// `--crash-point`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LabCrashPoint {
    /// After the guard, before the side effect.
    Before,
    /// After the side effect, before it is recorded.
    After,
    /// One crash fault at each point.
    Both,
}
