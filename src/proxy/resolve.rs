//! An operator's decision on an unknown key, after checking the upstream:
//! **found** (the request was carried out: the key's dead letter is
//! resolved as compensated and its run closes, so the key is never
//! forwarded again) or **not found** (it never happened: the run is
//! released, and the next request with the key is forwarded). Both go
//! through the dead letters' own commands, audited with the operator.

use std::fmt;
use std::str::FromStr;

use crate::deadletter::port::DeadLetterStore;
use crate::deadletter::{ActionOutcome, ReplayCommand, Resolution, ResolveCommand};
use crate::ledger::storage::StoreError;
use crate::ledger::{IdempotencyKey, Namespace, Run};

use super::ProxyStore;

/// What the operator found upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Finding {
    /// The upstream carried the request out.
    Found,
    /// The upstream has no trace of it.
    NotFound,
}

impl Finding {
    /// The name operators write.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Found => "found",
            Self::NotFound => "not_found",
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Finding {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "found" => Ok(Self::Found),
            "not_found" | "not-found" => Ok(Self::NotFound),
            other => Err(format!("{other:?} is neither found nor not_found")),
        }
    }
}

/// One decision on an unknown key.
#[derive(Debug, Clone)]
pub struct Decision {
    /// `proxy:{name}`.
    pub namespace: Namespace,
    /// The scoped key (`{subject}:{key}`).
    pub key: IdempotencyKey,
    /// What the operator found.
    pub finding: Finding,
    /// The operator.
    pub actor: String,
    /// Why, in words (required).
    pub note: String,
    /// How long the resolved dead letter is kept, in milliseconds.
    pub retain_ms: i64,
}

/// Why a decision was refused; nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The key has no open dead letter: it is not unknown.
    #[error("key {key} of {namespace} is not unknown (it has no open dead letter)")]
    NotUnknown {
        /// The namespace.
        namespace: String,
        /// The key.
        key: String,
    },
    /// The dead letter's command refused.
    #[error("{0}")]
    Refused(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Applies `decision` to its key's open dead letter; the run after it.
///
/// # Errors
/// [`ResolveError`]; nothing changed.
pub async fn resolve(
    proxies: &dyn ProxyStore,
    dead_letters: &dyn DeadLetterStore,
    decision: &Decision,
) -> Result<Option<Run>, ResolveError> {
    let id = proxies
        .open_dead_letter(&decision.namespace, &decision.key)
        .await?
        .ok_or_else(|| ResolveError::NotUnknown {
            namespace: decision.namespace.to_string(),
            key: decision.key.to_string(),
        })?;
    let note = format!("{}: {}", decision.finding, decision.note);
    let outcome = match decision.finding {
        Finding::Found => {
            let cmd = ResolveCommand {
                id,
                resolution: Resolution::Compensated,
                actor: decision.actor.clone(),
                note,
                retain_ms: decision.retain_ms,
            };
            dead_letters.resolve_dead_letter(&cmd).await?
        }
        Finding::NotFound => {
            let cmd = ReplayCommand::by_operator(
                id,
                decision.actor.clone(),
                note,
                decision.retain_ms,
                true,
            );
            dead_letters.replay_dead_letter(&cmd).await?
        }
    };
    match outcome {
        ActionOutcome::Done { run, .. } => Ok(run.map(|r| *r)),
        ActionOutcome::Refused(why) => Err(ResolveError::Refused(why.describe())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn findings_parse() {
        assert_eq!("found".parse::<Finding>().unwrap(), Finding::Found);
        assert_eq!("not-found".parse::<Finding>().unwrap(), Finding::NotFound);
        assert_eq!(
            "not_found".parse::<Finding>().unwrap().as_str(),
            "not_found"
        );
        assert!("maybe".parse::<Finding>().is_err());
    }
}
