//! `oncegate runs get NAMESPACE KEY`: one run, through the server
//! (`--url`, `--token`) or on the database directly.

use anyhow::{Context, Result};
use serde_json::Value;

use super::remote::{print_table, text, Remote};
use crate::api::RunView;
use crate::config::Config;
use crate::ledger::{IdempotencyKey, Namespace};

/// Prints the run `(namespace, key)` as the API shows it: a field table,
/// or its JSON.
///
/// # Errors
/// A malformed namespace or key, no such run, the server refused, or the
/// database failed.
pub(super) async fn get(
    namespace: String,
    key: String,
    remote: &Remote,
    json: bool,
    config: &Config,
) -> Result<()> {
    let run: Value = if remote.given() {
        remote
            .client(config)?
            .get("/v1/runs", &[("namespace", namespace), ("key", key)])
            .await?
    } else {
        let namespace = Namespace::parse(namespace)?;
        let key = IdempotencyKey::parse(key)?;
        let store = super::open(config).await?;
        let run = store.get_run(&namespace, &key).await;
        store.close().await;
        let run =
            run?.with_context(|| format!("no run with key {key} in namespace {namespace}"))?;
        serde_json::to_value(RunView::from(run))?
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&run)?);
        return Ok(());
    }
    // Field by field, in the API's order; absent fields are left out.
    let rows: Vec<Vec<String>> = run
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| vec![k.clone(), text(v)])
        .collect();
    print_table(&["FIELD", "VALUE"], &rows);
    Ok(())
}
