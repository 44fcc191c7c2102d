//! The commands of the `oncegate` binary.
//!
//! `main.rs` parses the command line and sets up logging; everything a
//! command does lives here so tests can call it too.

use std::future::IntoFuture;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::api;
use crate::clock::{SharedClock, SystemClock};
use crate::config::{Config, LogFormat, Scope};
use crate::ingress::Sources;
use crate::ledger::{IdempotencyKey, Namespace};
use crate::ops::Metrics;
use crate::outbox::{Dispatcher, KillSwitch};
use crate::state::AppState;
use crate::store::{self, SharedStore, StoreOptions, StoredToken};
use crate::tokens::{self, Authenticator};
use tokio::sync::Notify;

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

/// Opens the configured store.
///
/// # Errors
/// The database cannot be reached or the URL is unsupported.
pub async fn open_store(config: &Config, clock: SharedClock) -> Result<SharedStore> {
    let options = StoreOptions {
        max_connections: config.database.pool_size(),
        busy_timeout_ms: config.database.busy_timeout_ms,
        clock,
        use_db_clock: true,
        redaction: Arc::new(config.redactor()),
    };
    store::connect_with(
        &config.database.url,
        options,
        config.database.group_commit(),
    )
    .await
    .with_context(|| {
        format!(
            "opening database {}",
            store::redact_url(&config.database.url)
        )
    })
}

/// Builds the app around a migrated store. When no token is configured and
/// none is stored yet, creates one admin token, stores its digest, and
/// returns the token so the caller can show it once.
///
/// # Errors
/// Reading or writing stored tokens failed.
pub async fn build_state(
    config: Config,
    store: SharedStore,
    clock: SharedClock,
) -> Result<(AppState, Option<String>)> {
    let mut bootstrap = None;
    let stored = if config.tokens.is_empty() {
        let mut stored = store.stored_tokens().await?;
        if stored.is_empty() {
            let token = tokens::generate_token();
            let entry = StoredToken {
                digest: tokens::digest(&token),
                subject: "admin".into(),
                scopes: vec![Scope::Admin.as_str().into()],
                roles: vec![],
            };
            store.insert_token(&entry).await?;
            stored.push(entry);
            bootstrap = Some(token);
        }
        stored
    } else {
        // Once tokens are configured, the first-start token stops working.
        Vec::new()
    };
    let auth = Authenticator::new(&config.tokens, &stored);
    let sources = Sources::prepare(&config).map_err(anyhow::Error::msg)?;
    let schemas = crate::validate::OutputSchemas::prepare(&config).map_err(anyhow::Error::msg)?;
    let state = AppState {
        schemas: Arc::new(schemas),
        wake: Arc::new(Notify::new()),
        kill_switch: KillSwitch::new(store.clone()),
        sources: Arc::new(sources),
        store,
        auth: Arc::new(auth),
        metrics: Arc::new(Metrics::from_config(&config)),
        config: Arc::new(config),
        clock,
    };
    Ok((state, bootstrap))
}

/// Serves the app on `listener` until `shutdown` is cancelled, then lets
/// in-flight requests finish (up to the configured grace period).
///
/// # Errors
/// The server failed to accept connections.
pub async fn run_server(
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
) -> Result<()> {
    let grace = Duration::from_millis(state.config.server.shutdown_grace_ms);
    let app = api::router(state);
    let stopped = shutdown.clone();
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    let server =
        axum::serve(listener, app).with_graceful_shutdown(async move { stopped.cancelled().await });
    let mut server = std::pin::pin!(server.into_future());
    tokio::select! {
        result = &mut server => result.context("serving HTTP")?,
        () = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(grace_ms = grace.as_millis() as u64, "in-flight requests outlived the shutdown grace period");
        }
    }
    Ok(())
}

/// Starts the dispatcher inside this process when the config enables it;
/// it stops when `shutdown` is cancelled. Applies
/// `dispatcher.actions_enabled = false` (`ONCEGATE_ACTIONS_ENABLED`) first.
///
/// # Errors
/// The kill switch could not be written, or a target's client not built.
pub async fn spawn_dispatcher(
    state: &AppState,
    shutdown: CancellationToken,
) -> Result<Option<tokio::task::JoinHandle<()>>> {
    let config = &state.config.dispatcher;
    if !config.actions_enabled {
        state
            .store
            .set_actions("*", false, "env:ONCEGATE_ACTIONS_ENABLED")
            .await
            .context("engaging the kill switch")?;
        tracing::warn!("actions are disabled at start: effects will wait until enabled");
    }
    if !config.enabled {
        tracing::info!("the dispatcher is disabled in this instance");
        return Ok(None);
    }
    let dispatcher = Dispatcher::new(
        state.store.clone(),
        &state.config.targets,
        config.clone(),
        state.clock.clone(),
        state.metrics.clone(),
        state.wake.clone(),
        state.kill_switch.clone(),
    )
    .context("building the target clients")?;
    Ok(Some(tokio::spawn(Arc::new(dispatcher).run(shutdown))))
}

/// Starts the bulk replay runner inside this process when
/// `dead_letters.runner_enabled`; it stops when `shutdown` is cancelled,
/// releasing the job it holds so another process resumes it at once.
pub fn spawn_replay_runner(
    state: &AppState,
    shutdown: CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    let config = &state.config.dead_letters;
    if !config.runner_enabled {
        tracing::info!("the replay runner is disabled in this instance");
        return None;
    }
    let ctx = crate::deadletter::replay::ReplayContext {
        store: state.store.clone(),
        config: state.config.clone(),
        wake: state.wake.clone(),
    };
    let runner = Arc::new(crate::deadletter::runner::ReplayRunner::new(ctx, config));
    Some(tokio::spawn(runner.run(shutdown)))
}

/// The approval expiry sweeper of this app (start it with `run`).
pub fn approval_sweeper(state: &AppState) -> crate::approval::sweeper::Sweeper {
    crate::approval::sweeper::Sweeper::new(
        state.store.clone(),
        state.config.clone(),
        state.clock.clone(),
        state.wake.clone(),
        state.metrics.clone(),
    )
}

/// `oncegate serve`.
///
/// # Errors
/// Start-up failed: the database, the migrations, or the listen address.
pub async fn serve(config: Config, shutdown: CancellationToken) -> Result<()> {
    // Chaos tests (issue 9): a crash-point setting with a typo stops here.
    crate::chaos::arm().map_err(anyhow::Error::msg)?;
    let clock: SharedClock = Arc::new(SystemClock);
    let store = open_store(&config, clock.clone()).await?;
    store.migrate().await.context("applying migrations")?;
    let listen = config.server.listen;
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let mut config = config;
    if config.server.public_base_url.is_none() && listen.ip().is_loopback() {
        // Links must name the port actually bound (listen may say :0).
        config.server.public_base_url = Some(format!("http://{}", listener.local_addr()?));
    }
    let (state, bootstrap) = build_state(config, store.clone(), clock).await?;
    if let Some(token) = bootstrap {
        println!(
            "No API token is configured, so oncegate created one admin token.\n\
             It is shown only this once (only its digest is stored):\n\n    {token}\n\n\
             Use it as `Authorization: Bearer <token>`. Configure [[tokens]] \
             (`oncegate token new`) to replace it."
        );
    }
    if state.auth.is_empty() {
        tracing::warn!("no API token is usable; every API call will be refused");
    }
    tracing::info!(
        address = %listener.local_addr()?,
        database = store.backend(),
        "oncegate listening"
    );
    let dispatcher = spawn_dispatcher(&state, shutdown.clone()).await?;
    let replayer = spawn_replay_runner(&state, shutdown.clone());
    let maintenance = crate::ops::commands::spawn_maintenance(&state, shutdown.clone())?;
    let sweeper = tokio::spawn(approval_sweeper(&state).run(shutdown.clone()));
    run_server(listener, state, shutdown.clone()).await?;
    shutdown.cancel();
    let _ = maintenance.await;
    if let Some(dispatcher) = dispatcher {
        // The dispatcher finishes its current step (sends in flight are
        // recorded) before the pools close.
        let _ = dispatcher.await;
    }
    if let Some(replayer) = replayer {
        // The replay runner finishes its current item and releases its job.
        let _ = replayer.await;
    }
    let _ = sweeper.await;
    store.close().await;
    tracing::info!("oncegate stopped");
    Ok(())
}

/// A token cancelled on SIGINT or SIGTERM.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(term) => term,
                    Err(err) => {
                        tracing::error!(error = %err, "cannot listen for SIGTERM");
                        let _ = ctrl_c.await;
                        cancel.cancel();
                        return;
                    }
                };
            tokio::select! {
                _ = ctrl_c => {},
                _ = term.recv() => {},
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        tracing::info!("shutdown signal received; finishing in-flight requests");
        cancel.cancel();
    });
    token
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
