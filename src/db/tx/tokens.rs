//! The API tokens the service stores itself (only digests): the
//! [`TokenStore`] port. Every write goes through the writer; a run-time
//! token's creation and revocation commit with their audit entry
//! (`oncegate / tokens:<id>`), or not at all.

use async_trait::async_trait;
use serde_json::json;

use super::chain::append_system_event;
use super::to_json;
use crate::db::exec::Args;
use crate::db::rows::TokenRow;
use crate::db::{Backend, Db};
use crate::ledger::storage::Result;
use crate::tokens::port::{StoredToken, TokenStore};

fn insert_args(t: &StoredToken, created_at: i64) -> Result<Args<'static>> {
    Ok(Args::new()
        .bind(t.id.clone())
        .bind(t.digest.clone())
        .bind(t.subject.clone())
        .bind(t.scopes.join(","))
        .bind(t.roles.join(","))
        .bind(t.namespaces.as_ref().map(to_json).transpose()?)
        .bind(t.created_by.clone())
        .bind(created_at)
        .bind(t.expires_at)
        .bind(t.revoked_at))
}

/// What the audit keeps of a token: never the token, never its digest.
fn audit_detail(t: &StoredToken) -> serde_json::Value {
    json!({
        "id": t.id,
        "subject": t.subject,
        "scopes": t.scopes,
        "roles": t.roles,
        "namespaces": t.namespaces,
        "expires_at": t.expires_at,
    })
}

#[async_trait]
impl<B: Backend> TokenStore for Db<B> {
    async fn stored_tokens(&self) -> Result<Vec<StoredToken>> {
        let rd = self.reader();
        let rows: Vec<TokenRow> = rd.all(&rd.st.tokens.all, Args::new()).await?;
        rows.into_iter().map(TokenRow::into_token).collect()
    }

    async fn token_by_digest(&self, digest: &str) -> Result<Option<StoredToken>> {
        let rd = self.reader();
        rd.optional::<TokenRow>(&rd.st.tokens.by_digest, Args::new().bind(digest))
            .await?
            .map(TokenRow::into_token)
            .transpose()
    }

    async fn insert_token(&self, token: &StoredToken) -> Result<()> {
        let token = token.clone();
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                let args = insert_args(&token, token.created_at)?;
                tx.execute(&st.tokens.insert, args).await?;
                Ok(())
            })
        })
        .await
    }

    async fn create_token(&self, token: &StoredToken, actor: &str) -> Result<()> {
        let (token, actor) = (token.clone(), actor.to_owned());
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                let now = tx.clock_now;
                tx.execute(&st.tokens.insert, insert_args(&token, now)?)
                    .await?;
                let key = format!("tokens:{}", token.id);
                append_system_event(tx, &key, "token_created", &actor, audit_detail(&token), now)
                    .await
            })
        })
        .await
    }

    async fn revoke_token(&self, id: &str, actor: &str) -> Result<Option<StoredToken>> {
        let (id, actor) = (id.to_owned(), actor.to_owned());
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                let now = tx.clock_now;
                let args = Args::new().bind(&id).bind(now);
                let Some(row) = tx.optional::<TokenRow>(&st.tokens.revoke, args).await? else {
                    return Ok(None);
                };
                let token = row.into_token()?;
                let key = format!("tokens:{}", token.id);
                append_system_event(tx, &key, "token_revoked", &actor, audit_detail(&token), now)
                    .await?;
                Ok(Some(token))
            })
        })
        .await
    }

    async fn delete_stored_tokens(&self) -> Result<u64> {
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                tx.execute(&st.tokens.delete_first_start, Args::new()).await
            })
        })
        .await
    }
}
