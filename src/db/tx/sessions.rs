//! Browser sessions: the [`SessionStore`] port. Every write goes through
//! the writer.

use async_trait::async_trait;

use super::to_json;
use crate::approval::port::SessionStore;
use crate::approval::StoredSession;
use crate::db::exec::Args;
use crate::db::rows::SessionRow;
use crate::db::{Backend, Db};
use crate::ledger::storage::Result;

#[async_trait]
impl<B: Backend> SessionStore for Db<B> {
    async fn insert_session(&self, session: &StoredSession) -> Result<()> {
        let s = session.clone();
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                let args = Args::new()
                    .bind(&s.id_hash)
                    .bind(&s.subject)
                    .bind(to_json(&s.scopes)?)
                    .bind(to_json(&s.roles)?)
                    .bind(s.auth.as_str())
                    .bind(tx.clock_now)
                    .bind(s.expires_at)
                    .bind(&s.credential);
                tx.execute(&st.approval.insert_session, args).await?;
                Ok(())
            })
        })
        .await
    }

    async fn session(&self, id_hash: &str) -> Result<Option<StoredSession>> {
        let rd = self.reader();
        let args = Args::new().bind(rd.now).bind(id_hash);
        rd.optional::<SessionRow>(&rd.st.approval.session, args)
            .await?
            .map(SessionRow::into_session)
            .transpose()
    }

    async fn delete_session(&self, id_hash: &str) -> Result<()> {
        let id_hash = id_hash.to_owned();
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                tx.execute(&st.approval.delete_session, Args::new().bind(&id_hash))
                    .await?;
                Ok(())
            })
        })
        .await
    }

    async fn purge_sessions(&self) -> Result<u64> {
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                tx.execute(&st.approval.purge_sessions, Args::new().bind(tx.now))
                    .await
            })
        })
        .await
    }
}
