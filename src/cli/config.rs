//! `oncegate config check`: the configuration was loaded and checked
//! before any command runs, so this only reports what it found.

use crate::config::Config;

/// Prints what the checked configuration holds.
pub(super) fn check(config: &Config) {
    println!(
        "configuration ok: listen {}, database {}, {} token(s)",
        config.server.listen,
        crate::config::redact_url(&config.database.url),
        config.tokens.len()
    );
}
