//! `oncegate approvals list`: approval challenges as cards, through the
//! server (`--url`, `--token`) or on the database directly.

use anyhow::Result;
use serde_json::Value;

use super::remote::{print_table, text, Remote};
use crate::approval::card::{state_filter, ApprovalCard};
use crate::config::Config;

/// Prints the challenges in `state` (most `limit`), as a table or JSON.
///
/// # Errors
/// An unknown state, the server refused, or the database failed.
pub(super) async fn list(
    state: &str,
    limit: i64,
    json: bool,
    remote: &Remote,
    config: &Config,
) -> Result<()> {
    let filter = state_filter(Some(state)).map_err(|e| anyhow::anyhow!("--state {e}"))?;
    let cards: Value = if remote.given() {
        let query = [("state", state.to_owned()), ("limit", limit.to_string())];
        remote.client(config)?.get("/v1/approvals", &query).await?
    } else {
        let store = super::open(config).await?;
        let challenges = store.challenges(filter, limit.clamp(1, 1000)).await;
        store.close().await;
        let cards: Vec<ApprovalCard> = challenges?.iter().map(ApprovalCard::from).collect();
        serde_json::to_value(cards)?
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&cards)?);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = cards
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let effects: Vec<String> = c["effects"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|e| format!("{}→{}", text(&e["effect_type"]), text(&e["target"])))
                .collect();
            vec![
                text(&c["id"]),
                text(&c["state"]),
                text(&c["operation"]),
                format!("{} / {}", text(&c["namespace"]), text(&c["key"])),
                text(&c["requested_by"]),
                text(&c["expires_at"]),
                effects.join(", "),
            ]
        })
        .collect();
    if rows.is_empty() {
        println!("no {state} approvals");
    } else {
        let header = [
            "ID",
            "STATE",
            "OPERATION",
            "NAMESPACE / KEY",
            "REQUESTED BY",
            "EXPIRES",
            "EFFECTS",
        ];
        print_table(&header, &rows);
    }
    Ok(())
}
