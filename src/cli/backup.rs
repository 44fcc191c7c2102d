//! `oncegate backup FILE`: a consistent copy of a live SQLite database
//! (PostgreSQL: the `pg_dump` procedure is printed instead).

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::config::Config;
use crate::ledger::storage::StoreError;

/// Runs `oncegate backup FILE`.
///
/// # Errors
/// PostgreSQL (the procedure is printed), or the copy failed.
pub async fn run(file: &Path, config: &Config) -> Result<()> {
    let store = super::open(config).await?;
    let spinner = super::progress::spinner(&format!("copying the database to {}", file.display()));
    let result = store.backup(file).await;
    spinner.finish_and_clear();
    store.close().await;
    match result {
        Ok(()) => {
            println!("backup written to {} (integrity check ok)", file.display());
            Ok(())
        }
        Err(StoreError::Unsupported(procedure)) => {
            println!("{procedure}");
            bail!("refusing: `oncegate backup` copies SQLite only; follow the pg_dump procedure above")
        }
        Err(err) => Err(err).context("writing the backup"),
    }
}
