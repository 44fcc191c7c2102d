//! The OpenID Connect happy path in headless Chromium: a person opens an
//! approval link of an operation that requires single sign-on, signs in
//! at the real `oidc-provider` through its own form, comes back, approves,
//! and the target receives the effect once.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::approvals::{claim, gate, gated_app_with, run_state, sent_once};
use crate::browser::{with_browser, Browser};
use crate::harness::{eventually, Backend};
use crate::oidc_support::Provider;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_at_the_provider_in_chromium_and_approves() {
    let provider = Provider::real().await;
    let oidc = provider.config();
    let (app, target, _) = gated_app_with(Backend::Sqlite, 0.0, 3600, move |c| {
        c.approvals.oidc = Some(oidc);
    })
    .await;
    let lease = claim(&app, "ob-1", Some("ursula")).await;
    let (status, body) = gate(&app, "ob-1", &lease, "wire", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let link = body["approval_url"].as_str().unwrap().to_owned();
    let path = link.strip_prefix(&app.base).unwrap().to_owned();
    let issuer = provider.issuer.clone();
    let gated = &app;
    with_browser(
        "oidc-sign-in",
        &app.base,
        |browser: Arc<Browser>| async move {
            browser.open(&path).await;
            browser.wait_for("Sign in").await;
            browser.click("a[href^='/login']").await;
            browser.click_link("Sign in with Test IdP").await;
            // The provider's own sign-in form.
            eventually(
                "the provider's sign-in form",
                Duration::from_secs(30),
                || async {
                    browser
                        .driver_url()
                        .await
                        .starts_with(&issuer)
                        .then_some(())
                },
            )
            .await;
            browser.fill("input[name=login]", "carol").await;
            browser.fill("input[name=password]", "any password").await;
            browser.click_button("Sign-in").await;
            let card = browser.wait_for("Re-run protocol").await;
            assert_eq!(browser.path().await, path, "back on the link");
            assert!(card.contains("Signed in as carol"), "{card}");
            assert_eq!(run_state(gated, "ob-1").await, "awaiting_human");
            browser.click("button[value=approve]").await;
            browser.wait_for("Decision recorded: approve").await;
        },
    )
    .await;
    sent_once(&app, &target, "ob-1").await;
    let actor = app
        .db
        .text("SELECT decided_by FROM challenges WHERE run_key = 'ob-1'")
        .await;
    assert_eq!(actor, "carol");
}
