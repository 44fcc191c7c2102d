//! API tokens: the digest a token is known by, new random tokens, the
//! table of known tokens (configured and stored) with the [`Principal`]
//! each names, and the use cases of tokens made at run time (create,
//! list, revoke: [`manage`]).
//!
//! Only SHA-256 digests of tokens are configured or stored. A presented
//! token is hashed and looked up by digest; since tokens carry 256 random
//! bits, the lookup reveals nothing an attacker could use. The table sits
//! below the HTTP layer so the shared state ([`crate::state::AppState`])
//! holds it without importing [`crate::api`]; the API's middleware
//! ([`crate::api::auth`]) checks a request's token against it.

use std::collections::HashSet;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

pub mod authenticator;
pub mod config;
pub mod manage;
pub mod namespaces;
pub mod port;

pub use authenticator::Authenticator;
pub use config::{is_digest, Scope, TokenConfig};
pub use manage::{NewToken, TokenError, TokenView, Tokens};
pub use namespaces::{NamespacePattern, Namespaces};

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

/// `sha256:<hex>` of a token.
pub fn digest(token: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(token.as_bytes())))
}

/// A token's public handle: the first 16 hex digits of its digest (64
/// bits of a hash of 256 random bits: names the token, reveals nothing).
pub fn id_of(digest: &str) -> String {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    hex.chars().take(16).collect()
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
    fn tokens_are_random_and_named_by_their_digest() {
        let token = generate_token();
        assert!(token.starts_with("og_") && token.len() == 46);
        assert_ne!(token, generate_token());
        let d = digest(&token);
        assert!(is_digest(&d));
        assert_eq!(id_of(&d), d["sha256:".len().."sha256:".len() + 16]);
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
