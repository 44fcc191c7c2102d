//! API tokens: the digest a token is known by, new random tokens, and the
//! table of known tokens (configured and stored) with the [`Principal`]
//! each names.
//!
//! Only SHA-256 digests of tokens are configured or stored. A presented
//! token is hashed and looked up by digest; since tokens carry 256 random
//! bits, the lookup reveals nothing an attacker could use. The table sits
//! below the HTTP layer so the shared state ([`crate::state::AppState`])
//! holds it without importing [`crate::api`]; the API's middleware
//! ([`crate::api::auth`]) checks a request's token against it.

use std::collections::{HashMap, HashSet};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

pub mod config;
pub mod namespaces;
pub mod port;

pub use config::{is_digest, Scope, TokenConfig};
pub use namespaces::{NamespacePattern, Namespaces};
use port::StoredToken;

/// Who is calling: the subject of a verified token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The person or workflow (the actor in the audit log).
    pub subject: String,
    /// What the token may do.
    pub scopes: HashSet<Scope>,
    /// Roles, for approval policies.
    pub roles: Vec<String>,
    /// The namespaces whose runs it may act on and read.
    pub namespaces: Namespaces,
}

impl Principal {
    /// Whether the principal holds `scope` (admin holds every scope).
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&Scope::Admin) || self.scopes.contains(&scope)
    }

    /// Whether its allow-list reaches `namespace`.
    pub fn reaches(&self, namespace: &str) -> bool {
        self.namespaces.allows(namespace)
    }
}

/// Every known token digest and whom it names.
#[derive(Debug, Default)]
pub struct Authenticator {
    by_digest: HashMap<String, Principal>,
}

impl Authenticator {
    /// Builds the table from configured and stored tokens.
    pub fn new(configured: &[TokenConfig], stored: &[StoredToken]) -> Self {
        let mut by_digest = HashMap::new();
        for t in configured {
            by_digest.insert(
                t.digest.clone(),
                Principal {
                    subject: t.subject.clone(),
                    scopes: t.scopes.iter().copied().collect(),
                    roles: t.roles.clone(),
                    namespaces: Namespaces::from_list(t.namespaces.as_deref()),
                },
            );
        }
        for t in stored {
            by_digest
                .entry(t.digest.clone())
                .or_insert_with(|| Principal {
                    subject: t.subject.clone(),
                    scopes: t.scopes.iter().filter_map(|s| Scope::parse(s)).collect(),
                    roles: t.roles.clone(),
                    namespaces: Namespaces::All,
                });
        }
        Self { by_digest }
    }

    /// Whether any token is known.
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    /// The principal a presented token names.
    pub fn authenticate(&self, token: &str) -> Option<&Principal> {
        self.by_digest(&digest(token))
    }

    /// The principal of a token by its digest (a session's credential).
    pub fn by_digest(&self, digest: &str) -> Option<&Principal> {
        self.by_digest.get(digest)
    }
}

/// `sha256:<hex>` of a token.
pub fn digest(token: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(token.as_bytes())))
}

/// A new random token (`og_` + 43 base64url characters = 256 bits).
pub fn generate_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("og_{}", URL_SAFE_NO_PAD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_found_by_digest_only() {
        let token = generate_token();
        assert!(token.starts_with("og_") && token.len() == 46);
        let config = TokenConfig {
            subject: "n8n".into(),
            digest: digest(&token),
            scopes: vec![Scope::Workflow],
            roles: vec![],
            namespaces: None,
        };
        let auth = Authenticator::new(&[config], &[]);
        let who = auth.authenticate(&token).unwrap();
        assert_eq!(who.subject, "n8n");
        assert!(who.has(Scope::Workflow) && !who.has(Scope::Operator));
        assert!(auth.authenticate("og_wrong").is_none());
    }

    #[test]
    fn admin_holds_every_scope() {
        let p = Principal {
            subject: "root".into(),
            scopes: [Scope::Admin].into_iter().collect(),
            roles: vec![],
            namespaces: Namespaces::All,
        };
        assert!(p.has(Scope::Operator) && p.has(Scope::Workflow) && p.has(Scope::Approver));
    }
}
