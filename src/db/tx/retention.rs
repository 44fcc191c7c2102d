//! Retention's reads and writes: the terminal runs due, every row of one,
//! slimming archived runs to tombstones in one transaction, and scrubbing
//! verbatim bodies; and the [`RetentionStore`] port.

use async_trait::async_trait;
use serde_json::json;

use super::audit::RETENTION_ACTOR;
use super::chain::append_system_event;
use crate::clock::Millis;
use crate::db::exec::{Args, JsonRow, Tx};
use crate::db::rows::StampRow;
use crate::db::sql::retention::{RetentionStatements, RUN_TABLES};
use crate::db::{Backend, Db};
use crate::ledger::storage::Result;
use crate::retention::port::RetentionStore;
use crate::retention::{RunMaterial, RunStamp, Selection};

/// Slims archived runs to tombstones by compare-and-set on their version,
/// and records the archive file in the `oncegate / retention` chain.
async fn slim(tx: &mut Tx<'_>, runs: &[RunMaterial], file: &str, now: Millis) -> Result<u64> {
    let st = tx.st;
    let r = &st.retention;
    let mut slimmed = 0;
    for m in runs {
        let s = &m.stamp;
        let key = Args::new().bind(&s.namespace).bind(&s.key);
        let args = key.clone().bind(s.version).bind(now);
        if tx.execute(&st.runs.slim, args).await? == 0 {
            continue;
        }
        slimmed += 1;
        tx.execute(&r.slim_dead_letters, key.clone().bind(now))
            .await?;
        for sql in [
            &r.slim_attempts,
            &r.slim_effects,
            &r.slim_challenges,
            &r.slim_outputs,
            &r.slim_proxy_answer,
        ] {
            tx.execute(sql, key.clone()).await?;
        }
        tx.execute(&r.slim_events, key.bind(m.max_seq())).await?;
        for id in m.ids("raw_events") {
            tx.execute(&r.slim_raw_event, Args::new().bind(&id)).await?;
        }
    }
    if slimmed > 0 {
        let detail = json!({ "file": file, "runs": slimmed });
        append_system_event(
            tx,
            "retention",
            "runs_archived",
            RETENTION_ACTOR,
            detail,
            now,
        )
        .await?;
    }
    Ok(slimmed)
}

#[async_trait]
impl<B: Backend> RetentionStore for Db<B> {
    async fn retention_candidates(
        &self,
        sel: &Selection,
        tombstones: bool,
    ) -> Result<Vec<RunStamp>> {
        let sql = RetentionStatements::candidates(sel, tombstones);
        let mut args = Args::new().bind(sel.cutoff).bind(sel.limit);
        if let Some(ns) = &sel.only {
            args.push(ns);
        } else {
            for ns in &sel.exclude {
                args.push(ns);
            }
        }
        let rows: Vec<StampRow> = self.reader().all(&sql, args).await?;
        Ok(rows.into_iter().map(RunStamp::from).collect())
    }

    async fn run_material(&self, stamp: &RunStamp) -> Result<Option<RunMaterial>> {
        let rd = self.reader();
        let key = Args::new().bind(&stamp.namespace).bind(&stamp.key);
        let Some(JsonRow(run)) = rd.optional(&rd.st.retention.run_row, key.clone()).await? else {
            return Ok(None);
        };
        let mut tables = vec![("runs".to_owned(), vec![run])];
        for (table, sql) in RUN_TABLES {
            let rows: Vec<JsonRow> = rd.all(sql, key.clone()).await?;
            tables.push(((*table).to_owned(), rows.into_iter().map(|r| r.0).collect()));
        }
        Ok(Some(RunMaterial {
            stamp: stamp.clone(),
            tables,
        }))
    }

    async fn slim_runs(&self, runs: &[RunMaterial], archive_file: &str, now: i64) -> Result<u64> {
        let (runs, file) = (runs.to_vec(), archive_file.to_owned());
        self.commit(move |tx| Box::pin(async move { slim(tx, &runs, &file, now).await }))
            .await
    }

    async fn expired_dead_letters(&self, now: i64, limit: i64) -> Result<Vec<serde_json::Value>> {
        let rd = self.reader();
        let args = Args::new().bind(now).bind(limit);
        let rows: Vec<JsonRow> = rd.all(&rd.st.retention.expired_dead_letters, args).await?;
        Ok(rows
            .into_iter()
            .map(|r| serde_json::Value::Object(r.0))
            .collect())
    }

    async fn remove_dead_letters(
        &self,
        ids: &[String],
        archive_file: &str,
        now: i64,
    ) -> Result<u64> {
        let (ids, file) = (ids.to_vec(), archive_file.to_owned());
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                let mut removed = 0;
                for id in &ids {
                    let args = Args::new().bind(id).bind(now);
                    removed += tx.execute(&st.retention.remove_dead_letter, args).await?;
                }
                if removed > 0 {
                    let detail = json!({ "file": file, "dead_letters": removed });
                    append_system_event(
                        tx,
                        "retention",
                        "dead_letters_expired",
                        RETENTION_ACTOR,
                        detail,
                        now,
                    )
                    .await?;
                }
                Ok(removed)
            })
        })
        .await
    }

    async fn expire_outputs(&self, cutoff: i64) -> Result<u64> {
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                tx.execute(&st.retention.expire_outputs, Args::new().bind(cutoff))
                    .await
            })
        })
        .await
    }

    async fn forget_ingress_bodies(&self, now: i64) -> Result<u64> {
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                tx.execute(&st.ingress.forget_bodies, Args::new().bind(now))
                    .await
            })
        })
        .await
    }

    async fn forget_deliveries(&self, before: i64, limit: i64) -> Result<(u64, u64)> {
        self.commit(move |tx| {
            Box::pin(async move { super::deliveries::forget(tx, before, limit).await })
        })
        .await
    }

    async fn scrub_effect_bodies(&self, limit: i64, now: i64) -> Result<u64> {
        let rd = self.reader();
        let (namespaces, any) = rd.st.redactor.namespaces();
        if namespaces.is_empty() && !any {
            return Ok(0);
        }
        let sql = RetentionStatements::scrub_candidates((!any).then_some(namespaces.len()));
        let mut args = Args::new().bind(limit);
        if !any {
            for ns in &namespaces {
                args.push(ns.as_str());
            }
        }
        let rows: Vec<(String, String, Vec<u8>)> = rd.all(&sql, args).await?;
        let scrubbed: Vec<(String, Vec<u8>)> = rows
            .into_iter()
            .filter_map(|(id, namespace, body)| Some((id, rd.st.redactor.body(&namespace, &body)?)))
            .collect();
        if scrubbed.is_empty() {
            return Ok(0);
        }
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                let mut done = 0;
                for (id, body) in &scrubbed {
                    let args = Args::new().bind(id).bind(body.as_slice()).bind(now);
                    done += tx.execute(&st.retention.scrub, args).await?;
                }
                Ok(done)
            })
        })
        .await
    }
}
