//! `oncegate config check`: the configuration was loaded and checked
//! before any command runs, so this reports what it found; with
//! `--connect` it also tries the database once and names why it cannot be
//! used (refused, authentication, unknown database, read-only, no answer).

use anyhow::{bail, Result};

use crate::config::Config;

/// Prints what the checked configuration holds; with `connect`, tries the
/// database too.
///
/// # Errors
/// The database cannot be used, with the cause.
pub(super) async fn check(config: &Config, connect: bool) -> Result<()> {
    let database = crate::config::redact_url(&config.database.url);
    println!(
        "configuration ok: listen {}, database {database}, {} token(s)",
        config.server.listen,
        config.tokens.len()
    );
    if !connect {
        return Ok(());
    }
    match crate::db::probe::probe(&config.database.url).await {
        Ok(found) => {
            println!("database ok: {}", found.detail);
            Ok(())
        }
        Err(cause) => bail!("database {database}: {cause}"),
    }
}
