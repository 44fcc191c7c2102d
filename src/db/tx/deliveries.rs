//! The deliveries log's transactions: an entry recorded (with a
//! `duplicate_of` event's raw body in the same transaction), the log read,
//! and an operator's forward; and the [`DeliveryStore`] port.

use async_trait::async_trait;
use serde_json::{json, Value};

use super::chain::note;
use super::ingress::insert_raw_event;
use super::ledger::{approve_claimed, fetch_in as run_in, try_claim, Attempt};
use super::outbox::insert_effect;
use crate::clock::Millis;
use crate::db::exec::{Args, Tx};
use crate::db::rows::{DeliveryRow, RunRow};
use crate::db::{Backend, Db, Finish};
use crate::ingress::log::{DeliveryEntry, DeliveryFilter};
use crate::ingress::operator::{ForwardCommand, ForwardKind, ForwardOutcome};
use crate::ingress::port::DeliveryStore;
use crate::ingress::RawEvent;
use crate::ledger::storage::Result;
use crate::outbox::seal::seals;

async fn record(tx: &mut Tx<'_>, entry: &DeliveryEntry, raw: Option<&RawEvent>) -> Result<()> {
    if let Some(raw) = raw {
        insert_raw_event(tx, raw).await?;
    }
    let st = tx.st;
    let (run_namespace, run_key) = entry.run.clone().unzip();
    let forwarded = entry.forwarded.clone();
    let args = Args::new()
        .bind(&entry.id)
        .bind(&entry.source)
        .bind(&entry.event_id)
        .bind(&entry.event_type)
        .bind(entry.outcome.as_str())
        .bind(i64::from(entry.status))
        .bind(&entry.payload_hash)
        .bind(entry.body_bytes)
        .bind(&entry.raw_event_id)
        .bind(run_namespace)
        .bind(run_key)
        .bind(&entry.detail)
        .bind(forwarded.as_ref().map(|f| f.key.clone()))
        .bind(forwarded.as_ref().map(|f| f.by.clone()))
        .bind(forwarded.as_ref().map(|f| f.at))
        .bind(entry.redeliveries)
        .bind(entry.received_at);
    tx.execute(&st.deliveries.insert, args).await?;
    Ok(())
}

async fn fetch_in(tx: &mut Tx<'_>, id: &str) -> Result<Option<DeliveryEntry>> {
    let st = tx.st;
    tx.optional::<DeliveryRow>(&st.deliveries.fetch, Args::new().bind(id))
        .await?
        .map(DeliveryRow::into_entry)
        .transpose()
}

/// Marks the entry (once for forward anyway, by compare-and-set on the
/// count for a redelivery); `Some` is why nothing may be done.
async fn mark(tx: &mut Tx<'_>, cmd: &ForwardCommand) -> Result<Option<ForwardOutcome>> {
    let st = tx.st;
    let id = cmd.delivery_id.as_str();
    let marked = match cmd.kind {
        ForwardKind::Anyway => {
            let args = Args::new()
                .bind(id)
                .bind(cmd.claim.key.as_str())
                .bind(&cmd.actor)
                .bind(tx.clock_now);
            tx.execute(&st.deliveries.mark_forwarded, args).await?
        }
        ForwardKind::Redeliver { n } => {
            let args = Args::new().bind(id).bind(n);
            tx.execute(&st.deliveries.count_redelivery, args).await?
        }
    };
    if marked == 1 {
        return Ok(None);
    }
    let forwarded = fetch_in(tx, id).await?.and_then(|e| e.forwarded);
    Ok(Some(match (cmd.kind, forwarded) {
        (ForwardKind::Anyway, Some(f)) => ForwardOutcome::AlreadyForwarded(f.key),
        _ => ForwardOutcome::Changed,
    }))
}

/// The operator's forward: the entry marked, a new run claimed and
/// approved with the forward, the linked run noted, all or nothing.
async fn forward(tx: &mut Tx<'_>, cmd: &ForwardCommand) -> Result<Finish<ForwardOutcome>> {
    if let Some(refused) = mark(tx, cmd).await? {
        return Ok(Finish::Rollback(refused));
    }
    let (namespace, key) = (cmd.claim.namespace.as_str(), cmd.claim.key.as_str());
    // A run under the key, whatever its state, is never taken over.
    if let Some(taken) = run_in(tx, namespace, key).await? {
        return Ok(Finish::Rollback(ForwardOutcome::KeyTaken(Box::new(taken))));
    }
    let Attempt::Won { run, lease, .. } = try_claim(tx, &cmd.claim).await? else {
        return Ok(Finish::Rollback(ForwardOutcome::Changed));
    };
    let mut detail = json!({ "effects": [cmd.effect.effect_type],
        "seals": seals(std::slice::from_ref(&cmd.effect)) });
    merge(&mut detail, &cmd.link);
    let approved = approve_claimed(tx, &run, &lease, &cmd.actor, detail).await?;
    insert_effect(tx, &approved, &cmd.effect).await?;
    if let Some((ns, linked_key)) = &cmd.linked {
        let kind = match cmd.kind {
            ForwardKind::Anyway => "delivery_forwarded_anyway",
            ForwardKind::Redeliver { .. } => "delivery_redelivered",
        };
        let mut detail = json!({ "forwarded_as": { "namespace": namespace, "key": key } });
        merge(&mut detail, &cmd.link);
        let st = tx.st;
        let args = Args::new().bind(ns.as_str()).bind(linked_key.as_str());
        if let Some(row) = tx.optional::<RunRow>(&st.runs.touch, args).await? {
            let from = row.to_run()?.state;
            let at = tx.clock_now;
            note(tx, &row, kind, &cmd.actor, detail, at, Some(from)).await?;
        }
    }
    Ok(Finish::Commit(ForwardOutcome::Done(Box::new(approved))))
}

fn merge(into: &mut Value, from: &Value) {
    if let (Some(into), Some(from)) = (into.as_object_mut(), from.as_object()) {
        for (k, v) in from {
            into.insert(k.clone(), v.clone());
        }
    }
}

/// Deletes a batch of entries, then of unclaimed `duplicate_of` raw
/// events, received before `before`; returns how many of each.
pub(crate) async fn forget(tx: &mut Tx<'_>, before: Millis, limit: i64) -> Result<(u64, u64)> {
    let st = tx.st;
    let args = || Args::new().bind(before).bind(limit);
    let entries = tx.execute(&st.deliveries.forget, args()).await?;
    let raw = tx.execute(&st.deliveries.forget_raw, args()).await?;
    Ok((entries, raw))
}

#[async_trait]
impl<B: Backend> DeliveryStore for Db<B> {
    async fn record_delivery(&self, entry: &DeliveryEntry, raw: Option<&RawEvent>) -> Result<()> {
        let (entry, raw) = (entry.clone(), raw.cloned());
        self.commit(move |tx| Box::pin(async move { record(tx, &entry, raw.as_ref()).await }))
            .await
    }

    async fn record_deliveries(&self, entries: &[DeliveryEntry]) -> Result<()> {
        let entries = entries.to_vec();
        self.commit(move |tx| {
            Box::pin(async move {
                for entry in &entries {
                    record(tx, entry, None).await?;
                }
                Ok(())
            })
        })
        .await
    }

    async fn deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<DeliveryEntry>> {
        let rd = self.reader();
        let (at, id) = filter.before.as_ref().map(|c| (c.at, c.id.clone())).unzip();
        let args = Args::new()
            .bind(filter.source.as_deref())
            .bind(filter.event_id.as_deref())
            .bind(filter.outcome.map(|o| o.as_str()))
            .bind(filter.since)
            .bind(filter.until)
            .bind(at)
            .bind(id)
            .bind(filter.limit);
        rd.all::<DeliveryRow>(&rd.st.deliveries.list, args)
            .await?
            .into_iter()
            .map(DeliveryRow::into_entry)
            .collect()
    }

    async fn delivery(&self, id: &str) -> Result<Option<DeliveryEntry>> {
        let rd = self.reader();
        rd.optional::<DeliveryRow>(&rd.st.deliveries.fetch, Args::new().bind(id))
            .await?
            .map(DeliveryRow::into_entry)
            .transpose()
    }

    async fn forward_delivery(&self, cmd: &ForwardCommand) -> Result<ForwardOutcome> {
        let cmd = cmd.clone();
        self.write(move |tx| Box::pin(async move { forward(tx, &cmd).await }))
            .await
    }
}
