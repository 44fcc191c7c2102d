//! How each part's refusals answer over HTTP: every use case has its own
//! error type, and each maps onto the one [`ApiError`] here.

use super::error::ApiError;

impl From<crate::ingress::AcceptError> for ApiError {
    fn from(err: crate::ingress::AcceptError) -> Self {
        use crate::ingress::AcceptError as E;
        match err {
            E::UnknownSource(_) => Self::NotFound(err.to_string()),
            E::Signature(_) => Self::Unauthenticated(err.to_string()),
            E::Invalid { field, problem } => Self::invalid(field, problem),
            E::InFlight { .. } => Self::InFlight(err.to_string()),
            E::Conflict {
                namespace,
                key,
                stored_hash,
                offered_hash,
            } => Self::PayloadConflict {
                namespace,
                key,
                stored_hash,
                offered_hash,
            },
            E::Store(err) => err.into(),
        }
    }
}

impl From<crate::approval::effects::EffectRefused> for ApiError {
    fn from(err: crate::approval::effects::EffectRefused) -> Self {
        use crate::approval::effects::EffectRefused as E;
        match err {
            E::Invalid(e) => Self::invalid(e.field, e.problem),
            E::Gated(detail) => Self::Gated(detail),
        }
    }
}

impl From<crate::outbox::commit::CancelError> for ApiError {
    fn from(err: crate::outbox::commit::CancelError) -> Self {
        use crate::outbox::commit::CancelError as E;
        match err {
            E::NotFound(_) => Self::NotFound(err.to_string()),
            E::NotPending { .. } => Self::InFlight(err.to_string()),
            E::Store(err) => err.into(),
        }
    }
}

impl From<crate::ledger::service::LedgerError> for ApiError {
    fn from(err: crate::ledger::service::LedgerError) -> Self {
        use crate::ledger::service::LedgerError as E;
        match err {
            E::PayloadConflict { run, offered_hash } => Self::PayloadConflict {
                namespace: run.namespace.to_string(),
                key: run.key.to_string(),
                stored_hash: run.payload_hash.to_string(),
                offered_hash,
            },
            E::Store(err) => err.into(),
        }
    }
}

impl From<crate::criteria::FilterError> for ApiError {
    fn from(err: crate::criteria::FilterError) -> Self {
        Self::invalid(err.field, err.problem)
    }
}

impl From<crate::ingress::ForwardError> for ApiError {
    fn from(err: crate::ingress::ForwardError) -> Self {
        use crate::ingress::ForwardError as E;
        let detail = err.to_string();
        let slug = match err {
            E::NotFound(_) => return Self::NotFound(detail),
            E::Store(e) => return e.into(),
            E::NotDuplicateOf { .. } => "not-duplicate-of",
            E::AlreadyForwarded { .. } => "already-forwarded",
            E::NotRedeliverable { .. } => "not-redeliverable",
            E::BodyUnavailable(_) => "body-unavailable",
            E::SourceGone(_) => "source-gone",
            E::KeyTaken { .. } => "key-taken",
            E::Changed(_) => "delivery-changed",
            E::Unusable(_) => "key-unusable",
        };
        Self::Refused {
            slug,
            detail,
            state: None,
        }
    }
}

impl From<crate::deadletter::plan::PlanError> for ApiError {
    fn from(err: crate::deadletter::plan::PlanError) -> Self {
        use crate::deadletter::plan::PlanError as E;
        match err {
            E::Invalid { field, problem } => Self::invalid(field, problem),
            E::Replay(err) => super::deadletters::actions::replay_error(err),
            E::Store(err) => err.into(),
        }
    }
}

impl From<crate::approval::gate::GateError> for ApiError {
    fn from(err: crate::approval::gate::GateError) -> Self {
        use crate::approval::gate::GateError as E;
        match err {
            E::Invalid { field, problem } => Self::invalid(field, problem),
            E::OutputNotValidated(_) => Self::Conflict {
                slug: "output-not-validated",
                detail: err.to_string(),
            },
            E::OutputInvalid {
                violations,
                attempt,
                repairs_left,
                exhausted,
            } => Self::OutputInvalid {
                violations,
                attempt,
                repairs_left,
                exhausted,
            },
            E::Misconfigured(what) => Self::Internal(what.into()),
            E::Store(err) => err.into(),
        }
    }
}

impl From<crate::deadletter::bulk::StartError> for ApiError {
    fn from(err: crate::deadletter::bulk::StartError) -> Self {
        use crate::deadletter::bulk::StartError as E;
        match err {
            E::Plan(err) => err.into(),
            E::Store(err) => err.into(),
        }
    }
}

impl From<crate::approval::decide::DecideError> for ApiError {
    fn from(err: crate::approval::decide::DecideError) -> Self {
        use crate::approval::decide::DecideError as E;
        match err {
            E::Corrupt(err) => err.into(),
            E::Store(err) => err.into(),
        }
    }
}

impl From<crate::approval::card::UnknownState> for ApiError {
    fn from(err: crate::approval::card::UnknownState) -> Self {
        Self::invalid("state", err.to_string())
    }
}

impl From<crate::proxy::ProxyError> for ApiError {
    fn from(err: crate::proxy::ProxyError) -> Self {
        use crate::proxy::ProxyError as E;
        match err {
            E::Store(err) => err.into(),
            E::UnknownProxy(_) => Self::NotFound(err.to_string()),
            err => Self::Refusal {
                status: axum::http::StatusCode::from_u16(err.status())
                    .unwrap_or(axum::http::StatusCode::BAD_GATEWAY),
                slug: err.slug(),
                field: err.field(),
                retry_after: err.retry_after_secs(),
                detail: err.to_string(),
            },
        }
    }
}

impl From<crate::proxy::resolve::ResolveError> for ApiError {
    fn from(err: crate::proxy::resolve::ResolveError) -> Self {
        use crate::proxy::resolve::ResolveError as E;
        match err {
            E::Store(err) => err.into(),
            E::NotUnknown { .. } => Self::Conflict {
                slug: "idempotency-key-not-unknown",
                detail: err.to_string(),
            },
            E::Refused(detail) => Self::Conflict {
                slug: "dead-letter-refused",
                detail,
            },
        }
    }
}

impl From<crate::tokens::TokenError> for ApiError {
    fn from(err: crate::tokens::TokenError) -> Self {
        use crate::tokens::TokenError as E;
        match err {
            E::Invalid { field, message } => Self::invalid(field, message),
            E::Exceeds(detail) => Self::Refusal {
                status: axum::http::StatusCode::FORBIDDEN,
                slug: "token-exceeds-creator",
                detail,
                field: None,
                retry_after: None,
            },
            E::NotFound(_) => Self::NotFound(err.to_string()),
            E::Conflict(detail) => Self::Conflict {
                slug: "token-not-revocable",
                detail,
            },
            E::Store(err) => err.into(),
        }
    }
}
