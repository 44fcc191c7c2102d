//! The token table's row.

use crate::clock::Millis;
use crate::ledger::storage::{Result, StoreError};
use crate::tokens::port::StoredToken;

/// An `api_tokens` row.
#[derive(Debug)]
pub(crate) struct TokenRow {
    id: Option<String>,
    digest: String,
    subject: String,
    scopes: String,
    roles: String,
    namespaces: Option<String>,
    created_by: Option<String>,
    created_at: Millis,
    expires_at: Option<Millis>,
    revoked_at: Option<Millis>,
}

fn split_list(list: &str) -> Vec<String> {
    list.split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

impl TokenRow {
    /// The stored token.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when its namespaces are not a list of patterns.
    pub(crate) fn into_token(self) -> Result<StoredToken> {
        let namespaces = self
            .namespaces
            .map(|json| {
                serde_json::from_str(&json).map_err(|e| {
                    StoreError::Corrupt(format!("token namespaces are not a pattern list: {e}"))
                })
            })
            .transpose()?;
        Ok(StoredToken {
            id: self
                .id
                .unwrap_or_else(|| crate::tokens::id_of(&self.digest)),
            digest: self.digest,
            subject: self.subject,
            scopes: split_list(&self.scopes),
            roles: split_list(&self.roles),
            namespaces,
            created_by: self.created_by,
            created_at: self.created_at,
            expires_at: self.expires_at,
            revoked_at: self.revoked_at,
        })
    }
}

from_columns! {
    TokenRow {
        id, digest, subject, scopes, roles, namespaces, created_by, created_at, expires_at,
        revoked_at,
    }
}
