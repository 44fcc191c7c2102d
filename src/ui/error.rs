//! Why a console page could not be shown or a command not done, as a
//! plain page: what happened, and that nothing changed where that holds.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::html;

use super::frame::bare;
use crate::approval::pages::respond;
use crate::deadletter::bulk::StartError;
use crate::deadletter::plan::PlanError;
use crate::deadletter::replay::ReplayError;
use crate::ingress::ForwardError;
use crate::ledger::storage::StoreError;

/// A console failure.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    /// The request names nothing that exists.
    #[error("{0}")]
    NotFound(String),
    /// A parameter or form field is malformed.
    #[error("{0}")]
    Invalid(String),
    /// The signed-in person lacks the scope.
    #[error("{0}")]
    Forbidden(String),
    /// The form's CSRF token is missing or not this session's for this action.
    #[error("the form's security token is missing, expired or meant for another action; nothing was changed. Go back, reload the page and try again")]
    BadCsrf,
    /// The command does not apply to the object as it is now.
    #[error("{0}")]
    Refused(String),
    /// The store failed.
    #[error("the database failed")]
    Store(#[from] StoreError),
}

/// `Result` of the console.
pub type Result<T, E = UiError> = std::result::Result<T, E>;

impl UiError {
    fn status(&self) -> StatusCode {
        match self {
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Invalid(_) => StatusCode::BAD_REQUEST,
            Self::Forbidden(_) | Self::BadCsrf => StatusCode::FORBIDDEN,
            Self::Refused(_) => StatusCode::CONFLICT,
            Self::Store(e) if e.is_unavailable() => StatusCode::SERVICE_UNAVAILABLE,
            Self::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<crate::tokens::TokenError> for UiError {
    fn from(err: crate::tokens::TokenError) -> Self {
        use crate::tokens::TokenError as E;
        match err {
            E::Invalid { .. } => Self::Invalid(err.to_string()),
            E::Exceeds(detail) => Self::Forbidden(detail),
            E::NotFound(_) => Self::NotFound(err.to_string()),
            E::Conflict(detail) => Self::Refused(detail),
            E::Store(e) => Self::Store(e),
        }
    }
}

impl From<ForwardError> for UiError {
    fn from(err: ForwardError) -> Self {
        match err {
            ForwardError::Store(e) => Self::Store(e),
            ForwardError::NotFound(_) => Self::NotFound(err.to_string()),
            other => Self::Refused(format!("{other}; nothing was changed")),
        }
    }
}

impl From<PlanError> for UiError {
    fn from(err: PlanError) -> Self {
        match err {
            PlanError::Invalid { problem, .. } => Self::Invalid(problem),
            PlanError::Replay(ReplayError::Store(e)) | PlanError::Store(e) => Self::Store(e),
            PlanError::Replay(other) => Self::Refused(other.to_string()),
        }
    }
}

impl From<StartError> for UiError {
    fn from(err: StartError) -> Self {
        match err {
            StartError::Plan(e) => e.into(),
            StartError::Store(e) => Self::Store(e),
        }
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let detail = if status.is_server_error() {
            tracing::error!(error = ?self, "console request failed");
            "Something failed on the server; nothing more is known here. The service log has \
             the cause. Try again in a moment."
                .to_owned()
        } else {
            self.to_string()
        };
        let title = status.canonical_reason().unwrap_or("Error");
        let page = bare(
            title,
            html! {
                h1 { (title) }
                p.flash.bad role="alert" { (detail) }
                p { a href="/ui" { "Back to the console" } }
            },
        );
        respond(status, page)
    }
}
