//! The deliveries log (DESIGN.md §3, "Every delivery is visible"): what
//! each verified request to `/hooks/{source}` came to, and the criteria it
//! is searched by. Unauthenticated requests never reach it: they live in
//! the in-memory [`super::refused::RefusedRing`].

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;
use utoipa::IntoParams;

use crate::clock::Millis;
use crate::criteria::{filled, instant, limit};
pub use crate::criteria::{Cursor, FilterError, DEFAULT_LIMIT, MAX_LIMIT};

/// What one delivery came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeliveryOutcome {
    /// Stored, claimed, forward queued.
    Accepted,
    /// The event was handled (or finished) before.
    Duplicate,
    /// Still being handled (answered 2xx or 409 by the source's policy).
    InFlight,
    /// Another run holds the event's business key (or its body, inside the
    /// source's body window): stored, linked to the holder, not forwarded
    /// unless an operator says so.
    DuplicateOf,
    /// Same event id, another body: stored as evidence, dead-lettered.
    Quarantined,
    /// Same event id, another body, and the source answers 422: nothing stored.
    ConflictRejected,
    /// A provider handshake (Slack's `url_verification`), answered at once.
    Handshake,
    /// Verified but unreadable, or without what the source needs.
    BadRequest,
    /// The signature did not verify (in-memory ring and counters only).
    SignatureRefused,
    /// The body was over the source's limit before it could be verified
    /// (in-memory ring and counters only).
    TooLarge,
}

impl DeliveryOutcome {
    /// Every outcome, in the order the console lists them.
    pub const ALL: [Self; 10] = [
        Self::Accepted,
        Self::Duplicate,
        Self::InFlight,
        Self::DuplicateOf,
        Self::Quarantined,
        Self::ConflictRejected,
        Self::Handshake,
        Self::BadRequest,
        Self::SignatureRefused,
        Self::TooLarge,
    ];

    /// The stored (and metric label) name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Duplicate => "duplicate",
            Self::InFlight => "in_flight",
            Self::DuplicateOf => "duplicate_of",
            Self::Quarantined => "quarantined",
            Self::ConflictRejected => "conflict_rejected",
            Self::Handshake => "handshake",
            Self::BadRequest => "bad_request",
            Self::SignatureRefused => "signature_refused",
            Self::TooLarge => "too_large",
        }
    }

    /// Whether the request was authenticated; only those reach the database.
    pub fn is_verified(self) -> bool {
        !matches!(self, Self::SignatureRefused | Self::TooLarge)
    }
}

impl fmt::Display for DeliveryOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DeliveryOutcome {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|o| o.as_str()).collect();
                format!("unknown outcome {s:?}; one of {}", names.join(", "))
            })
    }
}

/// One entry of the deliveries log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryEntry {
    /// Stable id (UUID v7).
    pub id: String,
    /// The configured source.
    pub source: String,
    /// The provider's event id, when it was read.
    pub event_id: Option<String>,
    /// The provider's event type, when it was read.
    pub event_type: Option<String>,
    /// What it came to.
    pub outcome: DeliveryOutcome,
    /// The HTTP status the provider was answered with.
    pub status: u16,
    /// SHA-256 of the raw body.
    pub payload_hash: String,
    /// Size of the raw body in bytes.
    pub body_bytes: i64,
    /// The stored raw event (accepted, quarantined, duplicate_of).
    pub raw_event_id: Option<String>,
    /// The run it concerns: its own, or (duplicate_of) the holder's.
    pub run: Option<(String, String)>,
    /// Why a bad request was refused.
    pub detail: Option<String>,
    /// The run an operator's "forward anyway" created, with who and when.
    pub forwarded: Option<Forwarded>,
    /// How many times an operator redelivered it.
    pub redeliveries: i64,
    /// When it arrived.
    pub received_at: Millis,
}

/// An operator's "forward anyway" of a `duplicate_of` delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forwarded {
    /// The key of the run it was forwarded under (namespace: the source).
    pub key: String,
    /// The operator.
    pub by: String,
    /// When.
    pub at: Millis,
}

/// The store's filter of the log, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliveryFilter {
    /// Only this source.
    pub source: Option<String>,
    /// Only this provider event id.
    pub event_id: Option<String>,
    /// Only this outcome.
    pub outcome: Option<DeliveryOutcome>,
    /// Only deliveries received at or after.
    pub since: Option<Millis>,
    /// Only deliveries received before.
    pub until: Option<Millis>,
    /// Continue after this entry (newest first).
    pub before: Option<Cursor>,
    /// Page size.
    pub limit: i64,
}

/// The log's search as given (API query string, console form); blank
/// text means no filter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeliveryCriteria {
    /// Only this source.
    pub source: Option<String>,
    /// Only this provider event id.
    pub event_id: Option<String>,
    /// Only this outcome (`accepted`, `duplicate`, `in_flight`,
    /// `duplicate_of`, `quarantined`, `conflict_rejected`, `handshake`,
    /// `bad_request`).
    pub outcome: Option<String>,
    /// Received at or after: RFC 3339, or an age (`90s`, `15m`, `2h`, `7d`).
    pub since: Option<String>,
    /// Received before: RFC 3339, or an age.
    pub until: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size, 1–500 (default 50).
    pub limit: Option<i64>,
}

impl DeliveryCriteria {
    /// The store filter for these criteria at time `now`.
    ///
    /// # Errors
    /// [`FilterError`] naming the bad criterion.
    pub fn into_filter(self, now: Millis) -> Result<DeliveryFilter, FilterError> {
        let limit = limit(self.limit)?;
        let text = |field: &'static str, v: Option<String>| {
            filled(v)
                .map(|v| {
                    if v.len() > 255 || v.chars().any(char::is_control) {
                        Err(FilterError::new(
                            field,
                            "must be at most 255 visible characters",
                        ))
                    } else {
                        Ok(v)
                    }
                })
                .transpose()
        };
        Ok(DeliveryFilter {
            source: text("source", self.source)?,
            event_id: text("event_id", self.event_id)?,
            outcome: filled(self.outcome)
                .map(|o| o.parse())
                .transpose()
                .map_err(|e: String| FilterError::new("outcome", e))?,
            since: filled(self.since)
                .map(|t| instant("since", &t, now))
                .transpose()?,
            until: filled(self.until)
                .map(|t| instant("until", &t, now))
                .transpose()?,
            before: filled(self.cursor)
                .map(|c| Cursor::decode(&c))
                .transpose()?,
            limit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn criteria_read_times_ages_and_outcomes() {
        let now = 10_000_000;
        let filter = DeliveryCriteria {
            source: Some(" stripe ".into()),
            outcome: Some("duplicate_of".into()),
            since: Some("1h".into()),
            until: Some("1970-01-01T00:00:05Z".into()),
            event_id: Some(String::new()),
            ..DeliveryCriteria::default()
        }
        .into_filter(now)
        .unwrap();
        assert_eq!(filter.source.as_deref(), Some("stripe"));
        assert_eq!(filter.event_id, None);
        assert_eq!(filter.outcome, Some(DeliveryOutcome::DuplicateOf));
        assert_eq!(filter.since, Some(now - 3_600_000));
        assert_eq!(filter.until, Some(5_000));
        assert_eq!(filter.limit, 50);
    }

    #[test]
    fn bad_criteria_name_their_field() {
        let bad = |c: DeliveryCriteria| c.into_filter(0).unwrap_err().field;
        let outcome = DeliveryCriteria {
            outcome: Some("lost".into()),
            ..DeliveryCriteria::default()
        };
        assert_eq!(bad(outcome), "outcome");
        let since = DeliveryCriteria {
            since: Some("yesterday".into()),
            ..DeliveryCriteria::default()
        };
        assert_eq!(bad(since), "since");
        let limit = DeliveryCriteria {
            limit: Some(0),
            ..DeliveryCriteria::default()
        };
        assert_eq!(bad(limit), "limit");
        let cursor = DeliveryCriteria {
            cursor: Some("!".into()),
            ..DeliveryCriteria::default()
        };
        assert_eq!(bad(cursor), "cursor");
    }

    #[test]
    fn outcomes_round_trip_and_only_verified_ones_are_stored() {
        for o in DeliveryOutcome::ALL {
            assert_eq!(o.as_str().parse::<DeliveryOutcome>(), Ok(o));
        }
        assert!(!DeliveryOutcome::SignatureRefused.is_verified());
        assert!(DeliveryOutcome::DuplicateOf.is_verified());
    }
}
