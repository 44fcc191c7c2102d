//! A `deliveries` row, read back into a log entry.

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

from_columns! {
    DeliveryRow {
        id, source, event_id, event_type, outcome, status, payload_hash, body_bytes, raw_event_id,
        run_namespace, run_key, detail, forwarded_key, forwarded_by, forwarded_at, redeliveries,
        received_at,
    }
}
