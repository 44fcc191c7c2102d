//! A `deliveries` row, read back into a log entry.

use crate::db::exec::{FromRow, Row};
use crate::ingress::log::{DeliveryEntry, Forwarded};
use crate::ledger::storage::{Result, StoreError};

/// One `deliveries` row.
#[derive(Debug)]
pub(crate) struct DeliveryRow {
    id: String,
    source: String,
    event_id: Option<String>,
    event_type: Option<String>,
    outcome: String,
    status: i64,
    payload_hash: String,
    body_bytes: i64,
    raw_event_id: Option<String>,
    run_namespace: Option<String>,
    run_key: Option<String>,
    detail: Option<String>,
    forwarded_key: Option<String>,
    forwarded_by: Option<String>,
    forwarded_at: Option<i64>,
    redeliveries: i64,
    received_at: i64,
}

impl DeliveryRow {
    pub(crate) fn into_entry(self) -> Result<DeliveryEntry> {
        let corrupt = |m: String| StoreError::Corrupt(format!("deliveries row {}: {m}", self.id));
        let outcome = self.outcome.parse().map_err(corrupt)?;
        let status = u16::try_from(self.status).map_err(|e| corrupt(e.to_string()))?;
        let forwarded = match (self.forwarded_key, self.forwarded_by, self.forwarded_at) {
            (Some(key), Some(by), Some(at)) => Some(Forwarded { key, by, at }),
            _ => None,
        };
        Ok(DeliveryEntry {
            id: self.id,
            source: self.source,
            event_id: self.event_id,
            event_type: self.event_type,
            outcome,
            status,
            payload_hash: self.payload_hash,
            body_bytes: self.body_bytes,
            raw_event_id: self.raw_event_id,
            run: self.run_namespace.zip(self.run_key),
            detail: self.detail,
            forwarded,
            redeliveries: self.redeliveries,
            received_at: self.received_at,
        })
    }
}

impl FromRow for DeliveryRow {
    fn from_row(row: &dyn Row) -> Result<Self> {
        Ok(Self {
            id: row.get("id")?,
            source: row.get("source")?,
            event_id: row.get("event_id")?,
            event_type: row.get("event_type")?,
            outcome: row.get("outcome")?,
            status: row.get("status")?,
            payload_hash: row.get("payload_hash")?,
            body_bytes: row.get("body_bytes")?,
            raw_event_id: row.get("raw_event_id")?,
            run_namespace: row.get("run_namespace")?,
            run_key: row.get("run_key")?,
            detail: row.get("detail")?,
            forwarded_key: row.get("forwarded_key")?,
            forwarded_by: row.get("forwarded_by")?,
            forwarded_at: row.get("forwarded_at")?,
            redeliveries: row.get("redeliveries")?,
            received_at: row.get("received_at")?,
        })
    }
}
