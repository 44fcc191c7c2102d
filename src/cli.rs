//! The commands of the `oncegate` binary.
//!
//! `main.rs` parses the command line and sets up logging; everything a
//! command does lives here so tests can call it too.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use crate::api;
use crate::app::{open_store, serve, shutdown_on_signal};
use crate::clock::SystemClock;
use crate::config::{Config, LogFormat, Scope};
use crate::ledger::{IdempotencyKey, Namespace};
use crate::store;
use crate::tokens;

// Dead letters and replay (issue 6, branch dlq).
mod dlq;
mod dlq_jobs;
mod dlq_show;
pub use dlq::{DlqArgs, DlqCommand, JobsCommand};

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
    /// The kill switch: hold or release every effect, or one target's.
    Actions {
        /// What to do.
        #[command(subcommand)]
        command: ActionsCommand,
    },
    /// Run (ledger) commands.
    Runs {
        /// The runs command.
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// Dead letters: list, show, resolve, replay, replace, bulk replay jobs
    /// (talks to the running server; needs an operator token).
    Dlq(DlqArgs),
    // Audit integrity, retention and backup (issue 6: audit).
    /// The audit log: verify chains and checkpoints, write a checkpoint.
    Audit {
        /// The audit command.
        #[command(subcommand)]
        command: crate::ops::commands::AuditCommand,
    },
    /// Retention: archive old terminal runs, slim them, delete old tombstones.
    Retention {
        /// The retention command.
        #[command(subcommand)]
        command: crate::ops::commands::RetentionCommand,
    },
    /// Write a consistent copy of the SQLite database (safe while serving).
    Backup {
        /// The new backup file (must not exist).
        file: PathBuf,
    },
    /// Approval challenges.
    Approvals {
        /// The approvals command.
        #[command(subcommand)]
        command: ApprovalsCommand,
    },
    /// The Retry Lab: compare delivery strategies under injected faults in
    /// a seeded simulation (no database, no network).
    Lab(LabArgs),
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
    Check,
}

/// `oncegate token …`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a fresh token and the config entry that holds its digest.
    New {
        /// The person or workflow the token speaks for.
        #[arg(long)]
        subject: String,
        /// A scope (repeatable): workflow, operator, approver, admin.
        #[arg(long = "scope", value_enum, required = true)]
        scopes: Vec<Scope>,
        /// A role for approval policies (repeatable).
        #[arg(long = "role")]
        roles: Vec<String>,
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
    /// Print one run as JSON.
    Get {
        /// The run's namespace.
        namespace: String,
        /// The run's key.
        key: String,
    },
}

/// Runs a parsed command with its loaded configuration.
///
/// # Errors
/// Whatever the command failed on, with context.
pub async fn run(command: Command, config: Config) -> Result<()> {
    match command {
        Command::Serve => serve(config, shutdown_on_signal()).await,
        Command::Migrate => {
            let store = open_store(&config, Arc::new(SystemClock)).await?;
            store.migrate().await.context("applying migrations")?;
            println!(
                "migrations applied to {}",
                store::redact_url(&config.database.url)
            );
            store.close().await;
            Ok(())
        }
        Command::Config {
            command: ConfigCommand::Check,
        } => {
            println!(
                "configuration ok: listen {}, database {}, {} token(s)",
                config.server.listen,
                store::redact_url(&config.database.url),
                config.tokens.len()
            );
            Ok(())
        }
        Command::Token {
            command:
                TokenCommand::New {
                    subject,
                    scopes,
                    roles,
                },
        } => {
            print!("{}", new_token_text(&subject, &scopes, &roles));
            Ok(())
        }
        Command::Actions { command } => actions(command, &config).await,
        Command::Dlq(args) => dlq::run(args, &config).await,
        Command::Audit { command } => crate::ops::commands::audit(command, &config).await,
        Command::Retention { command } => crate::ops::commands::retention(command, &config).await,
        Command::Backup { file } => crate::ops::commands::backup(&file, &config).await,
        Command::Approvals {
            command: ApprovalsCommand::List { state, limit, json },
        } => {
            let state =
                api::approvals::state_filter(Some(&state)).map_err(|e| anyhow::anyhow!("{e}"))?;
            let store = open_store(&config, Arc::new(SystemClock)).await?;
            store.migrate().await.context("applying migrations")?;
            let challenges = store.challenges(state, limit.clamp(1, 10_000)).await?;
            store.close().await;
            let cards: Vec<api::approvals::ApprovalCard> = challenges
                .iter()
                .map(api::approvals::ApprovalCard::from)
                .collect();
            if json {
                println!("{}", serde_json::to_string_pretty(&cards)?);
            } else {
                print!("{}", api::approvals::card_table(&cards));
            }
            Ok(())
        }
        Command::Lab(args) => lab(&args),
        Command::Runs {
            command: RunsCommand::Get { namespace, key },
        } => {
            let namespace = Namespace::parse(namespace)?;
            let key = IdempotencyKey::parse(key)?;
            let store = open_store(&config, Arc::new(SystemClock)).await?;
            store.migrate().await.context("applying migrations")?;
            let run = store.get_run(&namespace, &key).await?;
            store.close().await;
            let run =
                run.with_context(|| format!("no run with key {key} in namespace {namespace}"))?;
            println!(
                "{}",
                serde_json::to_string_pretty(&api::RunView::from(run))?
            );
            Ok(())
        }
    }
}

/// `oncegate actions …`: writes the switch in the database, audited with
/// the operating-system user as the actor; every instance sees it within
/// a second.
async fn actions(command: ActionsCommand, config: &Config) -> Result<()> {
    let store = open_store(config, Arc::new(SystemClock)).await?;
    store.migrate().await.context("applying migrations")?;
    let (enabled, target) = match command {
        ActionsCommand::Disable { target } => (false, target),
        ActionsCommand::Enable { target } => (true, target),
        ActionsCommand::Status => {
            for s in store.action_switches().await? {
                println!(
                    "{:<24} {:<8} by {}",
                    s.scope,
                    if s.enabled { "enabled" } else { "DISABLED" },
                    s.changed_by
                );
            }
            store.close().await;
            return Ok(());
        }
    };
    if let Some(target) = &target {
        if config.target(target).is_none() {
            anyhow::bail!("no target is named {target:?} in the configuration");
        }
    }
    let scope = target.unwrap_or_else(|| "*".into());
    let actor = format!(
        "cli:{}",
        std::env::var("USER").unwrap_or_else(|_| "unknown".into())
    );
    store.set_actions(&scope, enabled, &actor).await?;
    store.close().await;
    println!(
        "actions {} for {scope}",
        if enabled { "enabled" } else { "disabled" }
    );
    Ok(())
}

/// The text `token new` prints: the token once, and its config entry.
pub fn new_token_text(subject: &str, scopes: &[Scope], roles: &[String]) -> String {
    let token = tokens::generate_token();
    let entry = crate::config::TokenConfig {
        subject: subject.to_owned(),
        digest: tokens::digest(&token),
        scopes: scopes.to_vec(),
        roles: roles.to_vec(),
    };
    let snippet = toml::to_string(&toml::Table::from_iter([(
        "tokens".to_owned(),
        toml::Value::try_from(vec![entry]).unwrap_or(toml::Value::Array(Vec::new())),
    )]))
    .unwrap_or_default();
    format!(
        "token (shown once; store it in your workflow's credentials):\n{token}\n\n\
         add to oncegate.toml (only the digest is kept):\n{snippet}"
    )
}

// Retry Lab (issue 9): `oncegate lab`.

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
    pub strategies: Vec<crate::lab::Strategy>,
    /// Only these faults: concurrent, lost-ack, crash, timeout, storm.
    #[arg(long = "fault", value_delimiter = ',')]
    pub faults: Vec<crate::lab::FaultKind>,
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

impl LabArgs {
    /// The scenario these flags describe.
    pub fn scenario(&self) -> crate::lab::Scenario {
        use crate::lab::{CrashPoint, Fault, FaultKind, Scenario, Strategy};
        let points: &[CrashPoint] = match self.crash_point {
            LabCrashPoint::Before => &[CrashPoint::Before],
            LabCrashPoint::After => &[CrashPoint::After],
            LabCrashPoint::Both => &[CrashPoint::Before, CrashPoint::After],
        };
        let pick = |chosen: &[FaultKind]| {
            if chosen.is_empty() {
                FaultKind::ALL.to_vec()
            } else {
                chosen.to_vec()
            }
        };
        Scenario {
            seed: self.seed,
            events: self.events,
            rate: self.rate,
            strategies: if self.strategies.is_empty() {
                Strategy::ALL.to_vec()
            } else {
                self.strategies.clone()
            },
            faults: Fault::of_kinds(&pick(&self.faults), points),
        }
    }
}

/// Runs the lab and prints (and writes) its report.
fn lab(args: &LabArgs) -> Result<()> {
    let report = crate::lab::run(&args.scenario())?;
    if let Some(path) = &args.html {
        std::fs::write(path, crate::lab::html::page(&report))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", crate::lab::report::json(&report)?);
    } else {
        print!("{}", crate::lab::report::table(&report));
    }
    Ok(())
}
