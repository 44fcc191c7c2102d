//! A raw webhook delivery as stored: the body byte for byte.

use std::collections::BTreeMap;

use crate::clock::Millis;
use crate::ledger::PayloadHash;

/// Whether a stored delivery was accepted or set aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawStatus {
    /// Claimed and forwarded through the outbox.
    Accepted,
    /// Same event id, different body: kept as evidence, never forwarded.
    Quarantined,
    /// Another run holds its business key (or its body): kept, linked to
    /// the holder in the deliveries log, forwarded only if an operator says so.
    DuplicateOf,
}

impl RawStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Quarantined => "quarantined",
            Self::DuplicateOf => "duplicate_of",
        }
    }
}

/// One delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct RawEvent {
    /// Stable id (UUID v7).
    pub id: String,
    /// The configured source.
    pub source: String,
    /// The provider's event id (the run's key).
    pub event_id: String,
    /// The provider's event type, when known.
    pub event_type: Option<String>,
    /// Accepted, quarantined or duplicate_of.
    pub status: RawStatus,
    /// SHA-256 of the raw body.
    pub payload_hash: PayloadHash,
    /// The delivery's content type.
    pub content_type: Option<String>,
    /// Selected, non-secret request headers.
    pub headers: BTreeMap<String, String>,
    /// The raw body.
    pub body: Vec<u8>,
    /// When it arrived.
    pub received_at: Millis,
}
