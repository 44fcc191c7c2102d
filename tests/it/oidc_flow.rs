//! OpenID Connect sign-in against the real `oidc-provider`, driven over
//! plain HTTP: an OIDC session satisfies `approver_auth = "sso"`; the
//! role and segregation-of-duties refusals hold for it; a replayed
//! authorization code, a missing or foreign `state`, and a provider that
//! is down sign nobody in; sign-out goes on to the provider.

use crate::approvals::{claim, csrf_of, gate, gated_app_with, run_state, Browser};
use crate::harness::{Backend, TestApp};
use crate::oidc_support::{config_for, Flow, Provider};
use oncegate::approval::oidc::OidcConfig;
use serde_json::json;

async fn app_with(oidc: OidcConfig) -> TestApp {
    let (app, _target, _people) = gated_app_with(Backend::Sqlite, 0.0, 3600, move |c| {
        c.approvals.oidc = Some(oidc);
    })
    .await;
    app
}

/// Signs `user` in through the provider; the app's session as a browser.
async fn signed_in(app: &TestApp, user: &str) -> Browser {
    let mut flow = Flow::new(&app.base);
    let (hop, _) = flow.sign_in(user).await;
    assert_eq!(hop.status, 200, "{}", hop.body);
    assert!(
        hop.body.contains(&format!("Signed in as {user}")),
        "{}",
        hop.body
    );
    assert!(
        hop.body.contains("http-equiv=\"refresh\"") && hop.body.contains("url=/approvals"),
        "moves on by itself: {}",
        hop.body
    );
    let session = flow.app_cookie("og_session").expect("a session cookie");
    assert!(
        flow.app_cookie("og_oidc").is_none(),
        "the sign-in in flight is cleared"
    );
    let mut browser = Browser::anonymous(app);
    browser.cookie = format!("og_session={session}");
    browser
}

/// Gates `support/<key>` for `operation`, requested by `requester`.
async fn link(app: &TestApp, key: &str, operation: &str, requester: &str) -> String {
    let lease = claim(app, key, Some(requester)).await;
    let (status, body) = gate(app, key, &lease, operation, json!({})).await;
    assert_eq!(status, 200, "{body}");
    let url = body["approval_url"].as_str().unwrap();
    url.strip_prefix(&app.base).unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oidc_session_is_single_sign_on_and_the_approval_rules_still_hold() {
    let provider = Provider::real().await;
    let app = app_with(provider.config()).await;
    let (_, page) = Browser::anonymous(&app)
        .get("/login?next=%2Fapprovals")
        .await;
    assert!(
        page.contains("Sign in with Test IdP")
            && page.contains("/auth/oidc/start?next=%2Fapprovals"),
        "{page}"
    );

    // `wire` requires single sign-on: carol's OIDC session is enough.
    let carol = signed_in(&app, "carol").await;
    let wire = link(&app, "o-1", "wire", "ursula").await;
    let (status, page) = carol.get(&wire).await;
    assert_eq!(status, 200, "{page}");
    let (status, page) = carol.decide(&wire, "approve", &csrf_of(&page)).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(run_state(&app, "o-1").await, "approved");
    let actor = app
        .db
        .text("SELECT decided_by FROM challenges WHERE run_key = 'o-1'")
        .await;
    assert_eq!(actor, "carol", "the subject claim is the actor");

    // alice has no `finance` role (the ID token's roles claim).
    let alice = signed_in(&app, "alice").await;
    let team = link(&app, "o-2", "team_reply", "ursula").await;
    let (_, page) = alice.get(&team).await;
    assert!(page.contains("you lack the required role"), "{page}");
    let (status, _) = alice.decide(&team, "approve", "forged").await;
    assert_eq!(status, 403);

    // ursula requested the run: she may not approve it.
    let ursula = signed_in(&app, "ursula").await;
    let own = link(&app, "o-3", "wire", "ursula").await;
    let (_, page) = ursula.get(&own).await;
    assert!(
        page.contains("you may not approve a run you requested"),
        "{page}"
    );
    for key in ["o-2", "o-3"] {
        assert_eq!(run_state(&app, key).await, "awaiting_human", "{key}");
    }
}

/// Sessions in the database.
async fn sessions(app: &TestApp) -> i64 {
    app.db.count("SELECT COUNT(*) FROM sessions").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_code_or_a_foreign_state_signs_nobody_in() {
    let provider = Provider::real().await;
    let app = app_with(provider.config()).await;
    let mut flow = Flow::new(&app.base);
    let start = flow.start("carol").await;
    let callback = flow
        .follow_to_callback(start.location.as_deref().unwrap())
        .await;
    let in_flight = flow.app_cookie("og_oidc").unwrap();
    let first = flow.get(&callback).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(sessions(&app).await, 1);

    // The same code again, from the same browser (its sign-in restored):
    // the provider refuses it, nobody is signed in.
    let mut replay = Flow::new(&app.base);
    let app_origin = app.base.clone();
    replay
        .jar
        .entry(app_origin)
        .or_default()
        .insert("og_oidc".into(), in_flight.clone());
    let again = replay.get(&callback).await;
    assert_eq!(again.status, 400, "{}", again.body);
    assert!(
        again.body.contains("did not accept the authorization code"),
        "{}",
        again.body
    );
    assert!(replay.app_cookie("og_session").is_none());

    // The callback without this browser's sign-in, without a state, or
    // with another state: a clear 400 page.
    let code = url::Url::parse(&callback)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "code")
        .unwrap()
        .1
        .into_owned();
    let base = &app.base;
    let mut other = Flow::new(base);
    let hop = other
        .get(&format!("{base}/auth/oidc/callback?code={code}&state=x"))
        .await;
    assert_eq!(hop.status, 400);
    assert!(
        hop.body.contains("no sign-in was started in this browser"),
        "{}",
        hop.body
    );
    for query in [
        format!("code={code}"),
        format!("code={code}&state=not-the-state"),
    ] {
        let mut flow = Flow::new(base);
        flow.jar
            .entry(base.clone())
            .or_default()
            .insert("og_oidc".into(), in_flight.clone());
        let hop = flow
            .get(&format!("{base}/auth/oidc/callback?{query}"))
            .await;
        assert_eq!(hop.status, 400, "{query}");
        assert!(
            hop.body.contains("state is missing or is not this browser"),
            "{}",
            hop.body
        );
        assert!(flow.app_cookie("og_session").is_none());
    }
    assert_eq!(sessions(&app).await, 1, "no session was added");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_is_down_gets_a_clear_page_and_changes_nothing() {
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let app = app_with(config_for(&format!("http://127.0.0.1:{port}"))).await;
    let mut flow = Flow::new(&app.base);
    let hop = flow.start("carol").await;
    assert_eq!(hop.status, 502, "{}", hop.body);
    assert!(hop.body.contains("could not be reached"), "{}", hop.body);
    assert!(flow.app_cookie("og_oidc").is_none() && flow.app_cookie("og_session").is_none());
    assert_eq!(sessions(&app).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_out_goes_on_to_the_provider() {
    let provider = Provider::real().await;
    let app = app_with(provider.config()).await;
    let carol = signed_in(&app, "carol").await;
    let (_, page) = carol.get("/ui/approvals").await;
    let at = page.find("action=\"/logout\"").expect("a sign-out form");
    let csrf = csrf_of(&page[at..]);
    let resp = carol.post_form("/logout", &[("csrf", &csrf)]).await;
    assert_eq!(resp.status(), 200);
    let page = resp.text().await.unwrap();
    let end = format!("{}/session/end?", provider.issuer);
    assert!(page.contains(&end), "{page}");
    assert!(page.contains("client_id=oncegate"), "{page}");
    assert!(page.contains("post_logout_redirect_uri="), "{page}");
    assert_eq!(sessions(&app).await, 0, "the session is gone here");
}
