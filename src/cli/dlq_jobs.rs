//! `oncegate dlq jobs …` and the progress bar of a running bulk replay job.

use std::time::Duration;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

use super::dlq::{text, Client, JobsCommand};

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
                "{:<36}  {:<9}  {:>5}  {:>24}  {}",
                "ID", "STATE", "RATE", "REPLAYED/REFUSED/LEFT", "BY"
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
