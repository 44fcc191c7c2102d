//! The budget of bytes held for request bodies that are not authenticated
//! yet: a webhook delivery is read whole before its signature can be
//! checked, and the sign-in and approval forms before their session is.
//!
//! A request reserves its body's size (its `Content-Length`, else the
//! route's limit) from one semaphore of bytes before the handler reads it,
//! and holds the reservation until the response; when the budget cannot
//! cover it, the request is answered 503 `body-budget-exhausted` with
//! `Retry-After` and its body is never read. So however many clients send
//! at once, at most `[server] unauthenticated_body_budget_bytes` of such
//! bodies are in memory.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use crate::api::ApiError;
use crate::state::AppState;

/// The shared budget and the app (for the routes' limits).
#[derive(Clone)]
pub(super) struct BodyBudget {
    app: AppState,
    bytes: Arc<Semaphore>,
    total: usize,
}

impl BodyBudget {
    /// The budget `[server]` configures.
    pub(super) fn new(app: AppState) -> Self {
        let total = app.config.server.unauthenticated_body_budget_bytes;
        Self {
            app,
            bytes: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// The most this request's body may be: its source's limit for a
    /// webhook, `[server] max_body_bytes` for everything else. `None`
    /// for an unknown source, which is refused before its body is read.
    fn limit(&self, path: &str) -> Option<usize> {
        match path.strip_prefix("/hooks/") {
            Some(source) => self.app.intake().body_limit(source).ok(),
            None => Some(self.app.config.server.max_body_bytes),
        }
    }
}

/// The middleware: reserve, run the request, release.
pub(super) async fn reserve(
    State(budget): State<BodyBudget>,
    req: Request,
    next: Next,
) -> Response {
    let Some(limit) = budget.limit(req.uri().path()) else {
        return next.run(req).await;
    };
    let headers = req.headers();
    let declared = match headers.get(CONTENT_LENGTH) {
        Some(length) => length
            .to_str()
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(limit),
        // Chunked: as much as the limit lets through.
        None if headers.contains_key(TRANSFER_ENCODING) => limit,
        None => 0,
    };
    // A body over the limit is refused (413) by the handler unread.
    let wanted = declared.min(limit);
    if wanted == 0 {
        return next.run(req).await;
    }
    let permits = u32::try_from(wanted).unwrap_or(u32::MAX);
    let Ok(held) = budget.bytes.clone().try_acquire_many_owned(permits) else {
        tracing::warn!(
            wanted,
            budget = budget.total,
            "unauthenticated request bodies fill the budget; answered 503"
        );
        return ApiError::BodyBudget {
            budget: budget.total,
        }
        .into_response();
    };
    let response = next.run(req).await;
    drop(held);
    response
}
