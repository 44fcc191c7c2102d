//! Every refused approval sends nothing and says why (both stores).

use oncegate::approval::Secret;
use serde_json::json;

use crate::approvals::{
    claim, csrf_of, gate, gated_app, gated_app_with, outbox_rows, own_csrf, pending, run_state,
    Browser,
};
use crate::harness::{on_both_backends, Backend, TestApp};

/// Asserts the run still waits with nothing queued.
async fn nothing_happened(app: &TestApp, key: &str) {
    assert_eq!(run_state(app, key).await, "awaiting_human");
    assert_eq!(outbox_rows(app, key).await, 0);
}

async fn forged_missing_csrf_and_wrong_decision_are_refused(backend: Backend) {
    let (app, _t, people) = gated_app(backend, 0.0, 3600).await;
    let link = pending(&app, "r-1", "send_reply").await;
    let alice = Browser::login(&app, &app.approver).await;
    let forged = format!("/approve/{}", Secret::generate().expose());
    let (status, page) = alice.get(&forged).await;
    assert_eq!(status, 404);
    assert!(page.contains("not valid"));
    let (status, _) = alice.decide(&forged, "approve", "x").await;
    assert_eq!(status, 404);
    let (status, _) = alice.get("/approve/not-a-token").await;
    assert_eq!(status, 404);
    let csrf = csrf_of(&alice.get(&link).await.1);
    let resp = alice.post_form(&link, &[("decision", "approve")]).await;
    assert_eq!(resp.status(), 403, "missing CSRF");
    assert!(resp.text().await.unwrap().contains("CSRF"));
    let (status, _) = alice.decide(&link, "approve", &format!("{csrf}x")).await;
    assert_eq!(status, 403, "wrong CSRF");
    let bob = Browser::login(&app, &people.bob).await;
    let (status, _) = bob.decide(&link, "approve", &csrf).await;
    assert_eq!(status, 403, "a CSRF token is bound to its session");
    let (status, _) = alice.decide(&link, "maybe", &csrf).await;
    assert_eq!(status, 400, "wrong decision");
    let anonymous = Browser::anonymous(&app);
    let (status, page) = anonymous.decide(&link, "approve", &csrf).await;
    assert_eq!(status, 401);
    assert!(page.contains("Sign in"));
    let json = reqwest::Client::new()
        .post(format!("{}{link}", app.base))
        .header("accept", "application/json")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("decision=approve")
        .send()
        .await
        .unwrap();
    assert_eq!(json.status(), 401);
    let problem: serde_json::Value = json.json().await.unwrap();
    assert_eq!(problem["type"], "urn:oncegate:problem:approval-sign-in");
    nothing_happened(&app, "r-1").await;
}

async fn segregation_of_duties(backend: Backend) {
    let (app, _t, people) = gated_app(backend, 0.0, 3600).await;
    // requested_by = ursula: ursula may not approve her own request.
    let lease = claim(&app, "r-2", Some("bob")).await;
    let (_, body) = gate(&app, "r-2", &lease, "send_reply", json!({})).await;
    let link = body["approval_url"]
        .as_str()
        .unwrap()
        .strip_prefix(&app.base)
        .unwrap()
        .to_owned();
    let bob = Browser::login(&app, &people.bob).await;
    let (status, page) = bob.get(&link).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("you requested") && !page.contains("name=\"csrf\""),
        "{page}"
    );
    let alice = Browser::login(&app, &app.approver).await;
    let alice_csrf = csrf_of(&alice.get(&link).await.1);
    let (status, page) = bob.decide(&link, "approve", &alice_csrf).await;
    assert_eq!(status, 403, "{page}");
    // claimed_by = n8n (the workflow token's subject).
    let n8n = Browser::login(&app, &people.n8n_person).await;
    let page = n8n.get(&link).await.1;
    assert!(page.contains("you claimed"), "{page}");
    nothing_happened(&app, "r-2").await;
}

async fn audience_roles_and_sso(backend: Backend) {
    let (app, _t, people) = gated_app(backend, 0.0, 3600).await;
    let link = pending(&app, "r-3", "team_reply").await;
    let alice = Browser::login(&app, &app.approver).await;
    assert!(alice
        .get(&link)
        .await
        .1
        .contains("not among the intended approvers"));
    let (status, page) = alice
        .decide(&link, "approve", &own_csrf(&app, &alice, "r-3").await)
        .await;
    assert_eq!(status, 403, "{page}");
    assert!(page.contains("not among the intended approvers"));
    let bob = Browser::login(&app, &people.bob).await;
    let page = bob.get(&link).await.1;
    assert!(
        page.contains("required role") && page.contains("finance"),
        "{page}"
    );
    let (status, _) = bob
        .decide(&link, "approve", &own_csrf(&app, &bob, "r-3").await)
        .await;
    assert_eq!(status, 403);
    nothing_happened(&app, "r-3").await;
    let carol = Browser::login(&app, &people.carol).await;
    let csrf = csrf_of(&carol.get(&link).await.1);
    let (status, page) = carol.decide(&link, "approve", &csrf).await;
    assert_eq!(status, 200, "{page}");

    let sso_link = pending(&app, "r-4", "wire").await;
    assert!(carol
        .get(&sso_link)
        .await
        .1
        .contains("requires single sign-on"));
    let (status, _) = carol
        .decide(&sso_link, "approve", &own_csrf(&app, &carol, "r-4").await)
        .await;
    assert_eq!(
        status, 403,
        "a token session is not enough for an sso operation"
    );
    nothing_happened(&app, "r-4").await;
    let mut sso = Browser::anonymous(&app)
        .with_header("X-Forwarded-User", "erin")
        .with_header("X-Forwarded-Groups", "treasury");
    let (status, page) = sso.get_keeping_cookie(&sso_link).await;
    assert_eq!(status, 200, "a trusted proxy's SSO user gets a session");
    let (status, page) = sso.decide(&sso_link, "approve", &csrf_of(&page)).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        app.db
            .count(
                "SELECT COUNT(*) FROM challenges WHERE decided_by = 'erin' AND auth_method = 'sso'"
            )
            .await,
        1
    );
}

async fn sso_header_from_untrusted_peer_is_ignored(backend: Backend) {
    let (app, _t, _) = gated_app_with(backend, 0.0, 3600, |c| {
        c.approvals.trusted_proxies = vec!["10.9.8.7".parse().unwrap()];
    })
    .await;
    let link = pending(&app, "r-6", "wire").await;
    let mut forged = Browser::anonymous(&app).with_header("X-Forwarded-User", "erin");
    let (status, page) = forged.get_keeping_cookie(&link).await;
    assert_eq!(
        status, 401,
        "the header is believed only from a trusted proxy: {page}"
    );
    assert!(forged.cookie.is_empty(), "no session was opened");
    nothing_happened(&app, "r-6").await;
}

async fn sign_in_refuses_wrong_tokens(backend: Backend) {
    let (app, _t, _) = gated_app(backend, 0.0, 3600).await;
    let b = Browser::anonymous(&app);
    for bad in ["og_nope", app.workflow.as_str()] {
        let resp = b.post_form("/login", &[("token", bad)]).await;
        assert_eq!(resp.status(), 401);
        assert!(resp.headers().get("set-cookie").is_none());
    }
    let ops = Browser::login(&app, &app.operator).await;
    let link = pending(&app, "r-5", "send_reply").await;
    let page = ops.get(&link).await.1;
    assert!(
        page.contains("lacks the approver scope"),
        "operators see, approvers decide"
    );
    let resp = b
        .post_form(
            "/login",
            &[("token", &app.approver), ("next", "//evil.example/")],
        )
        .await;
    assert_eq!(resp.headers()["location"], "/approvals", "no open redirect");
}

on_both_backends!(
    forged_missing_csrf_and_wrong_decision_are_refused,
    segregation_of_duties,
    audience_roles_and_sso,
    sso_header_from_untrusted_peer_is_ignored,
    sign_in_refuses_wrong_tokens,
);
