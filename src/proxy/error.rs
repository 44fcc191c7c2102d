//! Why the proxy answered with a problem instead of an upstream answer:
//! each refusal with its HTTP status and problem type, so the API maps it
//! without knowing the proxy.

use super::key::BadKey;
use crate::ledger::storage::StoreError;

/// A proxied request the proxy answers itself.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// No proxy has that name.
    #[error("no proxy is named {0:?}")]
    UnknownProxy(String),
    /// The proxy requires a key and the request has none.
    #[error("this proxy requires an Idempotency-Key header (an RFC 8941 string, e.g. Idempotency-Key: \"order-42\"); nothing was sent")]
    MissingKey,
    /// The key does not follow the draft's syntax.
    #[error("{0}; nothing was sent")]
    BadKey(#[from] BadKey),
    /// The path would leave the target's base URL.
    #[error("the path leaves the target's base URL ({0}); nothing was sent")]
    PathOutside(String),
    /// The body is over the proxy's limit.
    #[error(
        "the request body is larger than this proxy's max_request_bytes ({0}); nothing was sent"
    )]
    TooLarge(usize),
    /// The key was used for a request with another fingerprint.
    #[error("this Idempotency-Key was already used for a different request (method, path, query, body or fingerprint headers differ); use a new key for a new request")]
    Reused,
    /// The first request with the key is still being forwarded.
    #[error(
        "a request with this Idempotency-Key is still in flight; retry after {retry_after_secs} s"
    )]
    InFlight {
        /// When to ask again.
        retry_after_secs: u64,
    },
    /// A request with the key was sent and its outcome is unknown.
    #[error("a request with this Idempotency-Key was sent upstream and its outcome is unknown ({reason}); it is never forwarded again blindly: an operator resolves it as found or not found")]
    OutcomeUnknown {
        /// What happened.
        reason: String,
    },
    /// The key is closed: resolved as carried out, or its answer could not be kept.
    #[error("this Idempotency-Key is closed and will not be forwarded again: {reason}")]
    Closed {
        /// Why.
        reason: String,
    },
    /// The key's answer was kept for its window, which has passed.
    #[error("this Idempotency-Key was used and its answer is no longer kept (kept for {window}); it will not be forwarded again: use a new key for a new request")]
    AnswerExpired {
        /// The proxy's retention, in words.
        window: String,
    },
    /// The kill switch holds the target: nothing was sent.
    #[error("actions to target {0} are disabled (kill switch); nothing was sent, retry later")]
    ActionsDisabled(String),
    /// Every send slot of the target stayed taken: nothing was sent.
    #[error(
        "target {0} has no free send slot (its concurrency limit); nothing was sent, retry later"
    )]
    TargetBusy(String),
    /// The upstream could not be reached: nothing was sent.
    #[error("the upstream could not be reached ({0}); nothing was sent, a retry is safe")]
    NotSent(String),
    /// The request was sent and no answer came.
    #[error("the request was sent and no answer came ({0}); its outcome is unknown, so later requests with this Idempotency-Key get 409 until it is resolved")]
    LostAfterSend(String),
    /// An answer came whose body could not be read whole.
    #[error("the upstream answered {status} but {why}; the answer was not kept")]
    AnswerUnreadable {
        /// The upstream's status.
        status: u16,
        /// Why the body is not whole.
        why: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ProxyError {
    /// The HTTP status of the problem.
    pub fn status(&self) -> u16 {
        match self {
            Self::UnknownProxy(_) => 404,
            Self::MissingKey | Self::BadKey(_) | Self::PathOutside(_) => 400,
            Self::TooLarge(_) => 413,
            Self::Reused => 422,
            Self::InFlight { .. }
            | Self::OutcomeUnknown { .. }
            | Self::Closed { .. }
            | Self::AnswerExpired { .. } => 409,
            Self::ActionsDisabled(_) | Self::TargetBusy(_) => 503,
            Self::NotSent(_) | Self::LostAfterSend(_) | Self::AnswerUnreadable { .. } => 502,
            Self::Store(_) => 500,
        }
    }

    /// The problem type's slug (`urn:oncegate:problem:<slug>`).
    pub fn slug(&self) -> &'static str {
        match self {
            Self::UnknownProxy(_) => "not-found",
            Self::MissingKey => "idempotency-key-missing",
            Self::BadKey(_) => "idempotency-key-malformed",
            Self::PathOutside(_) => "proxy-path-outside-target",
            Self::TooLarge(_) => "body-too-large",
            Self::Reused => "idempotency-key-reused",
            Self::InFlight { .. } => "idempotency-key-in-flight",
            Self::OutcomeUnknown { .. } => "idempotency-key-outcome-unknown",
            Self::Closed { .. } => "idempotency-key-closed",
            Self::AnswerExpired { .. } => "idempotency-key-answer-expired",
            Self::ActionsDisabled(_) => "actions-disabled",
            Self::TargetBusy(_) => "target-busy",
            Self::NotSent(_) => "upstream-unreachable",
            Self::LostAfterSend(_) => "upstream-outcome-unknown",
            Self::AnswerUnreadable { .. } => "upstream-answer-unreadable",
            Self::Store(_) => "internal",
        }
    }

    /// The header the problem is about, when one is.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::MissingKey | Self::BadKey(_) | Self::Reused => Some(super::key::HEADER),
            Self::PathOutside(_) => Some("path"),
            _ => None,
        }
    }

    /// Seconds a caller should wait before trying again, when it should.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Self::InFlight { retry_after_secs } => Some(*retry_after_secs),
            Self::ActionsDisabled(_) | Self::TargetBusy(_) => Some(5),
            _ => None,
        }
    }
}
