//! The SQL of the deliveries log, written once for both backends.

/// The `deliveries` columns, in insert order and as [`DeliveryRow`] reads them.
///
/// [`DeliveryRow`]: crate::db::rows::DeliveryRow
const COLUMNS: &str = "id, source, event_id, event_type, outcome, status, payload_hash, \
     body_bytes, raw_event_id, run_namespace, run_key, detail, forwarded_key, forwarded_by, \
     forwarded_at, redeliveries, received_at";

/// The deliveries-log statements (the same on both backends).
#[derive(Debug, Clone)]
pub struct DeliveryStatements {
    /// Records one entry. Binds the columns in order.
    pub insert: String,
    /// One entry. Binds: id.
    pub fetch: String,
    /// A page, newest first. Binds: source, event_id, outcome, since,
    /// until, cursor time, cursor id, limit (each filter NULL for none).
    pub list: String,
    /// Marks a `duplicate_of` entry forwarded, once. Binds: id, key, by, at.
    pub mark_forwarded: String,
    /// Counts the `n`th redelivery, by compare-and-set on the count. Binds: id, n.
    pub count_redelivery: String,
    /// Deletes up to a batch of entries received before a time. Binds: before, limit.
    pub forget: String,
    /// Deletes up to a batch of `duplicate_of` raw events received before a
    /// time whose event no run took up (a forwarded one goes with its run).
    /// Binds: before, limit.
    pub forget_raw: String,
}

impl DeliveryStatements {
    /// The statements.
    pub fn new() -> Self {
        Self {
            insert: format!(
                "INSERT INTO deliveries ({COLUMNS}) VALUES ({})",
                super::placeholders(1, 17)
            ),
            fetch: format!("SELECT {COLUMNS} FROM deliveries WHERE id = $1"),
            list: format!(
                "SELECT {COLUMNS} FROM deliveries \
                 WHERE ($1 IS NULL OR source = $1) AND ($2 IS NULL OR event_id = $2) \
                 AND ($3 IS NULL OR outcome = $3) AND ($4 IS NULL OR received_at >= $4) \
                 AND ($5 IS NULL OR received_at < $5) \
                 AND ($6 IS NULL OR received_at < $6 OR (received_at = $6 AND id < $7)) \
                 ORDER BY received_at DESC, id DESC LIMIT $8"
            ),
            mark_forwarded: "UPDATE deliveries SET forwarded_key = $2, forwarded_by = $3, \
                 forwarded_at = $4 WHERE id = $1 AND outcome = 'duplicate_of' \
                 AND forwarded_key IS NULL"
                .into(),
            count_redelivery: "UPDATE deliveries SET redeliveries = $2 \
                 WHERE id = $1 AND redeliveries = $2 - 1"
                .into(),
            forget: "DELETE FROM deliveries WHERE id IN (SELECT id FROM deliveries \
                 WHERE received_at < $1 ORDER BY received_at LIMIT $2)"
                .into(),
            forget_raw: "DELETE FROM raw_events WHERE id IN (SELECT r.id FROM raw_events r \
                 WHERE r.status = 'duplicate_of' AND r.received_at < $1 AND NOT EXISTS \
                 (SELECT 1 FROM runs WHERE runs.namespace = r.source AND runs.run_key = r.event_id) \
                 ORDER BY r.received_at LIMIT $2)"
                .into(),
        }
    }
}

impl Default for DeliveryStatements {
    fn default() -> Self {
        Self::new()
    }
}
