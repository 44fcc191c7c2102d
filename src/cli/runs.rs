//! `oncegate runs get NAMESPACE KEY`: one run as JSON.

use anyhow::{Context, Result};

use crate::api::RunView;
use crate::config::Config;
use crate::ledger::{IdempotencyKey, Namespace};

/// Prints the run `(namespace, key)` as the API shows it.
///
/// # Errors
/// A malformed namespace or key, no such run, or the database failed.
pub(super) async fn get(namespace: String, key: String, config: &Config) -> Result<()> {
    let namespace = Namespace::parse(namespace)?;
    let key = IdempotencyKey::parse(key)?;
    let store = super::open(config).await?;
    let run = store.get_run(&namespace, &key).await?;
    store.close().await;
    let run = run.with_context(|| format!("no run with key {key} in namespace {namespace}"))?;
    println!("{}", serde_json::to_string_pretty(&RunView::from(run))?);
    Ok(())
}
