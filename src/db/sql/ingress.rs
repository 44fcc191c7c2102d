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
    /// Remembers a delivery's body for its source's window and returns the
    /// event id the body counts under: the earlier one while its window is
    /// open, else this delivery's. Binds: source, payload_hash, event_id,
    /// now, expires_at.
    pub remember_body: String,
    /// Takes a remembered body over for this delivery (the earlier event's
    /// run is gone). Binds as `remember_body`.
    pub take_body: String,
    /// Forgets bodies whose window closed. Binds: now.
    pub forget_bodies: String,
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
            remember_body: remember_body(),
            take_body: "UPDATE ingress_bodies SET event_id = $3, seen_at = $4, expires_at = $5 \
                 WHERE source = $1 AND payload_hash = $2"
                .into(),
            forget_bodies: "DELETE FROM ingress_bodies WHERE expires_at <= $1".into(),
        }
    }
}

/// The upsert of [`IngressStatements::remember_body`]: the stored row is
/// kept while its window is open, else replaced by this delivery's.
fn remember_body() -> String {
    let keep = "ingress_bodies.expires_at > $4";
    let column =
        |c: &str| format!("{c} = CASE WHEN {keep} THEN ingress_bodies.{c} ELSE excluded.{c} END");
    format!(
        "INSERT INTO ingress_bodies (source, payload_hash, event_id, seen_at, expires_at) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (source, payload_hash) DO UPDATE SET {}, {}, {} \
         RETURNING event_id",
        column("event_id"),
        column("seen_at"),
        column("expires_at"),
    )
}

impl Default for IngressStatements {
    fn default() -> Self {
        Self::new()
    }
}
