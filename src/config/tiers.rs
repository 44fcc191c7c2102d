//! The Redis tier against the other sections (DESIGN.md §9): a Redis-tier
//! namespace serves claims and owner moves only, so no webhook source,
//! Idempotency-Key proxy or dead-letter owner may be configured in it.
//! (Effects, gates and dead-letter actions name runs at request time:
//! `api::access` refuses those.)

use super::{Config, ConfigError};
use crate::ledger::Tier;

/// Checks the relations of the Redis-tier namespaces.
///
/// # Errors
/// [`ConfigError::Field`] naming the namespace entry at fault.
pub(super) fn validate(config: &Config) -> Result<(), ConfigError> {
    for (i, entry) in config.ledger.namespaces.iter().enumerate() {
        if entry.tier != Some(Tier::Redis) {
            continue;
        }
        let ns = entry.namespace.as_str();
        let refuse = |what: String| {
            Err(ConfigError::field(
                format!("ledger.namespaces[{i}].tier"),
                format!(
                    "namespace {ns:?} is on the Redis tier, which serves claims and owner moves \
                     only: {what}"
                ),
            ))
        };
        if config.source(ns).is_some() {
            return refuse(format!(
                "it is also the webhook source [[sources]] {ns:?}; ingress needs the SQL tier"
            ));
        }
        if ns.starts_with(crate::proxy::NAMESPACE_PREFIX) {
            return refuse("the Idempotency-Key proxy's namespaces need the SQL tier".into());
        }
        if config.dead_letters.owners.contains_key(ns) {
            return refuse(format!(
                "dead_letters.owners names it, and it has no dead letters; remove {ns:?} there"
            ));
        }
        if entry.stranded_after.is_some() {
            return refuse(
                "stranded_after applies to the recovery sweeper, which reads the SQL tier; \
                 an abandoned Redis run is reclaimed, or forgotten after redis.dedup_window"
                    .into(),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Result<(), String> {
        let text = format!(
            "[redis]\nurl = \"redis://127.0.0.1:6379\"\n\
             [[ledger.namespaces]]\nnamespace = \"hot\"\ntier = \"redis\"\n{extra}"
        );
        let config: Config = toml::from_str(&text).map_err(|e| e.to_string())?;
        config.validate().map_err(|e| e.to_string())
    }

    #[test]
    fn a_redis_namespace_refuses_what_needs_sql() {
        config("").unwrap();
        let err = config("stranded_after = \"1h\"\n").unwrap_err();
        assert!(err.starts_with("ledger.namespaces[0].tier"), "{err}");
        let err = config("[dead_letters.owners]\nhot = \"ops\"\n").unwrap_err();
        assert!(err.contains("no dead letters"), "{err}");
        let source = "[[targets]]\nname = \"n8n\"\nbase_url = \"http://127.0.0.1:5678\"\n\
             [[sources]]\nname = \"hot\"\nscheme = \"github\"\nsecrets = [\"s\"]\n\
             target = \"n8n\"\n";
        let err = config(source).unwrap_err();
        assert!(err.contains("webhook source"), "{err}");
    }
}
