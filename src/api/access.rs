//! Which runs a caller reaches, by namespace (DESIGN.md §5: "Tokens are
//! scoped to namespaces").
//!
//! Two rules, checked wherever the API takes a run's namespace from a
//! token's request: the token's allow-list ([`crate::tokens::Namespaces`])
//! must reach the namespace, for moves and reads alike; and a configured
//! webhook source's namespace belongs to ingress, so no token claims or
//! moves a run in it (a claim there would quarantine the signed delivery
//! that arrives later under the same event id), nor in the Idempotency-Key
//! proxy's namespaces. Reads of those runs stay open to tokens whose list
//! reaches them.

use super::error::{ApiError, Result};
use crate::ledger::Namespace;
use crate::state::AppState;
use crate::tokens::Principal;

/// What the caller means to do with runs of a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// Claim, move, commit, gate, record output, cancel, report.
    Act,
    /// Look at runs, effects, timelines, links.
    Read,
}

/// Parses a namespace from a request and checks that `caller` reaches it.
///
/// # Errors
/// [`ApiError::Invalid`] for a malformed namespace, else as [`check`].
pub(super) fn namespace(
    app: &AppState,
    caller: &Principal,
    raw: String,
    access: Access,
) -> Result<Namespace> {
    let namespace = Namespace::parse(raw)?;
    check(app, caller, namespace.as_str(), access)?;
    Ok(namespace)
}

/// Checks that `caller` reaches `namespace` for `access`.
///
/// # Errors
/// [`ApiError::NamespaceRefused`] (403): `namespace-not-allowed` outside
/// the token's allow-list, `namespace-reserved` when a token would act in
/// a webhook source's or a proxy's namespace.
pub(super) fn check(
    app: &AppState,
    caller: &Principal,
    namespace: &str,
    access: Access,
) -> Result<()> {
    if !caller.reaches(namespace) {
        let list = caller.namespaces.describe().unwrap_or_default();
        return Err(ApiError::NamespaceRefused {
            slug: "namespace-not-allowed",
            detail: format!("this token reaches only the namespaces {list}, not {namespace:?}"),
        });
    }
    if access == Access::Act && app.sources.get(namespace).is_some() {
        return Err(ApiError::NamespaceRefused {
            slug: "namespace-reserved",
            detail: format!(
                "namespace {namespace:?} belongs to the webhook source of that name: \
                 its runs are made by POST /hooks/{namespace} only; claim the business \
                 run in a namespace of your own"
            ),
        });
    }
    if access == Access::Act && namespace.starts_with(crate::proxy::NAMESPACE_PREFIX) {
        // The proxy's keys replay what their run holds: a token acting
        // there could plant an answer for another caller's key.
        return Err(ApiError::NamespaceRefused {
            slug: "namespace-reserved",
            detail: format!(
                "namespaces starting with {:?} belong to the Idempotency-Key proxy",
                crate::proxy::NAMESPACE_PREFIX
            ),
        });
    }
    Ok(())
}

/// Checks that `namespace` is on the SQL tier, for `what` (effects, an
/// approval gate, the AI output contract, a timeline, dead-letter links):
/// a Redis-tier namespace holds claims and owner moves only (DESIGN.md §9).
///
/// # Errors
/// [`ApiError::Invalid`] (400, field `namespace`) naming the tier.
pub(super) fn sql_tier(app: &AppState, namespace: &Namespace, what: &str) -> Result<()> {
    if app.tiers.of_namespace(namespace.as_str()) == crate::ledger::Tier::Redis {
        return Err(ApiError::invalid(
            "namespace",
            format!(
                "namespace \"{namespace}\" is on the Redis tier, which serves claims, renew, \
                 complete, fail and run reads only: {what} need a namespace on the SQL tier"
            ),
        ));
    }
    Ok(())
}
