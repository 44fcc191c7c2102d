//! The frame every console page shares: the head (the served stylesheet,
//! viewport, optional refresh), the navigation bar with sign-out, and the
//! small formatting helpers the pages use for times, ages and states.

use maud::{html, Markup, DOCTYPE};

use crate::approval::pages::urlencode;
use crate::clock::{to_datetime, Millis};

/// The console's stylesheet, embedded in the binary and served at
/// [`STYLESHEET`] (the pages' security policy allows no inline style).
pub const CSS: &str = include_str!("console.css");

/// Where [`CSS`] is served.
pub const STYLESHEET: &str = "/assets/console.css";

/// A section of the console, for the navigation bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    /// `/ui`.
    Dashboard,
    /// `/ui/runs`.
    Runs,
    /// `/ui/approvals`.
    Approvals,
    /// `/ui/dead-letters`.
    DeadLetters,
    /// `/ui/deliveries`.
    Deliveries,
    /// `/ui/replay-jobs`.
    Jobs,
    /// `/ui/actions`.
    Actions,
    /// `/ui/tokens` (admins).
    Tokens,
}

const SECTIONS: [(Nav, &str, &str); 8] = [
    (Nav::Dashboard, "/ui", "Dashboard"),
    (Nav::Runs, "/ui/runs", "Runs"),
    (Nav::Approvals, "/ui/approvals", "Approvals"),
    (Nav::DeadLetters, "/ui/dead-letters", "Dead letters"),
    (Nav::Deliveries, "/ui/deliveries", "Deliveries"),
    (Nav::Jobs, "/ui/replay-jobs", "Replay jobs"),
    (Nav::Actions, "/ui/actions", "Actions"),
    (Nav::Tokens, "/ui/tokens", "Tokens"),
];

/// Who the bar shows, and what they may open.
#[derive(Debug)]
pub struct Bar<'a> {
    /// The signed-in subject.
    pub subject: &'a str,
    /// Whether they hold the operator scope (else only the inbox).
    pub operator: bool,
    /// Whether they hold the admin scope (the tokens page).
    pub admin: bool,
    /// The sign-out form's CSRF token.
    pub logout_csrf: String,
}

/// What a page puts in its frame besides the body.
#[derive(Debug, Default)]
pub struct Head {
    /// Reload the page every this many seconds (progress pages).
    pub refresh_secs: Option<u32>,
}

fn head(title: &str, extra: &Head) -> Markup {
    html! {
        meta charset="utf-8";
        meta name="viewport" content="width=device-width, initial-scale=1";
        @if let Some(secs) = extra.refresh_secs {
            meta http-equiv="refresh" content=(secs);
        }
        title { (title) " · oncegate console" }
        link rel="stylesheet" href=(STYLESHEET);
    }
}

/// A full console page: bar, navigation, body.
pub fn page(title: &str, active: Nav, bar: &Bar<'_>, extra: &Head, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head { (head(title, extra)) }
            body {
                header.top {
                    a.brand href="/ui" { "oncegate" }
                    nav aria-label="Console sections" {
                        ul {
                            @for (section, href, label) in SECTIONS {
                                @if (bar.operator && section != Nav::Tokens) || bar.admin || section == Nav::Approvals {
                                    li {
                                        a href=(href) aria-current=[(section == active).then_some("page")] { (label) }
                                    }
                                }
                            }
                        }
                    }
                    div.who {
                        span { "Signed in as " strong { (bar.subject) } }
                        form method="post" action="/logout" {
                            input type="hidden" name="csrf" value=(bar.logout_csrf);
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main id="main" { (body) }
            }
        }
    }
}

/// A page without the bar (errors, before anyone is known).
pub fn bare(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head { (head(title, &Head::default())) }
            body { main { (body) } }
        }
    }
}

/// An absolute time, UTC, to the second.
pub fn when(ms: Millis) -> String {
    to_datetime(ms).format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// An RFC 3339 time (as the audit timeline gives them) in the console's
/// format, to the millisecond; other text is shown as it is.
pub fn stamp(rfc3339: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(rfc3339).map_or_else(
        |_| rfc3339.to_owned(),
        |t| {
            t.with_timezone(&chrono::Utc)
                .format("%Y-%m-%d %H:%M:%S%.3f UTC")
                .to_string()
        },
    )
}

/// A duration in words: `45 s`, `12 min`, `3.5 h`, `2.0 d`.
pub fn span(ms: i64) -> String {
    let s = ms.max(0) as f64 / 1000.0;
    if s < 90.0 {
        format!("{s:.0} s")
    } else if s < 90.0 * 60.0 {
        format!("{:.0} min", s / 60.0)
    } else if s < 48.0 * 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.1} d", s / 86_400.0)
    }
}

/// A time with its age: `2025-01-02 10:00:00 UTC (3 min ago)`.
pub fn at(ms: Millis, now: Millis) -> Markup {
    let rel = if ms <= now {
        format!("{} ago", span(now - ms))
    } else {
        format!("in {}", span(ms - now))
    };
    html! { time datetime=(to_datetime(ms).to_rfc3339()) { (when(ms)) } " " span.muted { "(" (rel) ")" } }
}

/// A state as a badge (the class only ever holds a known state name).
pub fn badge(state: &str) -> Markup {
    let class: String = state
        .chars()
        .filter(|c| c.is_ascii_lowercase() || *c == '_')
        .collect();
    html! { span class={ "badge " (class) } { (state) } }
}

/// The console link to a run's page.
pub fn run_href(namespace: &str, key: &str) -> String {
    format!(
        "/ui/run?namespace={}&key={}",
        urlencode(namespace),
        urlencode(key)
    )
}

/// A run's identity, linked to its page.
pub fn run_link(namespace: &str, key: &str) -> Markup {
    html! { a href=(run_href(namespace, key)) { code { (namespace) " / " (key) } } }
}

/// A value or a dash.
pub fn or_dash(value: Option<&str>) -> Markup {
    match value {
        Some(v) if !v.is_empty() => html! { (v) },
        _ => html! { span.muted { "—" } },
    }
}

/// A link to a source record when it is a web address, else the text.
pub fn source_link(url: Option<&str>) -> Markup {
    match url {
        Some(u) if u.starts_with("https://") || u.starts_with("http://") => {
            html! { a href=(u) rel="noopener noreferrer" { (u) } }
        }
        other => or_dash(other),
    }
}

/// JSON shown as escaped, pretty text.
pub fn json_block(value: &serde_json::Value) -> Markup {
    html! { pre { (serde_json::to_string_pretty(value).unwrap_or_default()) } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_naturally() {
        assert_eq!(span(45_000), "45 s");
        assert_eq!(span(12 * 60_000), "12 min");
        assert_eq!(span(3 * 3_600_000 + 1_800_000), "3.5 h");
        assert_eq!(span(3 * 86_400_000), "3.0 d");
        assert_eq!(span(-5), "0 s");
    }

    #[test]
    fn badges_never_carry_markup_in_their_class() {
        let html = badge("x\" onclick=\"y").into_string();
        assert!(html.contains("class=\"badge xonclicky\""), "{html}");
        assert!(html.contains("x&quot; onclick=&quot;y"), "{html}");
    }

    #[test]
    fn stamps_are_utc_to_the_millisecond() {
        assert_eq!(
            stamp("2025-01-02T10:00:00.123+01:00"),
            "2025-01-02 09:00:00.123 UTC"
        );
        assert_eq!(stamp("garbage"), "garbage");
    }

    #[test]
    fn run_links_encode_keys() {
        assert_eq!(
            run_href("crm", "a/b?c#d&e"),
            "/ui/run?namespace=crm&key=a%2Fb%3Fc%23d%26e"
        );
    }
}
