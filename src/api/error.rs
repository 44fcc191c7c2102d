//! The one API error type: every failure becomes RFC 9457 problem+json.
//!
//! Client errors say exactly what is wrong (and which field); server errors
//! say nothing about internals to the client and are logged with their
//! cause chain.

use axum::extract::rejection::JsonRejection;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::ledger::storage::StoreError;
use crate::ledger::{InvalidId, Run};

/// `Result` of the API layer.
pub type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed; `field` names the culprit when known.
    #[error("{detail}")]
    Invalid {
        /// The JSON field or parameter at fault.
        field: Option<String>,
        /// What is wrong.
        detail: String,
    },
    /// No valid bearer token.
    #[error("a valid bearer token is required")]
    Unauthorized,
    /// A webhook's signature was refused.
    #[error("{0}")]
    Unauthenticated(String),
    /// The event is still being handled; the caller should retry later.
    #[error("{0}")]
    InFlight(String),
    /// The operation is gated: its effects go through the gate endpoint.
    #[error("{0}")]
    Gated(String),
    /// The token lacks the scope the route needs.
    #[error("this token's scopes do not include {needed}")]
    Forbidden {
        /// The scopes that would do, in words.
        needed: String,
    },
    /// The run's namespace is outside the token's allow-list, or belongs
    /// to a webhook source (403 with its own slug).
    #[error("{detail}")]
    NamespaceRefused {
        /// `namespace-not-allowed` or `namespace-reserved`.
        slug: &'static str,
        /// Which namespace, and why.
        detail: String,
    },
    /// Nothing exists at that identity.
    #[error("{0}")]
    NotFound(String),
    /// The caller's lease lost the run.
    #[error("{why}")]
    LostOwnership {
        /// The run as it is now, if it exists.
        current: Option<Box<Run>>,
        /// Why.
        why: String,
    },
    /// The same key came with a different payload.
    #[error("key {key} in namespace {namespace} was first claimed with a different payload")]
    PayloadConflict {
        /// The run's namespace.
        namespace: String,
        /// The run's key.
        key: String,
        /// The hash the run holds.
        stored_hash: String,
        /// The hash that was offered.
        offered_hash: String,
    },
    /// The body is larger than the configured limit.
    #[error("the request body is larger than the {limit}-byte limit")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// Unauthenticated request bodies already fill their budget; the
    /// caller should retry later.
    #[error("the server holds as many unauthenticated request bodies as it may ({budget} bytes); retry later")]
    BodyBudget {
        /// `[server] unauthenticated_body_budget_bytes`.
        budget: usize,
    },
    /// The request took longer than the configured timeout.
    #[error("the request did not finish within {0} ms")]
    Timeout(u64),
    /// An operator command does not apply to the dead letter or job as it is now.
    #[error("{detail}")]
    Refused {
        /// The problem type's slug (`already-resolved`, `run-not-dead-lettered`, …).
        slug: &'static str,
        /// What is in the way.
        detail: String,
        /// The run's current state, when it matters.
        state: Option<String>,
    },
    /// A replay of a gated operation needs a new approval challenge.
    #[error("{0}")]
    ReplayRequiresApproval(String),
    /// A state the request needs does not hold (409 with its own slug).
    #[error("{detail}")]
    Conflict {
        /// The problem type slug.
        slug: &'static str,
        /// What is missing.
        detail: String,
    },
    /// Model output broke its operation's schema.
    #[error("the output does not satisfy the operation's schema ({} violations){}", violations.len(),
        if *exhausted { "; the repair bound is spent and the run failed for good" } else { "" })]
    OutputInvalid {
        /// Each violation with its JSON path.
        violations: Vec<crate::validate::Violation>,
        /// Which attempt this was.
        attempt: i64,
        /// Further invalid outputs allowed before the run fails for good.
        repairs_left: i64,
        /// The repair bound was passed: the run is `failed_terminal`.
        exhausted: bool,
    },
    /// An approval decision was refused; nothing was sent.
    #[error("{0}")]
    ApprovalRefused(crate::approval::Refusal),
    /// A refusal whose status and problem type its part chose (the
    /// Idempotency-Key proxy's).
    #[error("{detail}")]
    Refusal {
        /// The HTTP status.
        status: StatusCode,
        /// The problem type's slug.
        slug: &'static str,
        /// What went wrong, and whether anything was sent.
        detail: String,
        /// The header or field at fault, when one is.
        field: Option<&'static str>,
        /// Seconds to wait before retrying, when the caller should.
        retry_after: Option<u64>,
    },
    /// Something on our side failed.
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
    // A database that cannot take a write is a 503, never a 500.
    /// The database is unreachable, restarting, read-only, full or locked:
    /// the request did not go through; the caller should retry later.
    #[error("the database is unavailable; retry later")]
    Unavailable(#[source] StoreError),
}

/// Seconds a client is asked to wait after a 503 `database-unavailable`.
const UNAVAILABLE_RETRY_AFTER_SECS: &str = "2";

impl ApiError {
    /// A 400 about one field.
    pub fn invalid(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::Invalid {
            field: Some(field.into()),
            detail: detail.into(),
        }
    }

    /// The HTTP status this error answers with (the console reuses it).
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::Invalid { .. } => StatusCode::BAD_REQUEST,
            Self::Unauthorized | Self::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Self::InFlight(_) | Self::Gated(_) => StatusCode::CONFLICT,
            Self::Forbidden { .. } | Self::NamespaceRefused { .. } => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::LostOwnership { .. } => StatusCode::CONFLICT,
            Self::PayloadConflict { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            Self::Refused { .. } | Self::ReplayRequiresApproval(_) => StatusCode::CONFLICT,
            Self::Conflict { .. } => StatusCode::CONFLICT,
            Self::OutputInvalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::ApprovalRefused(refusal) => refusal_status(refusal),
            Self::Refusal { status, .. } => *status,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unavailable(_) | Self::BodyBudget { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn slug(&self) -> &'static str {
        match self {
            Self::Invalid { .. } => "invalid-request",
            Self::Unauthorized => "unauthorized",
            Self::Unauthenticated(_) => "signature-refused",
            Self::InFlight(_) => "in-flight",
            Self::Gated(_) => "gated-operation",
            Self::Forbidden { .. } => "forbidden",
            Self::NamespaceRefused { slug, .. } => slug,
            Self::NotFound(_) => "not-found",
            Self::LostOwnership { .. } => "lease-lost",
            Self::PayloadConflict { .. } => "payload-conflict",
            Self::TooLarge { .. } => "body-too-large",
            Self::Timeout(_) => "timeout",
            Self::Refused { slug, .. } => slug,
            Self::ReplayRequiresApproval(_) => "replay-requires-approval",
            Self::Conflict { slug, .. } => slug,
            Self::OutputInvalid { .. } => "output-invalid",
            Self::ApprovalRefused(refusal) => refusal.slug(),
            Self::Refusal { slug, .. } => slug,
            Self::Internal(_) => "internal",
            Self::Unavailable(_) => "database-unavailable",
            Self::BodyBudget { .. } => "body-budget-exhausted",
        }
    }
}

/// An RFC 9457 problem document, with oncegate's extension members.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// `urn:oncegate:problem:<slug>`.
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary of the problem type.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong with this request.
    pub detail: String,
    /// The request field at fault, when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The run's current state (409, 422).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The run's current fencing version (409).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
    /// Schema violations of model output, each with its JSON path (422).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub violations: Option<Vec<crate::validate::Violation>>,
    /// Which output attempt this was (422).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i64>,
    /// Further invalid outputs allowed before the run fails for good (422).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repairs_left: Option<i64>,
}

/// The HTTP status of each approval refusal.
pub fn refusal_status(refusal: &crate::approval::Refusal) -> StatusCode {
    use crate::approval::Refusal;
    match refusal {
        Refusal::NotSignedIn => StatusCode::UNAUTHORIZED,
        Refusal::Invalid => StatusCode::NOT_FOUND,
        Refusal::Used(_) | Refusal::EffectsChanged => StatusCode::CONFLICT,
        Refusal::Expired => StatusCode::GONE,
        Refusal::WrongDecision => StatusCode::BAD_REQUEST,
        Refusal::NotApprover
        | Refusal::NotInAudience
        | Refusal::MissingRole(_)
        | Refusal::SsoRequired
        | Refusal::SelfApproval(_)
        | Refusal::BadCsrf => StatusCode::FORBIDDEN,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if let Self::Internal(source) = &self {
            tracing::error!(error = %cause_chain(source.as_ref()), "request failed");
        }
        if let Self::Unavailable(source) = &self {
            tracing::warn!(error = %cause_chain(source), "database unavailable; answered 503");
        }
        let (field, state, version) = match &self {
            Self::Invalid { field, .. } => (field.clone(), None, None),
            Self::LostOwnership { current, .. } => (
                None,
                current.as_ref().map(|r| r.state.to_string()),
                current.as_ref().map(|r| r.version.get()),
            ),
            Self::Refused { state, .. } => (None, state.clone(), None),
            Self::Refusal { field, .. } => (field.map(str::to_owned), None, None),
            Self::OutputInvalid {
                exhausted: true, ..
            } => (None, Some("failed_terminal".to_owned()), None),
            _ => (None, None, None),
        };
        let (violations, attempt, repairs_left) = match &self {
            Self::OutputInvalid {
                violations,
                attempt,
                repairs_left,
                ..
            } => (
                Some(violations.clone()),
                Some(*attempt),
                Some(*repairs_left),
            ),
            _ => (None, None, None),
        };
        let problem = Problem {
            kind: format!("urn:oncegate:problem:{}", self.slug()),
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            status: status.as_u16(),
            detail: self.to_string(),
            field,
            state,
            version,
            violations,
            attempt,
            repairs_left,
        };
        let mut response = (status, axum::Json(problem)).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if matches!(self, Self::Unauthorized) {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if matches!(self, Self::Unavailable(_) | Self::BodyBudget { .. }) {
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(UNAVAILABLE_RETRY_AFTER_SECS),
            );
        }
        if let Self::Refusal {
            retry_after: Some(secs),
            ..
        } = &self
        {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(*secs));
        }
        response
    }
}

/// An error and its causes, joined by `: ` (for the log line of a 5xx).
fn cause_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut chain = err.to_string();
    let mut cause = err.source();
    while let Some(c) = cause {
        chain.push_str(": ");
        chain.push_str(&c.to_string());
        cause = c.source();
    }
    chain
}

impl From<InvalidId> for ApiError {
    fn from(err: InvalidId) -> Self {
        Self::invalid(err.field, err.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::LostOwnership { current, why } => Self::LostOwnership { current, why },
            other if other.is_unavailable() => Self::Unavailable(other),
            other => Self::Internal(Box::new(other)),
        }
    }
}

impl ApiError {
    /// Maps a JSON body rejection; `limit` is the configured body limit.
    pub fn from_json_rejection(rejection: JsonRejection, limit: usize) -> Self {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return Self::TooLarge { limit };
        }
        let detail = match &rejection {
            JsonRejection::MissingJsonContentType(_) => {
                "the body must be JSON with Content-Type: application/json".to_owned()
            }
            other => other.body_text(),
        };
        Self::Invalid {
            field: None,
            detail,
        }
    }
}
