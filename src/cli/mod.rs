//! The commands of the `oncegate` binary, one file per command group.
//!
//! `main.rs` parses the command line (the types in `args.rs`), loads the
//! configuration and sets up logging, then hands the command to [`run`].
//! `serve` is the composition root's ([`crate::app::serve`]). The operator
//! commands talk to a running server over its API (`remote.rs`: `--url`,
//! `--token`): `dlq`, `proxy` and `tokens` always; `actions`, `runs get` and
//! `approvals list` when a URL or token is given, and on the database
//! directly otherwise; `audit status` always. `migrate`, `backup` and
//! `audit verify|checkpoint` open the database directly, so they run with
//! the server down, and need only the database settings.

use std::sync::Arc;

use anyhow::{Context, Result};

use crate::app::{open_store, serve, shutdown_on_signal};
use crate::clock::SystemClock;
use crate::config::Config;
use crate::db::SharedStore;

mod actions;
mod approvals;
mod args;
mod audit;
mod backup;
mod config;
mod dlq;
mod dlq_fix;
mod dlq_jobs;
mod dlq_show;
mod lab;
mod progress;
mod proxy;
mod recovery;
mod remote;
mod retention;
mod runs;
mod targets;
mod token;
mod tokens;

pub use args::{
    ActionsCommand, ApprovalsCommand, AuditCommand, Cli, Command, ConfigCommand, LabArgs,
    LabCrashPoint, RecoveryCommand, RetentionCommand, RunsCommand, TargetsCommand, TokenCommand,
    TokenGrant, TokensCommand,
};
pub use dlq::{DlqArgs, DlqCommand, JobsCommand};
pub use proxy::{ProxyArgs, ProxyCommand};
pub use token::new_token_text;

/// Runs a parsed command with its loaded configuration.
///
/// # Errors
/// Whatever the command failed on, with context.
pub async fn run(command: Command, config: Config) -> Result<()> {
    match command {
        Command::Serve => serve(config, shutdown_on_signal()).await,
        Command::Migrate => migrate(&config).await,
        Command::Config {
            command: ConfigCommand::Check { connect },
        } => config::check(&config, connect).await,
        Command::Token {
            command: TokenCommand::New { grant },
        } => {
            print!(
                "{}",
                new_token_text(&grant.subject, &grant.scopes, &grant.roles)
            );
            Ok(())
        }
        Command::Actions {
            remote,
            json,
            command,
        } => actions::run(command, &remote, json, &config).await,
        Command::Targets {
            remote,
            json,
            command,
        } => targets::run(command, &remote, json, &config).await,
        Command::Tokens {
            remote,
            json,
            command,
        } => tokens::run(command, &remote, json, &config).await,
        Command::Dlq(args) => dlq::run(args, &config).await,
        Command::Proxy(args) => proxy::run(args, &config).await,
        Command::Audit { remote, command } => audit::run(command, &remote, &config).await,
        Command::Retention { command } => retention::run(command, &config).await,
        Command::Recovery { command } => recovery::run(command, &config).await,
        Command::Backup { file } => backup::run(&file, &config).await,
        Command::Approvals {
            remote,
            command: ApprovalsCommand::List { state, limit, json },
        } => approvals::list(&state, limit, json, &remote, &config).await,
        Command::Lab(args) => lab::run(&args),
        Command::Runs {
            remote,
            json,
            command: RunsCommand::Get { namespace, key },
        } => runs::get(namespace, key, &remote, json, &config).await,
    }
}

/// `oncegate migrate`.
async fn migrate(config: &Config) -> Result<()> {
    let store = open(config).await?;
    println!(
        "migrations applied to {}",
        crate::config::redact_url(&config.database.url)
    );
    store.close().await;
    Ok(())
}

/// The configured store, migrated: what every command that works on the
/// database directly starts with.
async fn open(config: &Config) -> Result<SharedStore> {
    let store = open_store(config, Arc::new(SystemClock)).await?;
    store.migrate().await.context("applying migrations")?;
    Ok(store)
}
