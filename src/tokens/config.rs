//! What an API token is configured as: its scopes, and the `[[tokens]]`
//! entry that names one by digest.

use serde::{Deserialize, Serialize};

use super::namespaces::NamespacePattern;

/// What a token may do.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Hash, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Claim and move runs (a workflow engine).
    Workflow,
    /// Read runs, operate dead letters and the kill switch.
    Operator,
    /// Decide approval challenges.
    Approver,
    /// Call upstream APIs through the Idempotency-Key proxy
    /// (`/proxy/{name}/…`) with the targets' credentials.
    Proxy,
    /// Everything.
    Admin,
}

impl Scope {
    /// The configured name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Workflow => "workflow",
            Self::Operator => "operator",
            Self::Approver => "approver",
            Self::Proxy => "proxy",
            Self::Admin => "admin",
        }
    }

    /// Parses a configured name.
    pub fn parse(name: &str) -> Option<Self> {
        [
            Self::Workflow,
            Self::Operator,
            Self::Approver,
            Self::Proxy,
            Self::Admin,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

/// `[[tokens]]`: one API token, by the SHA-256 digest of its value.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// The person or workflow the token speaks for.
    pub subject: String,
    /// `sha256:<64 hex>` of the token (`oncegate token new` prints it).
    pub digest: String,
    /// What the token may do.
    pub scopes: Vec<Scope>,
    /// Roles, for approval policies.
    #[serde(default)]
    pub roles: Vec<String>,
    /// The namespaces whose runs the token may act on and read (`"crm"`,
    /// or a prefix `"billing:*"`); absent, every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<NamespacePattern>>,
}

/// Whether `value` looks like a stored token digest.
pub fn is_digest(value: &str) -> bool {
    value.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}
