//! The calls that concern the database itself: migrations, health,
//! backups, the maintenance leases of periodic jobs; the [`Admin`] port.

use async_trait::async_trait;

use crate::db::exec::Args;
use crate::db::{Admin, Backend, Db};
use crate::ledger::storage::Result;

#[async_trait]
impl<B: Backend> Admin for Db<B> {
    fn backend_name(&self) -> &'static str {
        B::NAME
    }

    async fn migrate(&self) -> Result<()> {
        self.backend().migrate().await
    }

    async fn ping(&self) -> Result<()> {
        self.backend().ping().await
    }

    async fn take_job(&self, name: &str, owner: &str, lease_ms: i64) -> Result<bool> {
        let (name, owner) = (name.to_owned(), owner.to_owned());
        let got: Option<(String,)> = self
            .commit(move |tx| {
                Box::pin(async move {
                    let st = tx.st;
                    let args = Args::new()
                        .bind(&name)
                        .bind(&owner)
                        .bind(tx.clock_now)
                        .bind(lease_ms);
                    tx.optional(&st.retention.take_job, args).await
                })
            })
            .await?;
        Ok(got.is_some())
    }

    async fn release_job(&self, name: &str, owner: &str) -> Result<()> {
        let (name, owner) = (name.to_owned(), owner.to_owned());
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                tx.execute(
                    &st.retention.release_job,
                    Args::new().bind(&name).bind(&owner),
                )
                .await?;
                Ok(())
            })
        })
        .await
    }

    async fn backup(&self, dest: &std::path::Path) -> Result<()> {
        self.backend().backup(dest).await
    }

    async fn close(&self) {
        self.backend().close().await;
    }
}
