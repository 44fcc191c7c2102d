//! Audit integrity and retention transactions, expanded per backend like
//! [`ledger_ops!`](crate::ledger_ops).

/// Expands the audit-integrity and retention operations inside a backend's
/// `ops` module, as a child module `audit`.
#[macro_export]
#[doc(hidden)]
macro_rules! audit_ops {
    ($db:ty) => {
        pub(crate) mod audit {
            use futures_util::stream::{BoxStream, StreamExt};
            use serde_json::{json, Value};
            use sqlx::Pool;
            use super::WriteTx;

            use super::Cx;
            use $crate::audit::checkpoint::{ChainHead, Checkpoint, CheckpointWrite, HeadRow};
            use $crate::audit::{AuditEntry, ChainAnchor, ScanRow, Verification, SYSTEM_NAMESPACE};
            use $crate::clock::Millis;
            use $crate::retention::{RunMaterial, RunStamp, Selection};
            use $crate::store::audit_row::{AuditScanRow, CheckpointRow, HeadScanRow, StampRow, VerificationRow};
            use $crate::store::audit_sql::{AuditStatements, RUN_TABLES};
            use $crate::store::json_row::RowJson;
            use $crate::store::sql::Statements;
            use $crate::store::{Result, StoreError};

            /// Heads per upsert statement (5 binds each).
            const UPSERT_CHUNK: usize = 200;

            pub(crate) fn head_scan<'a>(pool: &'a Pool<$db>, st: &'a Statements) -> BoxStream<'a, Result<HeadRow>> {
                sqlx::query_as::<_, HeadScanRow>(&st.audit.head_scan)
                    .fetch(pool)
                    .map(|r| r.map(HeadRow::from).map_err(StoreError::from))
                    .boxed()
            }

            pub(crate) fn audit_scan<'a>(
                pool: &'a Pool<$db>,
                st: &'a Statements,
                namespace: Option<&'a str>,
            ) -> BoxStream<'a, Result<ScanRow>> {
                let query = match namespace {
                    Some(ns) => sqlx::query_as::<_, AuditScanRow>(&st.audit.audit_scan[1]).bind(ns),
                    None => sqlx::query_as::<_, AuditScanRow>(&st.audit.audit_scan[0]),
                };
                query
                    .fetch(pool)
                    .map(|r| r.map_err(StoreError::from).and_then(AuditScanRow::into_scan))
                    .boxed()
            }

            pub(crate) fn heads<'a>(pool: &'a Pool<$db>, st: &'a Statements) -> BoxStream<'a, Result<ChainHead>> {
                sqlx::query_as::<_, (String, String, i64, String)>(&st.audit.heads)
                    .fetch(pool)
                    .map(|r| {
                        r.map(|(namespace, key, seq, head)| ChainHead { namespace, key, seq, head })
                            .map_err(StoreError::from)
                    })
                    .boxed()
            }

            pub(crate) async fn checkpoints(pool: &Pool<$db>, st: &Statements, latest: bool) -> Result<Vec<Checkpoint>> {
                let sql = if latest { &st.audit.latest_checkpoint } else { &st.audit.checkpoints };
                let rows = sqlx::query_as::<_, CheckpointRow>(sql).fetch_all(pool).await?;
                Ok(rows.into_iter().map(Checkpoint::from).collect())
            }

            fn is_unique_violation(err: &sqlx::Error) -> bool {
                matches!(err, sqlx::Error::Database(db) if db.is_unique_violation())
            }

            /// Writes a checkpoint, its moved heads and its removals in one
            /// transaction; `false` when another checkpoint took its id.
            pub(crate) async fn commit_checkpoint(cx: &Cx<'_>, write: &CheckpointWrite) -> Result<bool> {
                let st = &cx.st.audit;
                let c = &write.checkpoint;
                let mut tx = cx.write.begin().await?;
                let inserted = sqlx::query(&st.insert_checkpoint)
                    .bind(c.id)
                    .bind(c.created_at)
                    .bind(c.chain_count)
                    .bind(&c.digest)
                    .bind(c.changed)
                    .bind(c.removed)
                    .bind(c.anomalies)
                    .bind(&c.reason)
                    .bind(&c.prev_hash)
                    .bind(&c.hash)
                    .execute(&mut *tx)
                    .await;
                match inserted {
                    Err(err) if is_unique_violation(&err) => {
                        tx.rollback().await?;
                        return Ok(false);
                    }
                    other => other?,
                };
                for chunk in write.upserts.chunks(UPSERT_CHUNK) {
                    let sql = AuditStatements::upsert_heads(chunk.len());
                    let mut q = sqlx::query(&sql);
                    for h in chunk {
                        q = q.bind(&h.namespace).bind(&h.key).bind(h.seq).bind(&h.head).bind(c.id);
                    }
                    q.execute(&mut *tx).await?;
                }
                let mut deleted = Vec::new();
                for r in &write.removals {
                    let gone = sqlx::query(&st.delete_tombstone)
                        .bind(&r.namespace)
                        .bind(&r.key)
                        .bind(r.cutoff)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    if gone == 1 {
                        for sql in [&st.delete_head, &st.delete_events] {
                            sqlx::query(sql).bind(&r.namespace).bind(&r.key).execute(&mut *tx).await?;
                        }
                        deleted.push(json!([r.namespace, r.key]));
                    }
                }
                if !deleted.is_empty() {
                    let detail = json!({ "checkpoint_id": c.id, "count": deleted.len(), "keys": deleted });
                    append_system_event(&mut tx, cx.st, "retention", "tombstones_deleted", detail, c.created_at).await?;
                }
                tx.commit().await?;
                Ok(true)
            }

            /// Appends an event to a run-less chain (`oncegate / <key>`).
            pub(crate) async fn append_system_event(
                tx: &mut WriteTx,
                st: &Statements,
                key: &str,
                kind: &str,
                detail: Value,
                now: Millis,
            ) -> Result<()> {
                let last: Option<(i64, String)> = sqlx::query_as(&st.outbox.last_audit)
                    .bind(SYSTEM_NAMESPACE)
                    .bind(key)
                    .fetch_optional(&mut **tx)
                    .await?;
                let (seq, prev) = last.map_or((1, None), |(seq, hash)| (seq + 1, Some(hash)));
                let entry = AuditEntry {
                    namespace: SYSTEM_NAMESPACE.into(),
                    key: key.into(),
                    seq,
                    kind: kind.into(),
                    actor: "oncegate:retention".into(),
                    from_state: None,
                    to_state: None,
                    version: None,
                    detail,
                    created_at: now,
                };
                let hash = entry.chain_hash(prev.as_deref());
                sqlx::query(&st.insert_audit)
                    .bind(&entry.namespace)
                    .bind(&entry.key)
                    .bind(entry.seq)
                    .bind(&entry.kind)
                    .bind(&entry.actor)
                    .bind(None::<String>)
                    .bind(None::<String>)
                    .bind(None::<i64>)
                    .bind(entry.detail.to_string())
                    .bind(prev)
                    .bind(&hash)
                    .bind(now)
                    .execute(&mut **tx)
                    .await?;
                Ok(())
            }

            pub(crate) async fn chain_anchor(pool: &Pool<$db>, st: &Statements, namespace: &str, key: &str) -> Result<ChainAnchor> {
                let run: Option<(i64, Option<String>, Option<i64>)> = sqlx::query_as(&st.audit.run_head)
                    .bind(namespace)
                    .bind(key)
                    .fetch_optional(pool)
                    .await?;
                let checkpointed: Option<(i64, i64, String)> = sqlx::query_as(&st.audit.checkpointed_head)
                    .bind(namespace)
                    .bind(key)
                    .fetch_optional(pool)
                    .await?;
                Ok(ChainAnchor { run, checkpointed })
            }

            pub(crate) async fn record_verification(pool: &Pool<$db>, st: &Statements, v: &Verification) -> Result<()> {
                sqlx::query(&st.audit.insert_verification)
                    .bind(&v.id)
                    .bind(v.started_at)
                    .bind(v.finished_at)
                    .bind(&v.namespace)
                    .bind(v.chains)
                    .bind(v.failures)
                    .bind(&v.first_failure)
                    .bind(v.checkpoint_id)
                    .execute(pool)
                    .await?;
                Ok(())
            }

            pub(crate) async fn last_verification(pool: &Pool<$db>, st: &Statements) -> Result<Option<Verification>> {
                let row = sqlx::query_as::<_, VerificationRow>(&st.audit.last_verification)
                    .fetch_optional(pool)
                    .await?;
                Ok(row.map(Verification::from))
            }

            pub(crate) async fn take_job(pool: &Pool<$db>, st: &Statements, name: &str, owner: &str, lease_ms: i64, now: Millis) -> Result<bool> {
                let got: Option<(String,)> = sqlx::query_as(&st.audit.take_job)
                    .bind(name)
                    .bind(owner)
                    .bind(now)
                    .bind(lease_ms)
                    .fetch_optional(pool)
                    .await?;
                Ok(got.is_some())
            }

            pub(crate) async fn release_job(pool: &Pool<$db>, st: &Statements, name: &str, owner: &str) -> Result<()> {
                sqlx::query(&st.audit.release_job).bind(name).bind(owner).execute(pool).await?;
                Ok(())
            }

            pub(crate) async fn candidates(pool: &Pool<$db>, sel: &Selection, tombstones: bool) -> Result<Vec<RunStamp>> {
                let sql = AuditStatements::candidates(sel, tombstones);
                let mut q = sqlx::query_as::<_, StampRow>(&sql).bind(sel.cutoff).bind(sel.limit);
                if let Some(ns) = &sel.only {
                    q = q.bind(ns);
                } else {
                    for ns in &sel.exclude {
                        q = q.bind(ns);
                    }
                }
                Ok(q.fetch_all(pool).await?.into_iter().map(RunStamp::from).collect())
            }

            /// Every row of the run and of the tables that belong to it.
            pub(crate) async fn material(pool: &Pool<$db>, st: &Statements, stamp: &RunStamp) -> Result<Option<RunMaterial>> {
                let mut conn = pool.acquire().await?;
                let run = sqlx::query(&st.audit.run_row)
                    .bind(&stamp.namespace)
                    .bind(&stamp.key)
                    .fetch_optional(&mut *conn)
                    .await?;
                let Some(run) = run else { return Ok(None) };
                let mut tables = vec![("runs".to_owned(), vec![run.to_json()])];
                for (table, sql) in RUN_TABLES {
                    let rows = sqlx::query(sql)
                        .bind(&stamp.namespace)
                        .bind(&stamp.key)
                        .fetch_all(&mut *conn)
                        .await?;
                    tables.push(((*table).to_owned(), rows.iter().map(RowJson::to_json).collect()));
                }
                Ok(Some(RunMaterial { stamp: stamp.clone(), tables }))
            }

            /// Slims archived runs to tombstones in one transaction, by
            /// compare-and-set on their version; records the archive file
            /// in the `oncegate / retention` chain. Returns how many.
            pub(crate) async fn slim(cx: &Cx<'_>, runs: &[RunMaterial], file: &str, now: Millis) -> Result<u64> {
                let st = &cx.st.audit;
                let mut tx = cx.write.begin().await?;
                let mut slimmed = 0;
                for m in runs {
                    let s = &m.stamp;
                    let done = sqlx::query(&st.slim)
                        .bind(&s.namespace)
                        .bind(&s.key)
                        .bind(s.version)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    if done == 0 {
                        continue;
                    }
                    slimmed += 1;
                    for sql in [
                        &st.slim_attempts,
                        &st.slim_effects,
                        &st.slim_dead_letters,
                        &st.slim_challenges,
                        &st.slim_outputs,
                    ] {
                        sqlx::query(sql).bind(&s.namespace).bind(&s.key).execute(&mut *tx).await?;
                    }
                    sqlx::query(&st.slim_events)
                        .bind(&s.namespace)
                        .bind(&s.key)
                        .bind(m.max_seq())
                        .execute(&mut *tx)
                        .await?;
                    for id in m.ids("raw_events") {
                        sqlx::query(&st.slim_raw_event).bind(id).execute(&mut *tx).await?;
                    }
                }
                if slimmed > 0 {
                    let detail = json!({ "file": file, "runs": slimmed });
                    append_system_event(&mut tx, cx.st, "retention", "runs_archived", detail, now).await?;
                }
                tx.commit().await?;
                Ok(slimmed)
            }

            /// Replaces the verbatim bodies of finished effects in
            /// namespaces with redaction rules by their redacted form.
            pub(crate) async fn scrub(cx: &Cx<'_>, limit: i64, now: Millis) -> Result<u64> {
                let (namespaces, any) = cx.st.redactor.namespaces();
                if namespaces.is_empty() && !any {
                    return Ok(0);
                }
                let sql = AuditStatements::scrub_candidates((!any).then_some(namespaces.len()));
                let mut q = sqlx::query_as::<_, (String, String, Vec<u8>)>(&sql).bind(limit);
                if !any {
                    for ns in &namespaces {
                        q = q.bind(ns);
                    }
                }
                let rows = q.fetch_all(cx.read).await?;
                let mut scrubbed = 0;
                for (id, namespace, body) in rows {
                    let Some(redacted) = cx.st.redactor.body(&namespace, &body) else {
                        continue;
                    };
                    scrubbed += sqlx::query(&cx.st.audit.scrub)
                        .bind(&id)
                        .bind(redacted)
                        .bind(now)
                        .execute(cx.read)
                        .await?
                        .rows_affected();
                }
                Ok(scrubbed)
            }
        }
    };
}
