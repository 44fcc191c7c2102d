//! `oncegate token new`: a fresh token, shown once, and the config entry
//! that holds its digest.

use crate::config::{Scope, TokenConfig};
use crate::tokens;

/// The text `token new` prints: the token once, and its config entry.
pub fn new_token_text(subject: &str, scopes: &[Scope], roles: &[String]) -> String {
    let token = tokens::generate_token();
    let entry = TokenConfig {
        subject: subject.to_owned(),
        digest: tokens::digest(&token),
        scopes: scopes.to_vec(),
        roles: roles.to_vec(),
        namespaces: None,
    };
    let snippet = toml::to_string(&toml::Table::from_iter([(
        "tokens".to_owned(),
        toml::Value::try_from(vec![entry]).unwrap_or(toml::Value::Array(Vec::new())),
    )]))
    .unwrap_or_default();
    format!(
        "token (shown once; store it in your workflow's credentials):\n{token}\n\n\
         add to oncegate.toml (only the digest is kept):\n{snippet}"
    )
}
