//! `GET /`: a small page for whoever opens the service's address in a
//! browser, naming what is there: the console, the API document, health
//! and readiness. It shows no data and needs no sign-in.

use axum::http::StatusCode;
use axum::response::Response;
use maud::html;

/// The start page.
pub async fn show() -> Response {
    let version = env!("CARGO_PKG_VERSION");
    let page = html! {
        (maud::DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "oncegate" }
                link rel="stylesheet" href=(crate::approval::pages::STYLESHEET);
            }
            body {
                h1 { "oncegate " small { (version) } }
                p { "Makes side-effecting workflow automation safe to retry." }
                ul {
                    li { a href="/ui" { "Operator console" } " (sign in with an operator token)" }
                    li { a href="/openapi.json" { "API document" } " (OpenAPI 3.1, " code { "/openapi.json" } ")" }
                    li { a href="/healthz" { "Health" } " and " a href="/readyz" { "readiness" } }
                }
            }
        }
    };
    crate::approval::pages::respond(StatusCode::OK, page)
}
