//! API tokens made at run time (DESIGN.md §5): made through the API (the
//! token shown once, only its digest stored), listed without secrets,
//! never holding more than their creator, given an expiry, revoked, every
//! change audited; revocation reaching a second instance on the same
//! PostgreSQL database within seconds; the CLI over the API.

use std::sync::Arc;
use std::time::{Duration, Instant};

use oncegate::clock::{Clock, ManualClock};
use oncegate::config::{Config, Scope};
use oncegate::tokens::{digest, NamespacePattern};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::harness::{answer, eventually, on_both_backends, oncegate_cli, token, Backend, TestApp};

/// An admin for every namespace (`root`) and one for `crm` only (`carol`).
pub(crate) struct Admins {
    pub app: TestApp,
    pub root: String,
    pub carol: String,
}

pub(crate) fn with_admins(config: &mut Config) -> (String, String) {
    let (root, root_entry) = token("root", &[Scope::Admin]);
    let (carol, mut carol_entry) = token("carol", &[Scope::Admin]);
    carol_entry.namespaces = Some(vec![NamespacePattern::parse("crm").unwrap()]);
    config.tokens.push(root_entry);
    config.tokens.push(carol_entry);
    (root, carol)
}

pub(crate) async fn admins(backend: Backend) -> Admins {
    let mut tokens = None;
    let app = TestApp::spawn_with(backend, |c| tokens = Some(with_admins(c))).await;
    let (root, carol) = tokens.unwrap();
    Admins { app, root, carol }
}

pub(crate) async fn create(app: &TestApp, as_token: &str, body: Value) -> (u16, Value) {
    app.post("/v1/admin/tokens", Some(as_token), &body).await
}

async fn list(app: &TestApp, as_token: &str) -> (u16, Value) {
    let req = app
        .client
        .get(format!("{}/v1/admin/tokens", app.base))
        .bearer_auth(as_token);
    answer(req).await
}

/// The status a token gets on a route every scope may read (`GET
/// /v1/admin/tokens` needs admin: 401 unknown, 403 known but not admin).
pub(crate) async fn status_of(base: &str, token: &str) -> u16 {
    reqwest::Client::new()
        .get(format!("{base}/v1/admin/tokens"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn token_rows(app: &TestApp) -> i64 {
    app.db.count("SELECT COUNT(*) FROM api_tokens").await
}

async fn made_shown_once_listed_and_revoked(backend: Backend) {
    let Admins { app, root, .. } = admins(backend).await;
    let (status, body) = create(
        &app,
        &app.operator,
        json!({"subject": "x", "scopes": ["operator"]}),
    )
    .await;
    assert_eq!(status, 403, "operators cannot make tokens: {body}");
    assert_eq!(token_rows(&app).await, 0, "nothing stored");

    let expires = chrono::Utc::now() + chrono::Duration::hours(1);
    let (status, made) = create(
        &app,
        &root,
        json!({"subject": "n8n-eu", "scopes": ["workflow"], "namespaces": ["crm"],
               "expires_at": expires.to_rfc3339()}),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    let secret = made["token"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("og_") && secret.len() == 46, "{secret}");
    let id = made["id"].as_str().unwrap().to_owned();
    assert_eq!(
        (made["source"].as_str(), made["state"].as_str()),
        (Some("stored"), Some("active"))
    );
    assert_eq!(made["created_by"], "root");

    // It works, as what it was made: a workflow of `crm` only.
    let claim = json!({"namespace": "crm", "key": "k1", "payload": {}});
    let (status, body) = app.post("/v1/claims", Some(&secret), &claim).await;
    assert_eq!((status, &body["claimed"]), (200, &json!(true)), "{body}");
    let other = json!({"namespace": "billing", "key": "k1", "payload": {}});
    let (status, body) = app.post("/v1/claims", Some(&secret), &other).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["type"], "urn:oncegate:problem:namespace-not-allowed");
    assert_eq!(status_of(&app.base, &secret).await, 403, "known, not admin");

    // Listed (config tokens read-only), never with the token or its digest.
    let (status, listed) = list(&app, &root).await;
    assert_eq!(status, 200);
    let text = listed.to_string();
    assert!(
        !text.contains(&secret) && !text.contains(&digest(&secret)),
        "{text}"
    );
    let rows = listed.as_array().unwrap();
    let config_rows: Vec<&Value> = rows.iter().filter(|t| t["source"] == "config").collect();
    assert_eq!(config_rows.len(), 5, "the five configured tokens: {text}");
    let mine = rows
        .iter()
        .find(|t| t["id"] == id.as_str())
        .expect("listed");
    assert_eq!(mine["namespaces"], json!(["crm"]));
    assert_eq!(mine["scopes"], json!(["workflow"]));

    // Stored as its digest only.
    let stored = app
        .db
        .texts("SELECT digest || '|' || subject || '|' || scopes || '|' || COALESCE(namespaces, '') FROM api_tokens")
        .await;
    assert_eq!(stored.len(), 1);
    assert!(stored[0].starts_with(&digest(&secret)), "{stored:?}");
    assert!(!stored[0].contains(&secret));

    // Config tokens and unknown ids are not revoked here; nothing changes.
    let config_id = config_rows[0]["id"].as_str().unwrap();
    let (status, body) = revoke(&app, &root, config_id).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["type"], "urn:oncegate:problem:token-not-revocable");
    let (status, _) = revoke(&app, &root, "0000000000000000").await;
    assert_eq!(status, 404);
    let (status, _) = revoke(&app, &app.operator, &id).await;
    assert_eq!(status, 403, "operators cannot revoke");
    assert_eq!(status_of(&app.base, &secret).await, 403, "still works");

    let (status, revoked) = revoke(&app, &root, &id).await;
    assert_eq!(status, 200, "{revoked}");
    assert_eq!(revoked["state"], "revoked");
    assert_eq!(
        status_of(&app.base, &secret).await,
        401,
        "refused at once here"
    );
    let (status, body) = app.post("/v1/claims", Some(&secret), &claim).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = revoke(&app, &root, &id).await;
    assert_eq!(status, 409, "already revoked: {body}");

    // Both moves are in the hash-chained audit, under their actor, with
    // neither the token nor its digest.
    let key = format!("tokens:{id}");
    let events = app
        .db
        .texts(&format!(
            "SELECT kind || ' by ' || actor FROM audit_events WHERE namespace = 'oncegate' \
             AND run_key = '{key}' ORDER BY seq"
        ))
        .await;
    assert_eq!(events, ["token_created by root", "token_revoked by root"]);
    let details = app
        .db
        .texts(&format!(
            "SELECT detail FROM audit_events WHERE run_key = '{key}'"
        ))
        .await
        .join("\n");
    assert!(
        details.contains("n8n-eu") && !details.contains(&secret) && !details.contains("sha256:")
    );
    app.stop().await;
}

async fn revoke(app: &TestApp, as_token: &str, id: &str) -> (u16, Value) {
    app.post(
        &format!("/v1/admin/tokens/{id}/revoke"),
        Some(as_token),
        &json!({}),
    )
    .await
}

async fn never_more_than_the_creator(backend: Backend) {
    let Admins { app, root, carol } = admins(backend).await;
    let refusals = [
        (
            json!({"subject": "w", "scopes": ["workflow"]}),
            403,
            "every namespace, from a crm admin",
        ),
        (
            json!({"subject": "w", "scopes": ["workflow"], "namespaces": ["billing"]}),
            403,
            "another namespace",
        ),
        (
            json!({"subject": "w", "scopes": ["workflow"], "namespaces": ["crm*"]}),
            403,
            "a prefix wider than crm",
        ),
        (
            json!({"subject": "w", "scopes": ["approver"], "namespaces": ["crm"], "roles": ["finance"]}),
            403,
            "a role carol lacks",
        ),
        (
            json!({"subject": "w", "scopes": ["root"], "namespaces": ["crm"]}),
            400,
            "no such scope",
        ),
        (
            json!({"subject": "w", "scopes": [], "namespaces": ["crm"]}),
            400,
            "no scope",
        ),
        (
            json!({"subject": " ", "scopes": ["workflow"], "namespaces": ["crm"]}),
            400,
            "no subject",
        ),
        (
            json!({"subject": "w", "scopes": ["workflow"], "namespaces": ["a*b"]}),
            400,
            "a bad pattern",
        ),
        (
            json!({"subject": "w", "scopes": ["workflow"], "namespaces": ["crm"], "expires_at": "2001-01-01T00:00:00Z"}),
            400,
            "an expiry in the past",
        ),
        (
            json!({"subject": "w", "scopes": ["workflow"], "namespaces": ["crm"], "expires_at": "tomorrow"}),
            400,
            "not a time",
        ),
        (
            json!({"subject": "w", "scopes": ["workflow"], "namespaces": ["crm"], "secret": "x"}),
            400,
            "an unknown field",
        ),
    ];
    for (body, want, why) in refusals {
        let (status, problem) = create(&app, &carol, body).await;
        assert_eq!(status, want, "{why}: {problem}");
        if want == 403 {
            assert_eq!(
                problem["type"], "urn:oncegate:problem:token-exceeds-creator",
                "{why}"
            );
        }
    }
    assert_eq!(token_rows(&app).await, 0, "no refusal stored anything");
    let audited = app
        .db
        .count("SELECT COUNT(*) FROM audit_events WHERE run_key LIKE 'tokens:%'")
        .await;
    assert_eq!(audited, 0, "no refusal audited a creation");
    let (status, made) = create(
        &app,
        &carol,
        json!({"subject": "w", "scopes": ["operator", "workflow"], "namespaces": ["crm"]}),
    )
    .await;
    assert_eq!(status, 201, "inside carol's reach: {made}");
    let (status, made) = create(&app, &root, json!({"subject": "w2", "scopes": ["admin"]})).await;
    assert_eq!(status, 201, "root reaches everything: {made}");
    assert_eq!(token_rows(&app).await, 2);
    app.stop().await;
}

async fn an_expired_token_is_refused(backend: Backend) {
    let clock = Arc::new(ManualClock::new(1_900_000_000_000));
    let mut tokens = None;
    let app =
        TestApp::spawn_clocked(backend, clock.clone(), |c| tokens = Some(with_admins(c))).await;
    let (root, _) = tokens.unwrap();
    let expires = oncegate::clock::to_datetime(clock.now_ms() + 60_000).to_rfc3339();
    let (status, made) = create(
        &app,
        &root,
        json!({"subject": "temp", "scopes": ["operator"], "expires_at": expires}),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    let secret = made["token"].as_str().unwrap();
    assert_eq!(status_of(&app.base, secret).await, 403, "works (not admin)");
    clock.advance_ms(60_000);
    assert_eq!(
        status_of(&app.base, secret).await,
        401,
        "refused from its expiry on"
    );
    let (_, listed) = list(&app, &root).await;
    let row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["subject"] == "temp")
        .cloned()
        .unwrap();
    assert_eq!(row["state"], "expired");
    app.stop().await;
}

on_both_backends!(
    made_shown_once_listed_and_revoked,
    never_more_than_the_creator,
    an_expired_token_is_refused
);

/// A second server on `app`'s database and configuration.
async fn second_instance(app: &TestApp) -> (String, CancellationToken) {
    let config = (*app.state.config).clone();
    let store = app
        .db
        .store(Arc::new(oncegate::clock::SystemClock), true)
        .await;
    let (state, bootstrap) =
        oncegate::app::build_state(config, store, Arc::new(oncegate::clock::SystemClock))
            .await
            .unwrap();
    assert!(bootstrap.is_none());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let shutdown = stop.clone();
    tokio::spawn(async move {
        oncegate::app::run_server(listener, state, shutdown)
            .await
            .unwrap()
    });
    (base, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_on_one_instance_reaches_another_within_seconds() {
    let Admins { app: a, root, .. } = admins(Backend::Postgres).await;
    let (b, stop_b) = second_instance(&a).await;
    let (status, made) = create(&a, &root, json!({"subject": "wf", "scopes": ["operator"]})).await;
    assert_eq!(status, 201, "{made}");
    let secret = made["token"].as_str().unwrap().to_owned();
    let id = made["id"].as_str().unwrap().to_owned();
    // Made on A, it works on B (and B now holds it in its cache).
    assert_eq!(status_of(&b, &secret).await, 403, "known on B (not admin)");
    assert_eq!(status_of(&b, &secret).await, 403);
    let (status, _) = revoke(&a, &root, &id).await;
    assert_eq!(status, 200);
    let revoked_at = Instant::now();
    eventually(
        "B to refuse the revoked token",
        Duration::from_secs(10),
        || {
            let (b, secret) = (b.clone(), secret.clone());
            async move { (status_of(&b, &secret).await == 401).then_some(()) }
        },
    )
    .await;
    let took = revoked_at.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}");
    stop_b.cancel();
    a.stop().await;
}

async fn cli(app: &TestApp, as_token: &str, args: &[&str]) -> (bool, String, String) {
    let args: Vec<&str> = std::iter::once("tokens")
        .chain(args.iter().copied())
        .collect();
    oncegate_cli(&app.base, as_token, &args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_creates_lists_and_revokes_over_the_api() {
    let Admins { app, root, .. } = admins(Backend::Sqlite).await;
    let (ok, out, err) = cli(
        &app,
        &root,
        &[
            "create",
            "--subject",
            "laptop",
            "--scope",
            "operator",
            "--json",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let made: Value = serde_json::from_str(&out).unwrap();
    let secret = made["token"].as_str().unwrap().to_owned();
    let id = made["id"].as_str().unwrap().to_owned();
    assert_eq!(status_of(&app.base, &secret).await, 403, "the token works");
    let (ok, out, err) = cli(&app, &root, &["list"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains(&id) && out.contains("laptop") && out.contains("config"),
        "{out}"
    );
    assert!(!out.contains(&secret), "{out}");
    let (ok, _, err) = cli(&app, &app.operator, &["revoke", &id]).await;
    assert!(!ok && err.contains("403"), "operators cannot revoke: {err}");
    let (ok, out, err) = cli(&app, &root, &["revoke", &id]).await;
    assert!(ok, "{err}");
    assert!(out.contains("revoked"), "{out}");
    assert_eq!(status_of(&app.base, &secret).await, 401);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_ends_the_sessions_it_opened() {
    let Admins { app, root, .. } = admins(Backend::Sqlite).await;
    let (_, made) = create(
        &app,
        &root,
        json!({"subject": "olga", "scopes": ["operator"]}),
    )
    .await;
    let secret = made["token"].as_str().unwrap();
    let olga = crate::approvals::Browser::login(&app, secret).await;
    assert_eq!(
        olga.get("/ui").await.0,
        200,
        "signed in with a run-time token"
    );
    let (status, _) = revoke(&app, &root, made["id"].as_str().unwrap()).await;
    assert_eq!(status, 200);
    let resp = olga.request_get("/ui").await;
    assert_eq!(resp.status(), 303, "the session ended with its token");
    assert!(resp.headers()["location"]
        .to_str()
        .unwrap()
        .starts_with("/login"));
    app.stop().await;
}
