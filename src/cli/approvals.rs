//! `oncegate approvals list`: approval challenges as cards.

use anyhow::Result;

use crate::approval::card::{card_table, state_filter, ApprovalCard};
use crate::config::Config;

/// Prints the challenges in `state` (most `limit`), as a table or JSON.
///
/// # Errors
/// An unknown state, or the database failed.
pub(super) async fn list(state: &str, limit: i64, json: bool, config: &Config) -> Result<()> {
    let state = state_filter(Some(state)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let store = super::open(config).await?;
    let challenges = store.challenges(state, limit.clamp(1, 10_000)).await?;
    store.close().await;
    let cards: Vec<ApprovalCard> = challenges.iter().map(ApprovalCard::from).collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&cards)?);
    } else {
        print!("{}", card_table(&cards));
    }
    Ok(())
}
