//! The token table's row.

use crate::db::exec::{FromRow, Row};
use crate::ledger::storage::Result;
use crate::tokens::port::StoredToken;

/// An `api_tokens` row.
#[derive(Debug)]
pub(crate) struct TokenRow {
    digest: String,
    subject: String,
    scopes: String,
    roles: String,
}

fn split_list(list: &str) -> Vec<String> {
    list.split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

impl From<TokenRow> for StoredToken {
    fn from(row: TokenRow) -> Self {
        Self {
            digest: row.digest,
            subject: row.subject,
            scopes: split_list(&row.scopes),
            roles: split_list(&row.roles),
        }
    }
}

impl FromRow for TokenRow {
    fn from_row(row: &dyn Row) -> Result<Self> {
        Ok(Self {
            digest: row.get("digest")?,
            subject: row.get("subject")?,
            scopes: row.get("scopes")?,
            roles: row.get("roles")?,
        })
    }
}
