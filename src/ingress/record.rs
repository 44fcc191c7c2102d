//! Every delivery leaves an entry (DESIGN.md §3): what the intake learnt
//! on the way ([`Seen`]) and its answer become a deliveries-log entry, or,
//! for an unauthenticated request, an entry of the in-memory ring. Both
//! move `oncegate_deliveries_total`.

use super::accept::{AcceptError, Answer, Intake};
use super::event::RawEvent;
use super::log::{DeliveryEntry, DeliveryOutcome};
use super::prepared::PreparedSource;
use super::refused::Refused;
use crate::clock::Millis;
use crate::ledger::PayloadHash;

/// The longest problem text a bad request's entry keeps.
const MAX_DETAIL: usize = 500;

/// What the intake learnt of a delivery before it answered.
#[derive(Debug, Default)]
pub(super) struct Seen {
    pub(super) received_at: Millis,
    event_id: Option<String>,
    event_type: Option<String>,
    raw_event_id: Option<String>,
    payload_hash: Option<PayloadHash>,
    /// The run it concerns (its own, or the holder of its business key).
    pub(super) run: Option<(String, String)>,
    /// A `duplicate_of` event's body, stored with the entry.
    pub(super) raw: Option<RawEvent>,
}

impl Seen {
    /// Notes the parsed event.
    pub(super) fn saw(&mut self, event: &RawEvent) {
        self.event_id = Some(event.event_id.clone());
        self.event_type.clone_from(&event.event_type);
        self.raw_event_id = Some(event.id.clone());
        self.payload_hash = Some(event.payload_hash.clone());
    }
}

/// The log's outcome and the status answered; `None` when nothing is
/// logged (an unknown source has no log, a failed store cannot take it).
fn outcome_of(result: &Result<Answer, AcceptError>) -> Option<(DeliveryOutcome, u16)> {
    Some(match result {
        Ok(Answer::Handshake(_)) => (DeliveryOutcome::Handshake, 200),
        Ok(Answer::Accepted) => (DeliveryOutcome::Accepted, 200),
        Ok(Answer::Duplicate) => (DeliveryOutcome::Duplicate, 200),
        Ok(Answer::DuplicateOf { .. }) => (DeliveryOutcome::DuplicateOf, 200),
        Ok(Answer::InFlight) => (DeliveryOutcome::InFlight, 200),
        Ok(Answer::Quarantined) => (DeliveryOutcome::Quarantined, 200),
        Err(AcceptError::Signature(_)) => (DeliveryOutcome::SignatureRefused, 401),
        Err(AcceptError::Invalid { .. }) => (DeliveryOutcome::BadRequest, 400),
        Err(AcceptError::InFlight { .. }) => (DeliveryOutcome::InFlight, 409),
        Err(AcceptError::Conflict { .. }) => (DeliveryOutcome::ConflictRejected, 422),
        Err(AcceptError::UnknownSource(_) | AcceptError::Store(_)) => return None,
    })
}

impl Intake<'_> {
    /// Leaves the delivery's entry and passes its answer on.
    pub(super) async fn log(
        &self,
        source: &PreparedSource,
        body: &[u8],
        result: Result<Answer, AcceptError>,
        seen: Seen,
    ) -> Result<Answer, AcceptError> {
        let Some((outcome, status)) = outcome_of(&result) else {
            return result;
        };
        let name = source.config.name.as_str();
        self.metrics.delivery(name, outcome.as_str());
        let payload_hash = seen
            .payload_hash
            .unwrap_or_else(|| PayloadHash::of_bytes(body));
        if !outcome.is_verified() {
            let reason = match &result {
                Err(e) => e.to_string(),
                Ok(_) => String::new(),
            };
            self.refused.push(Refused {
                source: name.to_owned(),
                outcome,
                status,
                reason,
                payload_hash: Some(payload_hash.to_string()),
                body_bytes: body.len() as i64,
                received_at: seen.received_at,
            });
            return result;
        }
        let stored = matches!(
            outcome,
            DeliveryOutcome::Accepted | DeliveryOutcome::Quarantined | DeliveryOutcome::DuplicateOf
        );
        let detail = match &result {
            Err(e @ AcceptError::Invalid { .. }) => {
                Some(e.to_string().chars().take(MAX_DETAIL).collect())
            }
            _ => None,
        };
        let entry = DeliveryEntry {
            id: uuid::Uuid::now_v7().to_string(),
            source: name.to_owned(),
            event_id: seen.event_id,
            event_type: seen.event_type,
            outcome,
            status,
            payload_hash: payload_hash.to_string(),
            body_bytes: body.len() as i64,
            raw_event_id: seen.raw_event_id.filter(|_| stored),
            run: seen.run,
            detail,
            forwarded: None,
            redeliveries: 0,
            received_at: seen.received_at,
        };
        let written = match &seen.raw {
            Some(raw) => self.log.record_delivery(&entry, Some(raw)).await,
            None => self.logbook.record(entry).await,
        };
        match written {
            Ok(()) => result,
            // A duplicate_of body must be kept before the 2xx: the provider
            // redelivers on the 503.
            Err(err) if seen.raw.is_some() => Err(AcceptError::Store(err)),
            Err(err) => {
                tracing::warn!(source = %name, outcome = %outcome, error = %err,
                    "the delivery was answered but its deliveries-log entry was not written");
                result
            }
        }
    }

    /// Notes a delivery refused before it could be verified: its body was
    /// over the source's limit (`declared` bytes, when the request said).
    pub fn too_large(&self, name: &str, declared: Option<u64>) {
        let Ok(source) = self.source(name) else {
            return;
        };
        let name = source.config.name.as_str();
        self.metrics
            .delivery(name, DeliveryOutcome::TooLarge.as_str());
        self.refused.push(Refused {
            source: name.to_owned(),
            outcome: DeliveryOutcome::TooLarge,
            status: 413,
            reason: format!(
                "the body is over the source's limit of {} bytes",
                source.config.max_body_bytes
            ),
            payload_hash: None,
            body_bytes: declared.map_or(-1, |d| i64::try_from(d).unwrap_or(i64::MAX)),
            received_at: self.clock.now_ms(),
        });
    }
}
