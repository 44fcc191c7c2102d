//! The secrecy scan of approval_secrecy.rs, extended to OpenID Connect:
//! after a sign-in through the real provider (the real binary, logs at
//! TRACE), neither the authorization code, the ID token, the access
//! token, the state, the nonce, the PKCE verifier, the sign-in cookie, the
//! session id nor the client secret is in the logs, `/metrics` or the
//! database (audit included), on both stores.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use crate::approval_secrecy::{dump, holds};
use crate::harness::{on_both_backends, Backend, TestDb};
use crate::logs::start_on;
use crate::oidc_support::{Flow, Provider, CLIENT_SECRET};
use crate::process::write_config_with;

fn query(url: &str, name: &str) -> String {
    url::Url::parse(url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("{name} in {url}"))
        .1
        .into_owned()
}

/// What a sign-in handled that must stay secret, by name.
async fn sign_in(base: &str) -> Vec<(&'static str, String)> {
    let mut flow = Flow::new(base);
    let start = flow.start("carol").await;
    let authorize = start.location.clone().expect("to the provider");
    let in_flight = flow.app_cookie("og_oidc").expect("the sign-in cookie");
    let payload = in_flight.split('.').next().unwrap();
    let pending: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    let callback = flow.follow_to_callback(&authorize).await;
    let hop = flow.get(&callback).await;
    assert_eq!(hop.status, 200, "{}", hop.body);
    let session = flow.app_cookie("og_session").expect("a session");
    let (status, _) = {
        let mut again = Flow::new(base);
        again
            .jar
            .entry(base.to_owned())
            .or_default()
            .insert("og_session".into(), session.clone());
        let hop = again.get(&format!("{base}/ui/approvals")).await;
        (hop.status, hop.body)
    };
    assert_eq!(status, 200, "the session works");
    vec![
        ("state", query(&authorize, "state")),
        ("nonce", query(&authorize, "nonce")),
        ("code challenge", query(&authorize, "code_challenge")),
        (
            "PKCE verifier",
            pending["verifier"].as_str().unwrap().to_owned(),
        ),
        ("authorization code", query(&callback, "code")),
        ("sign-in cookie", in_flight),
        ("session cookie", session),
        ("client secret", CLIENT_SECRET.to_owned()),
    ]
}

async fn oidc_secrets_are_nowhere(backend: Backend) {
    let db = TestDb::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let url = match backend {
        Backend::Sqlite => format!("sqlite://{}", dir.path().join("secrecy.db").display()),
        Backend::Postgres => db.url.clone(),
    };
    let tokens = dir.path().join("issued.jsonl");
    let provider = Provider::real_logging_tokens(&tokens).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let extra = format!(
        "[server]\npublic_base_url = \"http://{listen}\"\n\n[approvals.oidc]\n\
         issuer = \"{}\"\nclient_id = \"oncegate\"\nclient_secret = \"{CLIENT_SECRET}\"\n\
         scopes = [\"openid\", \"roles\"]\nroles_claim = \"roles\"\n",
        provider.issuer
    );
    let (config, _) = write_config_with(dir.path(), &url, &extra);
    let log = dir.path().join("oncegate.log");
    let (child, base) = start_on(&config, dir.path(), &log, &listen);
    let mut secrets = sign_in(&base).await;
    let issued = std::fs::read_to_string(&tokens).expect("the provider issued tokens");
    let issued: Value = serde_json::from_str(issued.lines().next().unwrap()).unwrap();
    for (what, field) in [("ID token", "id_token"), ("access token", "access_token")] {
        let token = issued[field].as_str().unwrap().to_owned();
        // The signature part alone is as secret as the whole.
        secrets.push((
            "token signature",
            token.rsplit('.').next().unwrap().to_owned(),
        ));
        secrets.push((what, token));
    }
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    kill(Pid::from_raw(child.0.id() as i32), Signal::SIGTERM).unwrap();
    let mut child = child;
    assert!(child.0.wait().unwrap().success());
    let logs = std::fs::read(&log).unwrap();
    assert!(
        holds(&logs, "signed in through the OpenID provider"),
        "the sign-in is logged (so the scan reads real logs)"
    );
    let database = dump(&db, backend, dir.path()).await;
    assert!(
        holds(&database, "carol"),
        "the dump is real: it holds the subject"
    );
    for (what, secret) in &secrets {
        assert!(secret.len() >= 16, "{what} is long enough to scan for");
        assert!(!holds(&logs, secret), "the TRACE logs hold the {what}");
        assert!(
            !metrics.contains(secret.as_str()),
            "/metrics holds the {what}"
        );
        assert!(
            !holds(&database, secret),
            "the database dump holds the {what}"
        );
    }
}

on_both_backends!(oidc_secrets_are_nowhere);
