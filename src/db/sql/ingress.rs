//! The SQL of raw deliveries (the webhook ingress's evidence), written
//! once for both backends.

/// The `raw_events` columns read back, in [`RawEventRow`] order.
///
/// [`RawEventRow`]: crate::db::rows::RawEventRow
const RAW_EVENT_COLUMNS: &str = "id, source, event_id, event_type, status, payload_hash, \
     content_type, headers, body, received_at";

/// The ingress statements (the same on both backends).
#[derive(Debug, Clone)]
pub struct IngressStatements {
    /// Stores a raw delivery. Binds: id, source, event_id, event_type,
    /// status, payload_hash, content_type, headers, body, received_at.
    pub insert_raw_event: String,
    /// A raw delivery. Binds: id.
    pub raw_event: String,
    /// A raw delivery's payload hash. Binds: id.
    pub raw_event_hash: String,
    /// The accepted raw delivery of an ingress run. Binds: source, event_id.
    pub accepted_raw_event: String,
}

impl IngressStatements {
    /// The statements.
    pub fn new() -> Self {
        Self {
            insert_raw_event: format!(
                "INSERT INTO raw_events ({RAW_EVENT_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING"
            ),
            raw_event: format!("SELECT {RAW_EVENT_COLUMNS} FROM raw_events WHERE id = $1"),
            raw_event_hash: "SELECT payload_hash FROM raw_events WHERE id = $1".into(),
            accepted_raw_event: "SELECT id FROM raw_events WHERE source = $1 AND event_id = $2 \
                 AND status = 'accepted'"
                .into(),
        }
    }
}

impl Default for IngressStatements {
    fn default() -> Self {
        Self::new()
    }
}
