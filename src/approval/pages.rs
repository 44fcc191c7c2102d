//! The approval pages, server-rendered. Every value is escaped by `maud`
//! (model output is untrusted text); no script runs, the only asset is the
//! service's own stylesheet, and the security headers ([`POLICY`]) forbid
//! inline scripts and styles.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};
use serde_json::Value;

use super::{Challenge, ChallengeState, Refusal};
use crate::clock::to_datetime;

/// The pages' stylesheet, served at [`STYLESHEET`] (the security policy
/// allows no inline style).
pub const CSS: &str = include_str!("pages.css");

/// Where [`CSS`] is served.
pub const STYLESHEET: &str = "/assets/pages.css";

/// The security policy of every page: nothing runs and nothing is fetched
/// but the service's own stylesheets and images; no inline script, style
/// or event attribute; forms post only to the service; no framing.
pub const POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self' data:; \
    form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The page frame shared by the approval and console pages.
pub fn layout(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · oncegate" }
                link rel="stylesheet" href=(STYLESHEET);
            }
            body { main { (body) } }
        }
    }
}

/// `303 See Other` to a local path (after a command: post, redirect, get).
pub fn see_other(to: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

/// `response` with the session cookie set (or cleared), when there is one.
pub fn with_cookie(mut response: Response, cookie: Option<HeaderValue>) -> Response {
    if let Some(cookie) = cookie {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

/// An HTML response with the headers every page carries: no caching (the
/// page holds a CSRF token), no referrer (the URL may hold an approval
/// token), no framing, no scripts, nothing fetched from elsewhere.
pub fn respond(status: StatusCode, page: Markup) -> Response {
    let mut response = (status, axum::response::Html(page.into_string())).into_response();
    let h = response.headers_mut();
    for (name, value) in PAGE_HEADERS {
        h.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// The headers of [`respond`].
const PAGE_HEADERS: [(header::HeaderName, &str); 6] = [
    (header::CONTENT_TYPE, "text/html; charset=utf-8"),
    (header::CACHE_CONTROL, "no-store"),
    (header::REFERRER_POLICY, "no-referrer"),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::CONTENT_SECURITY_POLICY, POLICY),
];

/// The sign-in form; with `provider` (an OpenID provider's name), a link
/// to sign in there first.
pub fn login(next: &str, error: Option<&str>, provider: Option<&str>) -> Markup {
    layout(
        "Sign in",
        html! {
            h1 { "Sign in to oncegate" }
            @if let Some(error) = error { p.card.bad role="alert" { (error) } }
            @if let Some(name) = provider {
                p { a.button #oidc href={ "/auth/oidc/start?next=" (urlencode(next)) } { "Sign in with " (name) } }
                p { "Or with a token:" }
            }
            form method="post" action="/login" {
                input type="hidden" name="next" value=(next);
                label for="token" { "Approver or operator token" }
                input #token type="password" name="token" autocomplete="off" required;
                p { button type="submit" { "Sign in" } }
            }
            p { "The token is exchanged once for a session cookie; it is never stored." }
        },
    )
}

/// An OpenID Connect sign-in that did not happen: why, and a way to start
/// again.
pub fn sign_in_failed(reason: &str, next: &str) -> Markup {
    layout(
        "Not signed in",
        html! {
            h1 { "You are not signed in" }
            p.card.bad role="alert" { (reason) }
            p { "Nothing changed: no session was opened." }
            p { a href={ "/login?next=" (urlencode(next)) } { "Back to sign-in" } }
        },
    )
}

/// A page that moves on to `to` by itself (a refresh, not a redirect) or
/// by its link. After an OpenID Connect sign-in the move then starts on
/// this site, so the `SameSite=Strict` session cookie goes with it; after
/// a sign-out that goes on to the provider, no `form-action` rule stands
/// in the way (it would block a form's redirect to another site).
pub fn onward(heading: &str, to: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content={ "0; url=" (to) };
                title { (heading) " · oncegate" }
                link rel="stylesheet" href=(STYLESHEET);
            }
            body { main {
                h1 { (heading) }
                p { a href=(to) { "Continue" } }
            } }
        }
    }
}

/// A refusal: plainly what happened, and that nothing was sent.
pub fn refusal(refusal: &Refusal, sign_in: Option<&str>) -> Markup {
    layout(
        "Not done",
        html! {
            h1 { "Nothing was done" }
            p.card.bad role="alert" { (refusal.to_string()) }
            p { "No effect was sent and nothing changed." }
            @if let Some(next) = sign_in {
                p { a href={ "/login?next=" (urlencode(next)) } { "Sign in" } }
            }
        },
    )
}

/// The confirmation after a decision.
pub fn decided(decision: &str, challenge: &Challenge) -> Markup {
    layout(
        "Decision recorded",
        html! {
            h1 { "Decision recorded: " (decision) }
            @if decision == "approve" {
                p.card.ok { "Approved. The effects are queued and go out once, each with its idempotency key." }
            } @else {
                p.card.ok { "Rejected. Nothing will be sent; the run is closed as failed_terminal." }
            }
            p { "Run " code { (challenge.namespace) " / " (challenge.key) } }
            p { a href="/approvals" { "Back to the approvals inbox" } }
        },
    )
}

/// What the confirmation page shows besides the challenge.
#[derive(Debug)]
pub struct Confirm<'a> {
    /// The challenge.
    pub challenge: &'a Challenge,
    /// The form's action (the link's or the inbox's path).
    pub action: &'a str,
    /// The CSRF token for this session and challenge, when the form is offered.
    pub csrf: Option<String>,
    /// Why the signed-in person may not decide, if so.
    pub barred: Option<Refusal>,
    /// The signed-in person.
    pub subject: &'a str,
}

/// The confirmation page: the approval card, then the form. GET renders it
/// and changes nothing.
pub fn confirm(view: &Confirm<'_>) -> Markup {
    let c = view.challenge;
    let card = |f: &str| c.new.card.get(f).cloned().unwrap_or(Value::Null);
    let text = |f: &str| card(f).as_str().map(str::to_owned);
    layout(
        "Approval",
        html! {
            nav { a href="/approvals" { "Approvals inbox" } span { "Signed in as " strong { (view.subject) } } }
            h1 { "Approve " code { (c.new.operation) } "?" }
            @if let Some(summary) = text("summary") { p { (summary) } }
            div.card {
                table {
                    tr { th { "Idempotency key" } td { code { (c.namespace) " / " (c.key) } } }
                    tr { th { "Source record" } td { (source_link(text("source_url").as_deref())) } }
                    tr { th { "Requested by" } td { (text("requested_by").unwrap_or_else(|| "—".into())) } }
                    tr { th { "Why a person decides" } td { (text("reason").unwrap_or_else(|| "the operation requires approval before it acts".into())) } }
                    tr { th { "Expires" } td { (to_datetime(c.new.expires_at).to_rfc3339()) } }
                    tr { th { "Allowed decisions" } td { @for d in &c.new.decisions { code { (d.as_str()) } " " } } }
                    tr { th { "State" } td { (c.state.as_str()) } }
                }
            }
            h2 { "Model output (untrusted text)" }
            (model_section(&card("model"), &card("output"), &card("validation")))
            h2 { "Proposed effects" }
            p { "Everything below is sent as shown (the target adds its own secret headers). The approval is bound to digest " code { (c.bound_digest().unwrap_or("-")) } "; if an effect changes, the approval is refused." }
            @for e in &c.new.effects { (effect_details(&super::card::ProposedEffect::from(e))) }
            (decision_section(view))
            h2 { "Re-run protocol" }
            ol {
                li { "Retryable recovery: only a failed_retryable run, or one whose processing lease expired, can be claimed again, under the same business key." }
                li { "No replay of settled keys: failed_terminal, awaiting_human, approved and completed keys answer with their state and never start again." }
                li { "Correction or replacement: a new business event with its own upstream key, linked to the original, recorded with the operator and reason, through a fresh approval. Never an ad-hoc suffix, never an edit of this run." }
            }
        },
    )
}

fn decision_section(view: &Confirm<'_>) -> Markup {
    let c = view.challenge;
    html! {
        @if c.state != ChallengeState::Pending {
            p.card.warn role="status" {
                "This approval is " strong { (c.state.as_str()) }
                @if let Some(by) = &c.decided_by { " by " (by) }
                ". Nothing more can be decided here."
            }
        } @else if let Some(barred) = &view.barred {
            p.card.bad role="alert" { (barred.to_string()) }
        } @else if let Some(csrf) = &view.csrf {
            form.card method="post" action=(view.action) {
                input type="hidden" name="csrf" value=(csrf);
                @if let Some(digest) = c.bound_digest() { input type="hidden" name="effects_digest" value=(digest); }
                label for="reason" { "Reason or note (recorded in the audit log)" }
                textarea #reason name="reason" rows="2" maxlength="1000" {}
                p {
                    @for d in &c.new.decisions {
                        button type="submit" name="decision" value=(d.as_str()) { (capitalise(d.as_str())) }
                    }
                }
            }
        }
    }
}

fn model_section(model: &Value, output: &Value, validation: &Value) -> Markup {
    html! {
        @if output.is_null() {
            p { "No model output was recorded for this run." }
        } @else {
            p {
                "Drafted by " code { (model.get("model").and_then(Value::as_str).unwrap_or("?")) }
                " revision " code { (model.get("revision").and_then(Value::as_str).unwrap_or("?")) }
                " (" (model.get("provider_class").and_then(Value::as_str).unwrap_or("?")) ")"
            }
            pre { (serde_json::to_string_pretty(output).unwrap_or_default()) }
            @let valid = validation.get("valid").and_then(Value::as_bool).unwrap_or(false);
            @if valid {
                p { "Validation: passed (attempt " (validation.get("attempt").and_then(Value::as_i64).unwrap_or(0)) ")." }
            } @else {
                p.card.bad { "Validation errors:" pre { (validation.get("violations").map(Value::to_string).unwrap_or_default()) } }
            }
        }
    }
}

fn source_link(url: Option<&str>) -> Markup {
    match url {
        Some(u) if u.starts_with("https://") || u.starts_with("http://") => {
            html! { a href=(u) rel="noopener noreferrer" { (u) } }
        }
        Some(u) => html! { (u) },
        None => html! { "—" },
    }
}

fn preview(body: &str) -> String {
    const MAX: usize = 4096;
    match serde_json::from_str::<Value>(body) {
        Ok(v) => truncate(&serde_json::to_string_pretty(&v).unwrap_or_default(), MAX),
        Err(_) => truncate(body, MAX),
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} more bytes)", &text[..end], text.len() - end)
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// Percent-encodes a path for a query parameter.
pub fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Everything one proposed effect will send, for the confirmation page and
/// the console's inbox alike.
pub fn effect_details(e: &super::card::ProposedEffect) -> Markup {
    let json = |v: &Option<Value>| v.as_ref().map(Value::to_string);
    html! {
        table.kv {
            tr { th scope="row" { "Effect" } td { code { (e.effect_type) } " → " (e.target) } }
            tr { th scope="row" { "Request" } td { code { (e.method) " " (e.url) } } }
            tr { th scope="row" { "Headers" } td {
                @if e.headers.is_empty() { "none" }
                @for (name, value) in &e.headers { code { (name) ": " (value) } " " }
            } }
            tr { th scope="row" { "Body" } td {
                @match &e.body { Some(body) => pre { (preview(body)) }, None => "none" }
            } }
            tr { th scope="row" { "Idempotency key" } td { code { (e.idempotency_key) } } }
            tr { th scope="row" { "Not before" } td { (e.not_before.as_deref().unwrap_or("—")) } }
            tr { th scope="row" { "Rejection rule" } td { code { (json(&e.reject).unwrap_or_else(|| "—".into())) } } }
            tr { th scope="row" { "External id from" } td { code { (json(&e.external_id).unwrap_or_else(|| "—".into())) } } }
            tr { th scope="row" { "Probe URL" } td { code { (e.probe_url.as_deref().unwrap_or("—")) } } }
        }
    }
}
