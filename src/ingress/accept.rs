//! The intake use case: one delivery to a configured source authenticated
//! on its raw bytes, parsed, and accepted (claim, raw event, forward
//! effect) in one transaction, or answered as a duplicate, in flight, or
//! quarantined. `POST /hooks/{source}` ([`crate::api::hooks`]) reads the
//! body and maps the answer; everything else happens here.

use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderMap;
use serde_json::Value;
use tokio::sync::Notify;

use super::delivery::{forward_effect, kept_headers, locate, parse_json, slack_handshake};
use super::event::{RawEvent, RawStatus};
use super::port::{DeliveryStore, IngressStore};
use super::prepared::{PreparedSource, Sources};
use super::record::Seen;
use super::source::{ConflictPolicy, InFlightPolicy};
use crate::clock::Clock;
use crate::ledger::span::record_run;
use crate::ledger::storage::StoreError;
use crate::ledger::{
    BusinessKey, ClaimOutcome, ClaimRequest, IdempotencyKey, InvalidId, Namespace, PayloadHash,
    RunMetadata, RunState,
};
use crate::metrics::Metrics;

/// The operation every ingress forward belongs to (the one ungated kind).
pub const FORWARD_OPERATION: &str = "ingress.forward";

/// What an accepted intake needs: the prepared sources, the storage, the
/// metrics, the clock, the dispatcher's wake-up, and two ledger settings.
#[derive(Debug, Clone, Copy)]
pub struct Intake<'a> {
    /// The configured sources, prepared at start.
    pub sources: &'a Sources,
    /// Where deliveries are accepted.
    pub store: &'a dyn IngressStore,
    /// Where a `duplicate_of` entry is written with its body.
    pub log: &'a dyn DeliveryStore,
    /// Where every other entry is handed over, to be written in batches.
    pub logbook: &'a super::logbook::Logbook,
    /// Unauthenticated deliveries, in memory only.
    pub refused: &'a super::refused::RefusedRing,
    /// Counters of deliveries, signatures and conflicts.
    pub metrics: &'a Metrics,
    /// The injected clock (signature timestamps, receipt times).
    pub clock: &'a dyn Clock,
    /// Wakes the dispatcher when a forward is queued.
    pub wake: &'a Notify,
    /// The lease an ingress run is claimed with.
    pub lease_ms: i64,
    /// How long a provider is asked to wait before redelivering an event
    /// still in flight.
    pub in_flight_retry_after_ms: i64,
}

/// One delivery as it arrived.
#[derive(Debug, Clone, Copy)]
pub struct Delivery<'a> {
    /// Its request headers.
    pub headers: &'a HeaderMap,
    /// Its raw body, byte for byte.
    pub body: &'a [u8],
    /// The request's correlation id (its forward carries the same).
    pub correlation_id: Option<&'a str>,
}

/// What the provider is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A provider handshake (Slack's `url_verification`): echo this challenge.
    Handshake(String),
    /// Stored and claimed; the forward is queued.
    Accepted,
    /// The event was handled (or finished) before.
    Duplicate,
    /// Another run holds the event's business key.
    DuplicateOf {
        /// The holder's namespace.
        namespace: String,
        /// The holder's key.
        key: String,
    },
    /// Still being handled, and the source acknowledges duplicates in flight.
    InFlight,
    /// The same event id came with another body: stored as evidence, never
    /// forwarded, dead-lettered.
    Quarantined,
}

/// Why a delivery was refused; nothing was stored unless said otherwise.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    /// No source has this name.
    #[error("no source is configured as {0:?}")]
    UnknownSource(String),
    /// The provider's signature did not verify.
    #[error("signature refused: {0}")]
    Signature(String),
    /// The delivery is unreadable or lacks what the source needs.
    #[error("{problem}")]
    Invalid {
        /// The part of the delivery at fault.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// Still being handled, and the source asks providers to retry later.
    #[error("event {key} is still being handled ({state}); retry later")]
    InFlight {
        /// The event's key.
        key: String,
        /// Its run's state.
        state: RunState,
        /// Seconds the provider should wait.
        retry_after_secs: i64,
    },
    /// The same event id came with another body and the source rejects it.
    #[error("key {key} in namespace {namespace} was first delivered with a different body")]
    Conflict {
        /// The source.
        namespace: String,
        /// The event id.
        key: String,
        /// The hash the run holds.
        stored_hash: String,
        /// The hash that was offered.
        offered_hash: String,
    },
    /// The store failed (or is unavailable); nothing was acknowledged.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<InvalidId> for AcceptError {
    fn from(e: InvalidId) -> Self {
        Self::Invalid {
            field: e.field,
            problem: e.problem,
        }
    }
}

pub(super) fn invalid(field: &'static str, problem: impl Into<String>) -> AcceptError {
    AcceptError::Invalid {
        field,
        problem: problem.into(),
    }
}

impl<'a> Intake<'a> {
    /// The body limit of the source named `name`.
    ///
    /// # Errors
    /// [`AcceptError::UnknownSource`].
    pub fn body_limit(&self, name: &str) -> Result<usize, AcceptError> {
        Ok(self.source(name)?.config.max_body_bytes)
    }

    pub(super) fn source(&self, name: &str) -> Result<&'a PreparedSource, AcceptError> {
        self.sources
            .get(name)
            .ok_or_else(|| AcceptError::UnknownSource(name.to_owned()))
    }

    /// Authenticates, parses and accepts one delivery to source `name`,
    /// and leaves its entry in the deliveries log (or, unauthenticated, in
    /// the in-memory ring).
    ///
    /// # Errors
    /// [`AcceptError`]; only a quarantine stores anything on the way to
    /// an error-free answer, and a log entry that cannot be written fails
    /// only a `duplicate_of` delivery (its body must be kept before the 2xx).
    pub async fn accept(&self, name: &str, delivery: Delivery<'_>) -> Result<Answer, AcceptError> {
        let source = self.source(name)?;
        let mut seen = Seen::default();
        let result = self.take(source, delivery, &mut seen).await;
        self.log(source, delivery.body, result, seen).await
    }

    async fn take(
        &self,
        source: &PreparedSource,
        delivery: Delivery<'_>,
        seen: &mut Seen,
    ) -> Result<Answer, AcceptError> {
        let name = source.config.name.as_str();
        let now_ms = self.clock.now_ms();
        seen.received_at = now_ms;
        let (headers, body) = (delivery.headers, delivery.body);
        if let Err(err) = source
            .verifier
            .verify(headers, body, now_ms.div_euclid(1000))
        {
            self.metrics.signature_failed(name);
            tracing::warn!(source = %name, reason = %err, "webhook signature refused");
            return Err(AcceptError::Signature(err.to_string()));
        }
        let json = parse_json(source, headers, body)?;
        if let Some(challenge) = slack_handshake(source, json.as_ref()) {
            return Ok(Answer::Handshake(challenge));
        }
        let (claim, event) = self.event(source, delivery, json.as_ref(), now_ms)?;
        seen.saw(&event);
        let forward = forward_effect(source, &event);
        let window = source.config.body_window_ms();
        let outcome = self
            .store
            .accept_event(&claim, &event, &forward, window)
            .await?;
        if let ClaimOutcome::Claimed { run, .. } = &outcome {
            // Stored with its forward, not yet acknowledged (chaos tests).
            crate::chaos::point("after_effect_insert");
            tracing::Span::current().record("version", run.version.get());
            self.wake.notify_one();
        }
        self.metrics.claim_answered(name, &outcome);
        self.metrics
            .ingress_event(name, event.event_type.as_deref(), &outcome);
        self.answer(source, outcome, event, seen).await
    }

    /// The claim of the event's ingress run, and the raw event to store.
    fn event(
        &self,
        source: &PreparedSource,
        delivery: Delivery<'_>,
        json: Option<&Value>,
        now_ms: i64,
    ) -> Result<(ClaimRequest, RawEvent), AcceptError> {
        let (name, headers) = (&source.config.name, delivery.headers);
        let event_id = locate(&source.event_id, headers, json).ok_or_else(|| {
            invalid(
                "event_id",
                format!("the delivery has no event id at {:?}", source.event_id),
            )
        })?;
        let key = IdempotencyKey::parse(event_id.clone()).map_err(|e| {
            invalid(
                "event_id",
                format!("the event id is unusable as a key: {e}"),
            )
        })?;
        record_run(name, key.as_str(), None);
        let business_key = match (&source.business_key, json) {
            (Some(template), Some(body)) => Some(
                template
                    .render(body)
                    .and_then(|k| BusinessKey::parse(k).map_err(|e| e.to_string()))
                    .map_err(|e| invalid("business_key", e))?,
            ),
            _ => None,
        };
        let payload_hash = PayloadHash::of_bytes(delivery.body);
        let event = RawEvent {
            id: uuid::Uuid::now_v7().to_string(),
            source: name.clone(),
            event_id,
            event_type: source
                .event_type
                .as_ref()
                .and_then(|l| locate(l, headers, json)),
            status: RawStatus::Accepted,
            payload_hash: payload_hash.clone(),
            content_type: headers
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            headers: kept_headers(headers),
            body: delivery.body.to_vec(),
            received_at: now_ms,
        };
        let claim = ClaimRequest {
            namespace: Namespace::parse(name.clone())?,
            key,
            business_key,
            payload_hash,
            lease_ms: self.lease_ms,
            metadata: RunMetadata {
                operation: Some(FORWARD_OPERATION.into()),
                // The delivery's log lines and its forward's share one id.
                correlation_id: delivery.correlation_id.map(str::to_owned),
                ..RunMetadata::default()
            },
            claimed_by: format!("ingress:{name}"),
        };
        Ok((claim, event))
    }

    /// Turns the claim's outcome into the provider's answer.
    async fn answer(
        &self,
        source: &PreparedSource,
        outcome: ClaimOutcome,
        event: RawEvent,
        seen: &mut Seen,
    ) -> Result<Answer, AcceptError> {
        seen.run = Some(match &outcome {
            ClaimOutcome::Claimed { run, .. } => run,
            ClaimOutcome::Duplicate(run)
            | ClaimOutcome::Finished(run)
            | ClaimOutcome::Exhausted(run)
            | ClaimOutcome::DuplicateOf(run)
            | ClaimOutcome::InFlight(run)
            | ClaimOutcome::Conflict(run) => run,
        })
        .map(|run| (run.namespace.to_string(), run.key.to_string()));
        Ok(match outcome {
            ClaimOutcome::Claimed { .. } => Answer::Accepted,
            ClaimOutcome::Duplicate(_) | ClaimOutcome::Finished(_) | ClaimOutcome::Exhausted(_) => {
                Answer::Duplicate
            }
            ClaimOutcome::DuplicateOf(holder) => {
                // Kept with the log entry, never dropped silently.
                seen.raw = Some(RawEvent {
                    status: RawStatus::DuplicateOf,
                    ..event
                });
                Answer::DuplicateOf {
                    namespace: holder.namespace.to_string(),
                    key: holder.key.to_string(),
                }
            }
            ClaimOutcome::InFlight(run) => match source.config.in_flight {
                InFlightPolicy::Ack => Answer::InFlight,
                InFlightPolicy::Retry => {
                    return Err(AcceptError::InFlight {
                        key: run.key.to_string(),
                        state: run.state,
                        retry_after_secs: (self.in_flight_retry_after_ms + 999) / 1000,
                    })
                }
            },
            ClaimOutcome::Conflict(run) => {
                self.metrics.payload_conflict(&source.config.name);
                tracing::warn!(source = %source.config.name, "same event id, different body");
                match source.config.on_conflict {
                    ConflictPolicy::Reject => {
                        return Err(AcceptError::Conflict {
                            namespace: run.namespace.to_string(),
                            key: run.key.to_string(),
                            stored_hash: run.payload_hash.to_string(),
                            offered_hash: event.payload_hash.to_string(),
                        })
                    }
                    ConflictPolicy::Quarantine => {
                        let event = RawEvent {
                            status: RawStatus::Quarantined,
                            ..event
                        };
                        self.store.quarantine_event(&event, &run).await?;
                        Answer::Quarantined
                    }
                }
            }
        })
    }
}
