//! Reads one key's timeline: the run, its effects with their attempts, its
//! audit events and the chain's verification. The API's
//! `GET /v1/runs/timeline` and the console's run page both show it.

use super::{build, Material, Timeline};
use crate::audit::check_one;
use crate::audit::port::AuditStore;
use crate::ledger::port::LedgerStore;
use crate::ledger::storage::Result;
use crate::ledger::{IdempotencyKey, Namespace};
use crate::outbox::port::OutboxStore;

/// One key's timeline; `None` when there is neither a run nor an audit
/// event under the key.
///
/// # Errors
/// The store failed.
pub async fn load<S>(
    store: &S,
    namespace: &Namespace,
    key: &IdempotencyKey,
) -> Result<Option<Timeline>>
where
    S: LedgerStore + AuditStore + OutboxStore + ?Sized,
{
    let run = store.get_run(namespace, key).await?;
    let events = store.audit_trail(namespace, key).await?;
    if run.is_none() && events.is_empty() {
        return Ok(None);
    }
    let mut effects = Vec::new();
    for effect in store.effects_of(namespace, key).await? {
        let attempts = store.attempts(&effect.id).await?;
        effects.push((effect, attempts));
    }
    let anchor = store.chain_anchor(namespace.as_str(), key.as_str()).await?;
    let problem = check_one(namespace.as_str(), key.as_str(), events.clone(), &anchor);
    Ok(Some(build(Material {
        namespace: namespace.to_string(),
        key: key.to_string(),
        run,
        head: anchor.run.map(|(seq, head, _)| (seq, head)),
        effects,
        events,
        problem,
    })))
}
