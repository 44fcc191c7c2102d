//! The SQL of stored API tokens (only digests), written once for both
//! backends.

/// The `api_tokens` columns statements return, in `TokenRow` order.
pub(crate) const TOKEN_COLUMNS: &str = "id, digest, subject, scopes, roles, namespaces, \
    created_by, created_at, expires_at, revoked_at";

/// The token statements (the same on both backends).
#[derive(Debug, Clone)]
pub struct TokenStatements {
    /// Every stored token, oldest first.
    pub all: String,
    /// One token by digest. Binds: digest.
    pub by_digest: String,
    /// Stores a token. Binds (10): the columns of [`TOKEN_COLUMNS`] in order.
    pub insert: String,
    /// Revokes an unrevoked token. Binds: id, revoked_at.
    pub revoke: String,
    /// Deletes the first-start token (the one without a creator).
    pub delete_first_start: String,
}

impl TokenStatements {
    /// The statements.
    pub fn new() -> Self {
        Self {
            all: format!("SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at, id"),
            by_digest: format!("SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE digest = $1"),
            insert: format!(
                "INSERT INTO api_tokens ({TOKEN_COLUMNS}) VALUES ({}) \
                 ON CONFLICT (digest) DO NOTHING",
                super::placeholders(1, 10)
            ),
            revoke: format!(
                "UPDATE api_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL \
                 RETURNING {TOKEN_COLUMNS}"
            ),
            delete_first_start: "DELETE FROM api_tokens WHERE created_by IS NULL".into(),
        }
    }
}

impl Default for TokenStatements {
    fn default() -> Self {
        Self::new()
    }
}
