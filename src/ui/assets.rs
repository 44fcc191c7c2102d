//! The stylesheets, embedded in the binary and served from this origin:
//! the pages' security policy (`style-src 'self'`) allows no inline style,
//! so the pages link these instead.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

/// `GET /assets/console.css`.
pub async fn console() -> Response {
    css(super::frame::CSS)
}

/// `GET /assets/pages.css`: the approval, sign-in and start pages.
pub async fn pages() -> Response {
    css(crate::approval::pages::CSS)
}

fn css(body: &'static str) -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/css; charset=utf-8"),
            ),
            // Changes with the binary only; an hour bounds a stale look
            // after an upgrade.
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=3600"),
            ),
        ],
        body,
    )
        .into_response()
}
