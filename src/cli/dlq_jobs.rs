//! `oncegate dlq bulk` (dry run, then a job) and `oncegate dlq jobs …`,
//! with the progress bar of a running bulk replay job.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

use super::dlq::{filter_query, text, Client, FilterArgs, JobsCommand};

/// Runs a `dlq jobs` command.
///
/// # Errors
/// The server could not be reached or refused the command.
pub(super) async fn run(client: &Client, command: JobsCommand, json_out: bool) -> Result<()> {
    match command {
        JobsCommand::List => {
            let jobs = client.get("/v1/replay-jobs", &[]).await?;
            if json_out {
                println!("{}", serde_json::to_string_pretty(&jobs)?);
                return Ok(());
            }
            println!(
                "{:<36}  {:<9}  {:>5}  {:>24}  BY",
                "ID", "STATE", "RATE", "REPLAYED/REFUSED/LEFT"
            );
            for j in jobs.as_array().into_iter().flatten() {
                let p = &j["progress"];
                let counts = format!("{}/{}/{}", p["replayed"], p["refused"], p["pending"]);
                println!(
                    "{:<36}  {:<9}  {:>5}  {:>24}  {}",
                    text(&j["id"]),
                    text(&j["state"]),
                    j["rate_per_sec"],
                    counts,
                    text(&j["created_by"])
                );
            }
        }
        JobsCommand::Show { id, watch: true } if !json_out => return watch(client, &id).await,
        JobsCommand::Show { id, .. } => {
            let detail = client
                .get(
                    &format!("/v1/replay-jobs/{id}"),
                    &[("items_limit", "1000".into())],
                )
                .await?;
            if json_out {
                println!("{}", serde_json::to_string_pretty(&detail)?);
            } else {
                print_job(&detail["job"]);
                for item in detail["items"].as_array().into_iter().flatten() {
                    println!(
                        "  #{:<5} {} {:<9} {}",
                        item["seq"],
                        text(&item["dead_letter_id"]),
                        text(&item["state"]),
                        text(&item["outcome"])
                    );
                }
            }
        }
        JobsCommand::Stop { id } => {
            let job = client
                .post(&format!("/v1/replay-jobs/{id}/stop"), &json!({}))
                .await?;
            report(&job, json_out)?;
        }
        JobsCommand::Resume { id, watch: follow } => {
            let job = client
                .post(&format!("/v1/replay-jobs/{id}/resume"), &json!({}))
                .await?;
            report(&job, json_out)?;
            if follow && !json_out {
                return watch(client, &id).await;
            }
        }
    }
    Ok(())
}

fn report(job: &Value, json_out: bool) -> Result<()> {
    if json_out {
        println!("{}", serde_json::to_string_pretty(job)?);
    } else {
        print_job(job);
    }
    Ok(())
}

fn print_job(j: &Value) {
    let p = &j["progress"];
    println!(
        "job {} is {} ({}/s, by {}): {} replayed, {} refused, {} remaining of {}",
        text(&j["id"]),
        text(&j["state"]),
        j["rate_per_sec"],
        text(&j["changed_by"]),
        p["replayed"],
        p["refused"],
        p["pending"],
        p["total"]
    );
}

/// Shows a job's progress as a bar until it is no longer running (or
/// Ctrl-C, which leaves the job running on the server).
///
/// # Errors
/// The server could not be reached.
pub(super) async fn watch(client: &Client, id: &str) -> Result<()> {
    let path = format!("/v1/replay-jobs/{id}");
    let query = [("items_limit", "0".to_owned())];
    let first = client.get(&path, &query).await?;
    let total = first["job"]["progress"]["total"].as_u64().unwrap_or(0);
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut job = first["job"].clone();
    loop {
        let p = &job["progress"];
        let done = p["replayed"].as_u64().unwrap_or(0) + p["refused"].as_u64().unwrap_or(0);
        bar.set_position(done);
        bar.set_message(format!(
            "replayed {} refused {} remaining {} ({})",
            p["replayed"],
            p["refused"],
            p["pending"],
            text(&job["state"])
        ));
        if job["state"] != "running" {
            break;
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {
                bar.abandon_with_message("stopped watching; the job keeps running on the server");
                println!("stop it with `oncegate dlq jobs stop {id}`");
                return Ok(());
            }
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        job = client.get(&path, &query).await?["job"].clone();
    }
    bar.finish();
    print_job(&job);
    Ok(())
}

/// `oncegate dlq bulk`'s arguments.
#[derive(Debug, clap::Args)]
pub struct BulkArgs {
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
    /// Replay after a fix: every item's failed effect corrected by this
    /// declared transform, NAME@VERSION (`[[dead_letters.transforms]]`).
    #[arg(long, value_name = "NAME@VERSION")]
    transform: Option<String>,
}

/// Runs `dlq bulk`: the dry run, then (with --execute) the job.
///
/// # Errors
/// A bad selection, or the server could not be reached or refused it.
pub(super) async fn bulk(client: &Client, b: BulkArgs, json_out: bool) -> Result<()> {
    let criteria = filter_query(&b.filter);
    // A malformed --transform is refused before anything is asked.
    let fix = b
        .transform
        .as_deref()
        .map(super::dlq_fix::transform)
        .transpose()?;
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
    if json_out && !b.execute {
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
    let mut body =
        json!({ "selection": { "ids": dry["ids"] }, "reason": reason, "rate_per_sec": rate });
    if let Some(t) = fix {
        body["fix"] = json!({ "transform": t });
    }
    let job = client.post("/v1/replay-jobs", &body).await?;
    let id = text(&job["id"]);
    println!("\njob {id} started at {rate}/s; stop it with `oncegate dlq jobs stop {id}`");
    if b.no_wait {
        return Ok(());
    }
    watch(client, &id).await
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
