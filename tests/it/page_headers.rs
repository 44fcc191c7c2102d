//! Every HTML page over the real server carries the security headers
//! (a policy without inline script or style, no framing, no sniffing, no
//! referrer) and holds no inline script, style or event attribute; its
//! stylesheet is served from the same origin. The console's tokens page:
//! list, make (the token shown once), revoke, each form bound to CSRF.

use crate::approvals::Browser;
use crate::harness::Backend;
use crate::tokens::{admins, status_of, Admins};

/// Checks one HTML answer's headers and body; returns the stylesheets it links.
fn check_page(path: &str, headers: &reqwest::header::HeaderMap, html: &str) -> Vec<String> {
    let h = |name: &str| {
        headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    assert!(h("content-type").starts_with("text/html"), "{path}");
    let csp = h("content-security-policy");
    for part in [
        "default-src 'none'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'self'",
    ] {
        assert!(csp.contains(part), "{path}: {csp} lacks {part}");
    }
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("script-src"),
        "{path}: {csp}"
    );
    assert_eq!(h("x-content-type-options"), "nosniff", "{path}");
    assert_eq!(h("referrer-policy"), "no-referrer", "{path}");
    assert_eq!(h("x-frame-options"), "DENY", "{path}");
    let lower = html.to_ascii_lowercase();
    assert!(!lower.contains("<script"), "{path} has a script");
    assert!(
        !lower.contains("<style"),
        "{path} has an inline style element"
    );
    assert!(!lower.contains(" style="), "{path} has a style attribute");
    assert!(
        !lower.contains("javascript:"),
        "{path} has a javascript: URL"
    );
    let events = regex_lite_events(&lower);
    assert!(events.is_empty(), "{path} has event attributes: {events:?}");
    lower
        .match_indices("<link rel=\"stylesheet\" href=\"")
        .map(|(at, m)| lower[at + m.len()..].split('"').next().unwrap().to_owned())
        .collect()
}

/// ` on…=` attributes (`onclick=`, `onload=`, …) in lowercase HTML.
fn regex_lite_events(html: &str) -> Vec<String> {
    html.match_indices(" on")
        .filter_map(|(at, _)| {
            let rest = &html[at + 3..];
            let name: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
            (!name.is_empty() && rest[name.len()..].starts_with('=')).then(|| format!("on{name}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_html_page_carries_the_security_headers() {
    let Admins { app, root, .. } = admins(Backend::Sqlite).await;
    let anonymous = Browser::anonymous(&app);
    let admin = Browser::login(&app, &root).await;
    let mut sheets = Vec::new();
    let pages: [(&Browser, &str, u16); 11] = [
        (&anonymous, "/", 200),
        (&anonymous, "/login", 200),
        (
            &anonymous,
            "/approve/not-a-real-link-token-at-all-xxxxxxxxxxxxx",
            401,
        ),
        (
            &admin,
            "/approve/not-a-real-link-token-at-all-xxxxxxxxxxxxx",
            404,
        ),
        (&admin, "/approvals/no-such-challenge", 404),
        (&admin, "/ui", 200),
        (&admin, "/ui/runs", 200),
        (&admin, "/ui/approvals", 200),
        (&admin, "/ui/dead-letters", 200),
        (&admin, "/ui/actions", 200),
        (&admin, "/ui/tokens", 200),
    ];
    for (who, path, want) in pages {
        let resp = who.request_get(path).await;
        assert_eq!(resp.status().as_u16(), want, "{path}");
        let headers = resp.headers().clone();
        let html = resp.text().await.unwrap();
        let linked = check_page(path, &headers, &html);
        assert!(!linked.is_empty(), "{path} links its stylesheet");
        sheets.extend(linked);
    }
    sheets.sort();
    sheets.dedup();
    assert_eq!(sheets, ["/assets/console.css", "/assets/pages.css"]);
    for sheet in sheets {
        let resp = anonymous.request_get(&sheet).await;
        assert_eq!(resp.status(), 200, "{sheet}");
        assert!(resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/css"));
        assert_eq!(resp.headers()["x-content-type-options"], "nosniff");
        assert!(resp.text().await.unwrap().contains("body{"), "{sheet}");
    }
    app.stop().await;
}

fn csrf_in(page: &str, action: &str) -> String {
    let form = page
        .find(&format!("action=\"{action}\""))
        .unwrap_or_else(|| panic!("a form posting to {action}"));
    let rest = &page[form..];
    let at = rest.find("name=\"csrf\" value=\"").unwrap() + 19;
    rest[at..].split('"').next().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_makes_shows_once_and_revokes_tokens() {
    let Admins { app, root, carol } = admins(Backend::Sqlite).await;
    let ops = Browser::login(&app, &app.operator).await;
    assert_eq!(
        ops.get("/ui/tokens").await.0,
        403,
        "operators are not admins"
    );
    let admin = Browser::login(&app, &root).await;
    let (status, page) = admin.get("/ui/tokens").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("config file") && page.contains("carol"),
        "config tokens listed"
    );
    let csrf = csrf_in(&page, "/ui/tokens");

    let fields = |csrf: &str| {
        vec![
            ("csrf", csrf.to_owned()),
            ("subject", "console-made".to_owned()),
            ("scope_operator", "on".to_owned()),
            ("namespaces", "crm, billing:*".to_owned()),
        ]
    };
    let post = |pairs: Vec<(&'static str, String)>| {
        let admin = &admin;
        async move {
            let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            admin.post_form("/ui/tokens", &pairs).await
        }
    };
    let resp = post(fields("wrong")).await;
    assert_eq!(resp.status(), 403, "a bad CSRF token makes nothing");
    assert_eq!(app.db.count("SELECT COUNT(*) FROM api_tokens").await, 0);

    let resp = post(fields(&csrf)).await;
    assert_eq!(resp.status(), 200);
    let shown = resp.text().await.unwrap();
    let at = shown.find("id=\"token\"").expect("the token field");
    let value_at = shown[at..].find("value=\"").unwrap() + at + 7;
    let secret = shown[value_at..].split('"').next().unwrap().to_owned();
    assert!(secret.starts_with("og_"), "{secret}");
    assert_eq!(
        status_of(&app.base, &secret).await,
        403,
        "it works (operator, not admin)"
    );
    let (_, list) = admin.get("/ui/tokens").await;
    assert!(
        list.contains("console-made") && !list.contains(&secret),
        "listed, never shown again"
    );
    assert!(list.contains("crm, billing:*"));

    // Carol (crm only) cannot make a token for every namespace here either.
    let carol_session = Browser::login(&app, &carol).await;
    let (_, carol_page) = carol_session.get("/ui/tokens").await;
    let carol_csrf = csrf_in(&carol_page, "/ui/tokens");
    let resp = carol_session
        .post_form(
            "/ui/tokens",
            &[
                ("csrf", carol_csrf.as_str()),
                ("subject", "wide"),
                ("scope_operator", "on"),
            ],
        )
        .await;
    assert_eq!(resp.status(), 403, "more than carol holds");
    assert_eq!(app.db.count("SELECT COUNT(*) FROM api_tokens").await, 1);

    let id = app.db.text("SELECT id FROM api_tokens").await;
    let action = format!("/ui/tokens/{id}/revoke");
    let resp = admin.post_form(&action, &[("csrf", csrf.as_str())]).await;
    assert_eq!(
        resp.status(),
        403,
        "the create form's token does not revoke"
    );
    assert_eq!(status_of(&app.base, &secret).await, 403, "still works");
    let revoke_csrf = csrf_in(&list, &action);
    let resp = admin
        .post_form(&action, &[("csrf", revoke_csrf.as_str())])
        .await;
    assert_eq!(resp.status(), 303);
    assert_eq!(status_of(&app.base, &secret).await, 401, "revoked");
    let kinds = app
        .db
        .texts(&format!("SELECT kind || ' by ' || actor FROM audit_events WHERE run_key = 'tokens:{id}' ORDER BY seq"))
        .await;
    assert_eq!(kinds, ["token_created by root", "token_revoked by root"]);
    app.stop().await;
}
