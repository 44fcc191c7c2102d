//! The ID token checks, each against a provider that gets one thing wrong
//! on purpose (tests/fixtures/oidc/crafted.mjs): wrong audience, expired,
//! tampered signature, wrong nonce, `alg: none`, an HMAC signature, a
//! discovery document naming another issuer. Each is refused with a clear
//! page and opens no session; the same provider behaving (`good`) and
//! rotating its key (`rotated`: the key is published only after the first
//! fetch, so the app must fetch the keys again) signs the person in.

use crate::approvals::gated_app_with;
use crate::harness::{Backend, TestApp};
use crate::oidc_support::{Flow, Provider};

/// An app whose provider is the crafted one in `mode`.
async fn app_for(provider: &Provider) -> TestApp {
    let oidc = provider.config();
    let (app, _target, _people) = gated_app_with(Backend::Sqlite, 0.0, 3600, move |c| {
        c.approvals.oidc = Some(oidc);
    })
    .await;
    app
}

/// Runs one sign-in through the crafted provider in `mode`: the
/// callback's status and page, and whether a session cookie was set.
async fn sign_in(mode: &str) -> (u16, String, bool) {
    let provider = Provider::crafted(mode).await;
    let app = app_for(&provider).await;
    let mut flow = Flow::new(&app.base);
    let start = flow.start("carol").await;
    if start.status != 303 {
        return (
            start.status,
            start.body,
            flow.app_cookie("og_session").is_some(),
        );
    }
    let callback = flow
        .follow_to_callback(start.location.as_deref().unwrap())
        .await;
    let hop = flow.get(&callback).await;
    let sessions = app.db.count("SELECT COUNT(*) FROM sessions").await;
    let cookie = flow.app_cookie("og_session").is_some();
    assert_eq!(
        sessions > 0,
        cookie,
        "{mode}: a cookie only with a stored session"
    );
    (hop.status, hop.body, cookie)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_token_and_a_rotated_key_sign_in() {
    for mode in ["good", "rotated"] {
        let (status, page, cookie) = sign_in(mode).await;
        assert_eq!(status, 200, "{mode}: {page}");
        assert!(
            cookie && page.contains("Signed in as carol"),
            "{mode}: {page}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_id_token_is_refused_plainly() {
    for (mode, status, says) in [
        ("wrong_audience", 403, "issued for another client"),
        ("expired", 403, "it has expired"),
        ("tampered", 403, "signature does not verify"),
        ("wrong_nonce", 403, "nonce is not this sign-in's"),
        ("alg_none", 403, "the ID token was refused"),
        ("hs256", 403, "the ID token was refused"),
        ("issuer_mismatch", 502, "unexpected issuer"),
    ] {
        let (got, page, cookie) = sign_in(mode).await;
        assert_eq!(got, status, "{mode}: {page}");
        assert!(page.contains(says), "{mode} says {says:?}: {page}");
        assert!(page.contains("Nothing changed"), "{mode}: {page}");
        assert!(!cookie, "{mode}: nobody is signed in");
    }
}
