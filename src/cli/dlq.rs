//! `oncegate dlq …`: the dead-letter console. It talks to the running
//! server's HTTP API (base URL and operator token from flags or
//! `ONCEGATE_URL` / `ONCEGATE_TOKEN`), so every command is authenticated,
//! audited with the token's subject, and goes through the same checks as
//! any other client; bulk jobs run inside the server, and this command only
//! creates, watches, stops and resumes them.

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Value};

use super::remote::Remote;
pub(super) use super::remote::{text, Client};
use crate::config::Config;

/// `oncegate dlq …`.
#[derive(Debug, Args)]
pub struct DlqArgs {
    /// The server and the operator token.
    #[command(flatten)]
    pub remote: Remote,
    /// Print the server's JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: DlqCommand,
}

/// How a dead letter is resolved.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ResolveAs {
    /// Nothing more is done.
    Reject,
    /// Handled by hand (the effect happened, or was undone).
    Compensated,
}

/// Which dead letters (list and bulk filters).
#[derive(Debug, Clone, Default, Args)]
pub struct FilterArgs {
    /// Class (permanent, retry_exhausted, unknown_outcome, payload_conflict, approval_expired, workflow_error, stranded, reclaim_budget_exhausted).
    #[arg(long)]
    pub class: Option<String>,
    /// Namespace (source or tenant).
    #[arg(long)]
    pub namespace: Option<String>,
    /// The run's current state.
    #[arg(long)]
    pub state: Option<String>,
    /// At least this old: 90s, 15m, 2h, 7d.
    #[arg(long)]
    pub older_than: Option<String>,
    /// At most this old.
    #[arg(long)]
    pub newer_than: Option<String>,
}

/// The dead-letter commands.
#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List dead letters, oldest first (open ones by default).
    List {
        /// Filters.
        #[command(flatten)]
        filter: FilterArgs,
        /// `false` (open), `true` (resolved) or `any`.
        #[arg(long, default_value = "false")]
        resolved: String,
        /// Page size.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// Continue after a previous page.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Show one dead letter with its evidence, effects and timeline.
    Show {
        /// Dead letter id.
        id: String,
    },
    /// Resolve: the run ends failed_terminal with your note.
    Resolve {
        /// Dead letter id.
        id: String,
        /// reject or compensated.
        #[arg(long = "as", value_enum)]
        resolution: ResolveAs,
        /// Why (required).
        #[arg(long)]
        note: String,
    },
    /// Replay: the same effects under the same idempotency keys; after a
    /// fix, with the failed effect's body corrected.
    Replay(super::dlq_fix::ReplayArgs),
    /// Release a run that queued no effect (stranded, reclaim budget
    /// exhausted, workflow error) back to the workflow's re-run: the next
    /// claim reclaims it, with its reclaim budget restarted.
    Release {
        /// Dead letter id.
        id: String,
        /// Why (required).
        #[arg(long)]
        reason: String,
    },
    /// Replace with a new event under a new upstream key, linked to the original.
    Replace {
        /// Dead letter id.
        id: String,
        /// The new upstream-issued key.
        #[arg(long)]
        key: String,
        /// Why (required).
        #[arg(long)]
        reason: String,
    },
    /// Bulk replay: a dry run by default; --execute starts a rate-limited job.
    Bulk(super::dlq_jobs::BulkArgs),
    /// Bulk replay jobs.
    Jobs {
        /// The jobs command.
        #[command(subcommand)]
        command: JobsCommand,
    },
}

/// `oncegate dlq jobs …`.
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List jobs, newest first.
    List,
    /// Show a job's progress and items.
    Show {
        /// Job id.
        id: String,
        /// Follow its progress until it stops.
        #[arg(long)]
        watch: bool,
    },
    /// Stop a job between items.
    Stop {
        /// Job id.
        id: String,
    },
    /// Resume a stopped job.
    Resume {
        /// Job id.
        id: String,
        /// Follow its progress until it stops.
        #[arg(long)]
        watch: bool,
    },
}

pub(super) fn filter_query(f: &FilterArgs) -> Vec<(&'static str, String)> {
    [
        ("class", &f.class),
        ("namespace", &f.namespace),
        ("state", &f.state),
        ("older_than", &f.older_than),
        ("newer_than", &f.newer_than),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.clone().map(|v| (k, v)))
    .collect()
}

/// Posts an operator command (`resolve`, `replay`, `release`, `replace`)
/// on dead letter `id` and reads its answer.
async fn act(
    client: &Client,
    id: &str,
    command: &str,
    body: &Value,
    json_out: bool,
) -> Result<Value> {
    let done = client
        .post(&format!("/v1/dead-letters/{id}/{command}"), body)
        .await?;
    let verb = match command {
        "replay" => "replayed".to_owned(),
        other => format!("{other}d"),
    };
    Ok(super::dlq_show::action_line(&done, json_out, &verb))
}

/// Runs a `dlq` command.
///
/// # Errors
/// The server could not be reached or refused the command (its problem
/// detail is shown).
pub async fn run(args: DlqArgs, config: &Config) -> Result<()> {
    let client = args.remote.client(config)?;
    let json_out = args.json;
    let out = match args.command {
        DlqCommand::List {
            filter,
            resolved,
            limit,
            cursor,
        } => {
            let mut q = filter_query(&filter);
            q.push(("resolved", resolved));
            q.push(("limit", limit.to_string()));
            if let Some(c) = cursor {
                q.push(("cursor", c));
            }
            let page = client.get("/v1/dead-letters", &q).await?;
            if !json_out {
                super::dlq_show::print_list(&page);
                return Ok(());
            }
            page
        }
        DlqCommand::Show { id } => {
            let detail = client.get(&format!("/v1/dead-letters/{id}"), &[]).await?;
            if !json_out {
                super::dlq_show::print_show(&detail);
                return Ok(());
            }
            detail
        }
        DlqCommand::Resolve {
            id,
            resolution,
            note,
        } => {
            let resolution = match resolution {
                ResolveAs::Reject => "reject",
                ResolveAs::Compensated => "compensated",
            };
            let body = json!({ "resolution": resolution, "note": note });
            act(&client, &id, "resolve", &body, json_out).await?
        }
        DlqCommand::Replay(fix) => {
            let dry_run = fix.dry_run;
            let answer = super::dlq_fix::replay(&client, fix).await?;
            if dry_run {
                answer
            } else {
                super::dlq_show::action_line(&answer, json_out, "replayed")
            }
        }
        DlqCommand::Release { id, reason } => {
            let body = json!({ "reason": reason });
            act(&client, &id, "release", &body, json_out).await?
        }
        DlqCommand::Replace { id, key, reason } => {
            let body = json!({ "key": key, "reason": reason });
            act(&client, &id, "replace", &body, json_out).await?
        }
        DlqCommand::Bulk(args) => {
            return super::dlq_jobs::bulk(&client, args, json_out).await;
        }
        DlqCommand::Jobs { command } => {
            return super::dlq_jobs::run(&client, command, json_out).await
        }
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
