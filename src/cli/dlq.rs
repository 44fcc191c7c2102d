//! `oncegate dlq …`: the dead-letter console. It talks to the running
//! server's HTTP API (base URL and operator token from flags or
//! `ONCEGATE_URL` / `ONCEGATE_TOKEN`), so every command is authenticated,
//! audited with the token's subject, and goes through the same checks as
//! any other client; bulk jobs run inside the server, and this command only
//! creates, watches, stops and resumes them.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Value};

use crate::config::Config;

/// `oncegate dlq …`.
#[derive(Debug, Args)]
pub struct DlqArgs {
    /// Base URL of the running server (default: `http://` + `server.listen`).
    #[arg(long, env = "ONCEGATE_URL", global = true)]
    pub url: Option<String>,
    /// An operator token. Prefer `ONCEGATE_TOKEN`: arguments show in process lists.
    #[arg(long, env = "ONCEGATE_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
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
    /// Class (permanent, retry_exhausted, unknown_outcome, payload_conflict, approval_expired, workflow_error).
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
    /// Replay: the same effects under the same idempotency keys.
    Replay {
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
    Bulk {
        /// Dead letter ids (repeatable); or use the filters.
        #[arg(long = "id")]
        ids: Vec<String>,
        /// Filters, frozen into ids when the job is created.
        #[command(flatten)]
        filter: FilterArgs,
        /// Why (required with --execute).
        #[arg(long)]
        reason: Option<String>,
        /// Create and start the job (after showing the dry run).
        #[arg(long)]
        execute: bool,
        /// Items per second (required with --execute).
        #[arg(long)]
        rate: Option<i64>,
        /// Return once the job is created instead of showing its progress.
        #[arg(long)]
        no_wait: bool,
    },
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

/// The server's HTTP API as an operator sees it.
pub(super) struct Client {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Client {
    fn new(args: &DlqArgs, config: &Config) -> Result<Self> {
        let token = args
            .token
            .clone()
            .context("an operator token is required: set ONCEGATE_TOKEN (or --token)")?;
        let base = args.url.clone().unwrap_or_else(|| {
            let listen = config.server.listen;
            let host = if listen.ip().is_unspecified() {
                "127.0.0.1".to_owned()
            } else {
                listen.ip().to_string()
            };
            format!("http://{host}:{}", listen.port())
        });
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .context("building the HTTP client")?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token,
            http,
        })
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<Value> {
        let resp = req
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| format!("reaching {}", self.base))?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            let detail = body["detail"].as_str().unwrap_or("no detail");
            let kind = body["type"].as_str().unwrap_or("");
            bail!("{status}: {detail} ({kind})");
        }
        Ok(body)
    }

    pub(super) async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value> {
        self.send(self.http.get(format!("{}{path}", self.base)).query(query))
            .await
    }

    pub(super) async fn post(&self, path: &str, body: &Value) -> Result<Value> {
        self.send(self.http.post(format!("{}{path}", self.base)).json(body))
            .await
    }
}

fn filter_query(f: &FilterArgs) -> Vec<(&'static str, String)> {
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

pub(super) fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

/// Runs a `dlq` command.
///
/// # Errors
/// The server could not be reached or refused the command (its problem
/// detail is shown).
pub async fn run(args: DlqArgs, config: &Config) -> Result<()> {
    let client = Client::new(&args, config)?;
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
                print_list(&page);
                return Ok(());
            }
            page
        }
        DlqCommand::Show { id } => {
            let detail = client.get(&format!("/v1/dead-letters/{id}"), &[]).await?;
            if !json_out {
                print_show(&detail);
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
            let done = client
                .post(
                    &format!("/v1/dead-letters/{id}/resolve"),
                    &json!({ "resolution": resolution, "note": note }),
                )
                .await?;
            action_line(&done, json_out, "resolved")
        }
        DlqCommand::Replay { id, reason } => {
            let done = client
                .post(
                    &format!("/v1/dead-letters/{id}/replay"),
                    &json!({ "reason": reason }),
                )
                .await?;
            action_line(&done, json_out, "replayed")
        }
        DlqCommand::Replace { id, key, reason } => {
            let done = client
                .post(
                    &format!("/v1/dead-letters/{id}/replace"),
                    &json!({ "key": key, "reason": reason }),
                )
                .await?;
            action_line(&done, json_out, "replaced")
        }
        DlqCommand::Bulk {
            ids,
            filter,
            reason,
            execute,
            rate,
            no_wait,
        } => {
            return bulk(
                &client,
                BulkArgs {
                    ids,
                    filter,
                    reason,
                    execute,
                    rate,
                    no_wait,
                    json: json_out,
                },
            )
            .await;
        }
        DlqCommand::Jobs { command } => {
            return super::dlq_jobs::run(&client, command, json_out).await
        }
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

fn action_line(done: &Value, json_out: bool, verb: &str) -> Value {
    if json_out {
        return done.clone();
    }
    let dl = &done["dead_letter"];
    let run = &done["run"];
    println!(
        "dead letter {} {verb} ({}); run {}/{} is now {}; effects: {}",
        text(&dl["id"]),
        text(&dl["resolution"]),
        text(&run["namespace"]),
        text(&run["key"]),
        text(&run["state"]),
        done["effects"]
    );
    Value::Null
}

fn print_list(page: &Value) {
    let items = page["items"].as_array().cloned().unwrap_or_default();
    println!(
        "{:<36}  {:>8}  {:<17}  {:<16}  {:<14}  {}",
        "ID", "AGE", "CLASS", "RUN", "STATE", "ERROR"
    );
    for d in &items {
        let run = format!("{}/{}", text(&d["namespace"]), text(&d["key"]));
        let age = d["age_seconds"].as_i64().unwrap_or(0);
        println!(
            "{:<36}  {:>7}s  {:<17}  {:<16}  {:<14}  {}",
            text(&d["id"]),
            age,
            text(&d["class"]),
            short(&run, 16),
            text(&d["state"]),
            short(&text(&d["error"]), 60)
        );
    }
    println!("{} dead letter(s)", items.len());
    if let Some(cursor) = page["next_cursor"].as_str() {
        println!("more: --cursor {cursor}");
    }
}

fn print_show(detail: &Value) {
    let d = &detail["dead_letter"];
    for field in [
        "id",
        "class",
        "component",
        "namespace",
        "key",
        "state",
        "run_state_at_record",
        "error",
        "operation",
        "correlation_id",
        "workflow_version",
        "payload_ref",
        "payload_hash",
        "owner",
        "next_action",
        "replay_count",
        "created_at",
        "resolution",
        "resolved_by",
        "resolution_note",
        "retention_deadline",
    ] {
        println!("{field:<20} {}", text(&d[field]));
    }
    println!(
        "\nlast evidence:\n{}",
        serde_json::to_string_pretty(&d["last_evidence"]).unwrap_or_default()
    );
    println!("\neffects:");
    for e in detail["effects"].as_array().into_iter().flatten() {
        println!(
            "  {} {} -> {} key {} state {} attempts {}",
            text(&e["effect_type"]),
            text(&e["method"]),
            text(&e["target"]),
            text(&e["idempotency_key"]),
            text(&e["state"]),
            e["attempts"]
        );
    }
    println!("\ntimeline:");
    for a in detail["timeline"].as_array().into_iter().flatten() {
        println!(
            "  #{} {} {} -> {} by {}",
            a["seq"],
            text(&a["kind"]),
            text(&a["from_state"]),
            text(&a["to_state"]),
            text(&a["actor"])
        );
    }
}

struct BulkArgs {
    ids: Vec<String>,
    filter: FilterArgs,
    reason: Option<String>,
    execute: bool,
    rate: Option<i64>,
    no_wait: bool,
    json: bool,
}

async fn bulk(client: &Client, b: BulkArgs) -> Result<()> {
    let criteria = filter_query(&b.filter);
    let selection = match (b.ids.is_empty(), criteria.is_empty()) {
        (false, true) => json!({ "ids": b.ids }),
        (true, false) => json!({ "filter": criteria.into_iter().map(|(k, v)| (k.to_owned(), Value::String(v))).collect::<serde_json::Map<_, _>>() }),
        (true, true) => bail!("select what to replay: --id ID (repeatable) or a filter (--class, --namespace, --state, --older-than, --newer-than)"),
        (false, false) => bail!("give --id or filters, not both"),
    };
    let dry = client
        .post(
            "/v1/replay-jobs/dry-run",
            &json!({ "selection": selection }),
        )
        .await?;
    if b.json && !b.execute {
        println!("{}", serde_json::to_string_pretty(&dry)?);
        return Ok(());
    }
    print_summary(&dry["summary"]);
    if !b.execute {
        println!(
            "\ndry run: nothing was replayed. Add --execute --rate N --reason TEXT to start a job."
        );
        return Ok(());
    }
    let rate = b
        .rate
        .context("--execute needs --rate N (items per second)")?;
    let reason = b.reason.context("--execute needs --reason TEXT")?;
    // The job replays exactly the ids the dry run showed.
    let body =
        json!({ "selection": { "ids": dry["ids"] }, "reason": reason, "rate_per_sec": rate });
    let job = client.post("/v1/replay-jobs", &body).await?;
    let id = text(&job["id"]);
    println!("\njob {id} started at {rate}/s; stop it with `oncegate dlq jobs stop {id}`");
    if b.no_wait {
        return Ok(());
    }
    super::dlq_jobs::watch(client, &id).await
}

fn print_summary(s: &Value) {
    println!("selected:     {}", s["total"]);
    println!(
        "replayable:   {} ({} back to the workflow's re-run)",
        s["replayable"], s["rerun"]
    );
    println!("targets:      {}", s["targets"]);
    println!("classes:      {}", s["classes"]);
    let gated = s["gated"].as_array().cloned().unwrap_or_default();
    println!("gated:        {} (need a new approval)", gated.len());
    for g in gated.iter().take(20) {
        println!(
            "  {} {} ({})",
            text(&g["id"]),
            text(&g["operation"]),
            text(&g["gate"])
        );
    }
    let refused = s["refused"].as_array().cloned().unwrap_or_default();
    println!("refused:      {}", refused.len());
    for r in refused.iter().take(20) {
        println!("  {} {}", text(&r["id"]), text(&r["why"]));
    }
}
