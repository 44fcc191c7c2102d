//! Issue 25's approval findings, through the real server (both stores):
//! the card shows every effect field that will be sent and the approval is
//! bound to their digest (M4); approve_by_exception judges the effects,
//! not only the output (M5); identities compare normalised (L3).

use serde_json::{json, Value};

use crate::approvals::{claim, csrf_of, gate, gated_app, gated_app_with, outbox_rows, Browser};
use crate::harness::{on_both_backends, Backend, TestApp};

fn link_of(app: &TestApp, body: &Value) -> String {
    body["approval_url"]
        .as_str()
        .unwrap()
        .strip_prefix(&app.base)
        .unwrap()
        .to_owned()
}

fn loaded_effect(base: &str) -> Value {
    json!([{"operation": "send_reply", "effect_type": "reply", "target": "mail",
        "path": "/send", "headers": {"X-HTTP-Method-Override": "DELETE"},
        "body": {"to": "customer@example.com", "text": "We refunded you."},
        "reject": {"pointer": "/status", "equals": "refused"},
        "external_id": {"pointer": "/id"},
        "probe_url": format!("{base}/messages/{{external_ref}}"),
        "not_before": "2030-01-02T03:04:05Z"}])
}

async fn card_shows_every_effect_field_and_binds_them(backend: Backend) {
    let (app, target, _) = gated_app(backend, 0.0, 3600).await;
    let lease = claim(&app, "m4-1", Some("ursula")).await;
    let (status, body) = gate(
        &app,
        "m4-1",
        &lease,
        "send_reply",
        json!({"effects": loaded_effect(&target.base_url())}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let link = link_of(&app, &body);
    let alice = Browser::login(&app, &app.approver).await;
    let (_, page) = alice.get(&link).await;
    for shown in [
        "x-http-method-override", // header names are stored lowercased
        "DELETE",
        "/messages/{external_ref}",
        "refused",
        "/status",
        "/id",
        "2030-01-02T03:04:05",
    ] {
        assert!(page.contains(shown), "the page shows {shown}: {page}");
    }
    let cards: Value = app
        .client
        .get(format!("{}/v1/approvals", app.base))
        .bearer_auth(&app.approver)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let e = &cards[0]["effects"][0];
    assert_eq!(e["headers"]["x-http-method-override"], "DELETE", "{cards}");
    assert!(
        e["probe_url"]
            .as_str()
            .unwrap()
            .ends_with("/messages/{external_ref}"),
        "{cards}"
    );
    assert!(e["not_before"].as_str().is_some(), "{cards}");
    assert_eq!(e["reject"]["equals"], "refused", "{cards}");
    assert_eq!(e["external_id"]["pointer"], "/id", "{cards}");
    assert!(cards[0]["effects_digest"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    // An effect changed after the page was shown: the approval is refused.
    let csrf = csrf_of(&page);
    app.db
        .exec("UPDATE challenges SET effects = REPLACE(effects, 'DELETE', 'PURGE') WHERE run_key = 'm4-1'")
        .await;
    let (status, page) = alice.decide(&link, "approve", &csrf).await;
    assert_eq!(status, 409, "{page}");
    assert!(page.contains("changed"), "{page}");
    assert_eq!(outbox_rows(&app, "m4-1").await, 0, "nothing was sent");
    app.stop().await;
}

async fn exception_rules_judge_the_effects(backend: Backend) {
    let (app, _t, _) = gated_app(backend, 0.0, 3600).await;
    let lease = claim(&app, "m5-1", None).await;
    let (status, body) = app
        .post(
            "/v1/runs/output",
            Some(&app.workflow),
            &json!({"namespace": "support",
            "key": "m5-1", "lease": lease, "operation": "refund",
            "output": {"amount": 10, "reply": "ok"},
            "model": {"provider_class": "hosted", "model": "drafter", "revision": "r7"}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let effects = json!([{"operation": "refund", "effect_type": "reply", "target": "mail",
        "path": "/send", "body": {"amount": 1_000_000}}]);
    let (status, body) = gate(&app, "m5-1", &lease, "refund", json!({"effects": effects})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["decision"], "human",
        "the effect sends another amount: {body}"
    );
    assert_eq!(outbox_rows(&app, "m5-1").await, 0);
    app.stop().await;
}

async fn identities_compare_normalised(backend: Backend) {
    let (app, _t, people) = gated_app(backend, 0.0, 3600).await;
    let lease = claim(&app, "l3-1", Some("Bob")).await;
    let (_, body) = gate(&app, "l3-1", &lease, "send_reply", json!({})).await;
    let link = link_of(&app, &body);
    let bob = Browser::login(&app, &people.bob).await;
    let (status, page) = bob.get(&link).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("you requested") && !page.contains("name=\"csrf\""),
        "\"Bob\" is bob: {page}"
    );
    app.stop().await;
}

on_both_backends!(
    sso_page_views_share_one_session,
    an_https_base_sets_a_host_prefixed_cookie,
    card_shows_every_effect_field_and_binds_them,
    exception_rules_judge_the_effects,
    identities_compare_normalised,
    a_sign_in_form_posted_from_another_site_signs_nobody_in,
);

/// L2: a page on another site cannot sign the victim in as the attacker.
async fn a_sign_in_form_posted_from_another_site_signs_nobody_in(backend: Backend) {
    let (app, _target, people) = gated_app(backend, 0.0, 3600).await;
    let form = [("token", people.bob.as_str()), ("next", "/approvals")];
    for (header, value) in [
        ("sec-fetch-site", "cross-site"),
        ("origin", "https://evil.example"),
    ] {
        let resp = Browser::anonymous(&app)
            .with_header(header, value)
            .post_form("/login", &form)
            .await;
        assert_eq!(resp.status(), 403, "{header}: {value}");
        assert!(
            resp.headers().get("set-cookie").is_none(),
            "no session for {header}"
        );
    }
    let own = app.base.clone();
    let resp = Browser::anonymous(&app)
        .with_header("origin", &own)
        .post_form("/login", &form)
        .await;
    assert_eq!(resp.status(), 303, "the sign-in page's own form");
    assert!(resp.headers().get("set-cookie").is_some());
    app.stop().await;
}

/// Issue 25 (info): page views through the single-sign-on proxy that come
/// without the session cookie (fresh loads, scripts, prefetches) reuse one
/// session for the person and period instead of adding a row each.
async fn sso_page_views_share_one_session(backend: Backend) {
    let (app, _t, _) = gated_app(backend, 0.0, 3600).await;
    let link = crate::approvals::pending(&app, "sso-1", "send_reply").await;
    let mut cookies = Vec::new();
    for _ in 0..5 {
        let page = Browser::anonymous(&app).with_header("X-Forwarded-User", "bob");
        let resp = page.request_get(&link).await;
        assert_eq!(resp.status(), 200);
        let set = resp.headers()["set-cookie"].to_str().unwrap().to_owned();
        cookies.push(set.split(';').next().unwrap().to_owned());
    }
    assert!(cookies.windows(2).all(|w| w[0] == w[1]), "{cookies:?}");
    assert_eq!(app.db.count("SELECT COUNT(*) FROM sessions").await, 1);
    let other = Browser::anonymous(&app).with_header("X-Forwarded-User", "carol");
    assert_eq!(other.request_get(&link).await.status(), 200);
    assert_eq!(
        app.db.count("SELECT COUNT(*) FROM sessions").await,
        2,
        "another person has a session of their own"
    );
    app.stop().await;
}

/// Issue 25 (info): served under https, the session cookie carries the
/// `__Host-` prefix (no other port or subdomain of the host can set or
/// shadow it), and a plain `og_session` cookie is not read there.
async fn an_https_base_sets_a_host_prefixed_cookie(backend: Backend) {
    let (app, _t, _) = gated_app_with(backend, 0.0, 3600, |c| {
        c.server.public_base_url = Some("https://approvals.example".into());
    })
    .await;
    let person = Browser::login(&app, &app.approver).await;
    assert!(
        person.cookie.starts_with("__Host-og_session="),
        "{}",
        person.cookie
    );
    assert_eq!(person.get("/ui/approvals").await.0, 200);
    let mut plain = Browser::anonymous(&app);
    plain.cookie = person.cookie.replacen("__Host-", "", 1);
    assert_ne!(
        plain.get("/ui/approvals").await.0,
        200,
        "only the __Host- cookie counts"
    );
    app.stop().await;
}
