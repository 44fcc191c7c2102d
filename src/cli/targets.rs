//! `oncegate targets list|enable|disable`: target health through a running
//! server (`--url`, `--token`: the change is audited under the token's
//! subject).

use anyhow::Result;
use serde_json::{json, Value};

use super::args::TargetsCommand;
use super::remote::{print_table, rows_of, text, Remote};
use crate::config::Config;

/// `oncegate targets …`.
///
/// # Errors
/// The server refused (its problem detail is shown) or cannot be reached.
pub(super) async fn run(
    command: TargetsCommand,
    remote: &Remote,
    json_out: bool,
    config: &Config,
) -> Result<()> {
    let client = remote.client(config)?;
    let rows: Value = match &command {
        TargetsCommand::List => client.get("/v1/admin/targets", &[]).await?,
        TargetsCommand::Enable { target } | TargetsCommand::Disable { target } => {
            let enabled = matches!(command, TargetsCommand::Enable { .. });
            let path = format!("/v1/admin/targets/{target}");
            let view = client.post(&path, &json!({ "enabled": enabled })).await?;
            json!([view])
        }
    };
    if json_out {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    let rows = rows_of(&rows, |t| {
        vec![
            text(&t["target"]),
            text(&t["state"]).to_uppercase(),
            text(&t["failures"]),
            text(&t["paused_until"]),
            text(&t["cause"]),
            text(&t["changed_by"]),
        ]
    });
    print_table(
        &[
            "TARGET",
            "STATE",
            "FAILURES",
            "PAUSED UNTIL",
            "CAUSE",
            "CHANGED BY",
        ],
        &rows,
    );
    Ok(())
}
