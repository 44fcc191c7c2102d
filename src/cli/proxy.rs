//! `oncegate proxy resolve`: an operator's decision on an unknown key of
//! the Idempotency-Key proxy, over the running server's API (base URL and
//! operator token from flags or `ONCEGATE_URL` / `ONCEGATE_TOKEN`).

use anyhow::Result;
use clap::{Args, Subcommand};
use serde_json::json;

use super::remote::{text, Remote};
use crate::config::Config;

/// `oncegate proxy …`.
#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// The server and the operator token.
    #[command(flatten)]
    pub remote: Remote,
    /// What to do.
    #[command(subcommand)]
    pub command: ProxyCommand,
}

/// The proxy commands.
#[derive(Debug, Subcommand)]
pub enum ProxyCommand {
    /// Resolve an unknown key after checking the upstream: `--found` (it
    /// happened: the key closes) or `--not-found` (it did not: the next
    /// request with the key is forwarded).
    Resolve {
        /// The proxy's name.
        #[arg(long)]
        proxy: String,
        /// The token subject that sent the key.
        #[arg(long)]
        subject: String,
        /// The key as the client sent it, without its quotes.
        #[arg(long)]
        key: String,
        /// The upstream carried the request out.
        #[arg(
            long,
            conflicts_with = "not_found",
            required_unless_present = "not_found"
        )]
        found: bool,
        /// The upstream has no trace of it.
        #[arg(long)]
        not_found: bool,
        /// What you found (required).
        #[arg(long)]
        note: String,
    },
}

/// Runs `oncegate proxy …`.
///
/// # Errors
/// The server is unreachable or refused the decision.
pub async fn run(args: ProxyArgs, config: &Config) -> Result<()> {
    let client = args.remote.client(config)?;
    let ProxyCommand::Resolve {
        proxy,
        subject,
        key,
        found,
        not_found: _,
        note,
    } = args.command;
    let finding = if found { "found" } else { "not_found" };
    let body = json!({ "proxy": proxy, "subject": subject, "key": key,
                       "finding": finding, "note": note });
    let answer = client.post("/v1/proxy/resolve", &body).await?;
    println!(
        "resolved {finding}: run {} / {} is now {}",
        text(&answer["run"]["namespace"]),
        text(&answer["run"]["key"]),
        text(&answer["run"]["state"]),
    );
    Ok(())
}
