//! Approval gates end to end: the gate, the confirmation page, the
//! decision transaction, and the effects that follow (both stores).

use std::time::Duration;

use futures_util::future::join_all;
use oncegate::config::{Config, Scope, TokenConfig};
use serde_json::{json, Value};

use crate::harness::{eventually, on_both_backends, token, Backend, TestApp};
use crate::target::MockTarget;

/// Operations of every gate policy, and the people who decide.
pub(crate) fn gated_config(target: &MockTarget, sample_rate: f64, expiry_secs: u64) -> String {
    format!(
        r#"
[[targets]]
name = "mail"
base_url = "{base}"
timeout_ms = 2000
connect_timeout_ms = 500

[[operations]]
name = "send_reply"
customer_visible = true
[operations.approval]
expiry_secs = {expiry_secs}

[[operations]]
name = "team_reply"
customer_visible = true
[operations.approval]
roles = ["support-lead"]
required_roles = ["finance"]

[[operations]]
name = "wire"
irreversible = true
[operations.approval]
auth = "sso"

[[operations]]
name = "escalating"
customer_visible = true
[operations.approval]
expiry_secs = 1
escalate_to_roles = ["duty"]

[[operations]]
name = "refund"
gate = "approve_by_exception"
[operations.output]
max_repairs = 1
confidence_fields = ["/confidence"]
[operations.output.schema]
type = "object"
required = ["amount", "reply"]
properties.amount = {{ type = "number" }}
properties.reply = {{ type = "string", maxLength = 200 }}
properties.category = {{ enum = ["refund", "faq"] }}
properties.confidence = {{ type = "number" }}
[operations.exception]
sample_rate = {sample_rate}
[[operations.exception.rules]]
pointer = "/amount"
op = "lte"
value = 50

[[operations]]
name = "nudge"
gate = "act_with_window"
window_secs = 60

[approvals]
sso_header = "X-Forwarded-User"
sso_roles_header = "X-Forwarded-Groups"
trusted_proxies = ["127.0.0.1"]
"#,
        base = target.base_url()
    )
}

/// Tokens of the people in [`gated_config`]: (subject, token).
pub(crate) struct People {
    pub bob: String,
    pub carol: String,
    pub dave: String,
    pub n8n_person: String,
}

fn person(subject: &str, roles: &[&str]) -> (String, TokenConfig) {
    let (raw, mut entry) = token(subject, &[Scope::Approver]);
    entry.roles = roles.iter().map(|r| (*r).to_owned()).collect();
    (raw, entry)
}

/// An app with [`gated_config`] and its people.
pub(crate) async fn gated_app(
    backend: Backend,
    sample_rate: f64,
    expiry_secs: u64,
) -> (TestApp, MockTarget, People) {
    gated_app_with(backend, sample_rate, expiry_secs, |_| {}).await
}

/// [`gated_app`], with a last change to the config.
pub(crate) async fn gated_app_with(
    backend: Backend,
    sample_rate: f64,
    expiry_secs: u64,
    adjust: impl FnOnce(&mut Config) + Send + 'static,
) -> (TestApp, MockTarget, People) {
    let target = MockTarget::start().await;
    let parsed: Config = toml::from_str(&gated_config(&target, sample_rate, expiry_secs)).unwrap();
    let (bob, bob_entry) = person("bob", &["support-lead"]);
    let (carol, carol_entry) = person("carol", &["support-lead", "finance"]);
    let (dave, dave_entry) = person("dave", &["duty"]);
    let (n8n_person, n8n_entry) = person("n8n", &[]);
    let app = TestApp::spawn_with(backend, move |c| {
        c.targets = parsed.targets;
        c.operations = parsed.operations;
        c.approvals = parsed.approvals;
        c.tokens
            .extend([bob_entry, carol_entry, dave_entry, n8n_entry]);
        adjust(c);
        c.validate().unwrap();
    })
    .await;
    let people = People {
        bob,
        carol,
        dave,
        n8n_person,
    };
    (app, target, people)
}

/// Claims `support/<key>`; returns the lease.
pub(crate) async fn claim(app: &TestApp, key: &str, requested_by: Option<&str>) -> String {
    let (status, body) = app
        .claim(
            json!({"namespace": "support", "key": key, "payload": {"k": key},
            "requested_by": requested_by, "source_url": "https://crm.example/tickets/42"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body["lease"].as_str().unwrap().to_owned()
}

/// The effect every gate in these tests proposes.
pub(crate) fn reply_effect(operation: &str) -> Value {
    json!([{"operation": operation, "effect_type": "reply", "target": "mail", "path": "/send",
        "body": {"to": "customer@example.com", "text": "We refunded you."}}])
}

/// Gates `support/<key>` for `operation`.
pub(crate) async fn gate(
    app: &TestApp,
    key: &str,
    lease: &str,
    operation: &str,
    extra: Value,
) -> (u16, Value) {
    let mut body = json!({"namespace": "support", "key": key, "lease": lease,
        "effects": reply_effect(operation), "summary": "Refund reply for ticket 42"});
    if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
        b.extend(e);
    }
    app.post("/v1/runs/gate", Some(&app.workflow), &body).await
}

/// Claim and gate; returns the approval link's path.
pub(crate) async fn pending(app: &TestApp, key: &str, operation: &str) -> String {
    let lease = claim(app, key, Some("ursula")).await;
    let (status, body) = gate(app, key, &lease, operation, json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "awaiting_human");
    let url = body["approval_url"].as_str().unwrap();
    url.strip_prefix(&app.base)
        .expect("link under the public base")
        .to_owned()
}

/// A browser session: a cookie from `POST /login`.
pub(crate) struct Browser {
    client: reqwest::Client,
    base: String,
    pub cookie: String,
    extra: Vec<(String, String)>,
}

fn form(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

impl Browser {
    pub(crate) fn anonymous(app: &TestApp) -> Self {
        Self {
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            base: app.base.clone(),
            cookie: String::new(),
            extra: Vec::new(),
        }
    }

    /// Signs in with a token; panics unless it works.
    pub(crate) async fn login(app: &TestApp, token: &str) -> Self {
        let mut b = Self::anonymous(app);
        let resp = b
            .post_form("/login", &[("token", token), ("next", "/approvals")])
            .await;
        assert_eq!(resp.status(), 303);
        let set = resp.headers()["set-cookie"].to_str().unwrap().to_owned();
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
        b.cookie = set.split(';').next().unwrap().to_owned();
        b
    }

    /// Sends this header with every request (an SSO proxy's).
    pub(crate) fn with_header(mut self, name: &str, value: &str) -> Self {
        self.extra.push((name.into(), value.into()));
        self
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.base))
            .header("cookie", &self.cookie);
        for (k, v) in &self.extra {
            req = req.header(k.as_str(), v.as_str());
        }
        req
    }

    /// GETs and keeps a session cookie the answer sets (an SSO sign-in).
    pub(crate) async fn get_keeping_cookie(&mut self, path: &str) -> (u16, String) {
        let resp = self
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .unwrap();
        if let Some(set) = resp.headers().get("set-cookie") {
            self.cookie = set.to_str().unwrap().split(';').next().unwrap().to_owned();
        }
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    /// GETs and returns the whole response (headers too).
    pub(crate) async fn request_get(&self, path: &str) -> reqwest::Response {
        self.request(reqwest::Method::GET, path)
            .send()
            .await
            .unwrap()
    }

    pub(crate) async fn get(&self, path: &str) -> (u16, String) {
        let resp = self
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    pub(crate) async fn post_form(&self, path: &str, pairs: &[(&str, &str)]) -> reqwest::Response {
        self.request(reqwest::Method::POST, path)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(pairs))
            .send()
            .await
            .unwrap()
    }

    /// Posts a decision; returns status and page.
    pub(crate) async fn decide(&self, path: &str, decision: &str, csrf: &str) -> (u16, String) {
        let resp = self
            .post_form(
                path,
                &[
                    ("decision", decision),
                    ("csrf", csrf),
                    ("reason", "checked"),
                ],
            )
            .await;
        (resp.status().as_u16(), resp.text().await.unwrap())
    }
}

/// The CSRF token of a confirmation page.
pub(crate) fn csrf_of(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .expect("the page offers the form")
        + 19;
    page[at..].split('"').next().unwrap().to_owned()
}

/// The CSRF token a session could compute for itself (from its cookie):
/// proves the server checks the person on POST, not only by hiding the form.
pub(crate) async fn own_csrf(app: &TestApp, b: &Browser, key: &str) -> String {
    let secret =
        oncegate::approval::Secret::parse(b.cookie.trim_start_matches("og_session=")).unwrap();
    let id = app
        .db
        .text(&format!(
            "SELECT id FROM challenges WHERE run_key = '{key}' ORDER BY created_at LIMIT 1"
        ))
        .await;
    secret.csrf(&id)
}

/// Effects in the outbox for `support/<key>` (excluding callbacks).
pub(crate) async fn outbox_rows(app: &TestApp, key: &str) -> i64 {
    app.db
        .count(&format!(
            "SELECT COUNT(*) FROM effects WHERE namespace = 'support' AND run_key = '{key}' \
             AND operation <> 'approval.callback'"
        ))
        .await
}

/// Drives the dispatcher until `support/<key>` completes; its reply went
/// to the target exactly once.
pub(crate) async fn sent_once(app: &TestApp, target: &MockTarget, key: &str) {
    let dispatcher = app.dispatcher();
    eventually(
        "the approved effect to be sent",
        Duration::from_secs(15),
        || async {
            dispatcher.dispatch_once().await.unwrap();
            (run_state(app, key).await == "completed").then_some(())
        },
    )
    .await;
    assert_eq!(
        target.effect_count_for_key(&format!("support:{key}:reply")),
        1,
        "sent exactly once"
    );
}

pub(crate) async fn run_state(app: &TestApp, key: &str) -> String {
    let (_, run) = app.get_run("support", key).await;
    run["state"].as_str().unwrap_or_default().to_owned()
}

async fn concurrent_approvals_consume_once(backend: Backend) {
    let (app, target, _) = gated_app(backend, 0.0, 3600).await;
    let link = pending(&app, "t-1", "send_reply").await;
    assert_eq!(
        outbox_rows(&app, "t-1").await,
        0,
        "staged effects are not in the outbox"
    );
    let alice = Browser::login(&app, &app.approver).await;
    let (status, page) = alice.get(&link).await;
    assert_eq!(status, 200);
    assert!(page.contains("support / t-1") && page.contains("https://crm.example/tickets/42"));
    let csrf = csrf_of(&page);
    let answers = join_all((0..10).map(|_| alice.decide(&link, "approve", &csrf))).await;
    let ok = answers.iter().filter(|(s, _)| *s == 200).count();
    assert_eq!(
        ok,
        1,
        "{:?}",
        answers.iter().map(|a| a.0).collect::<Vec<_>>()
    );
    assert!(answers.iter().all(|(s, _)| *s == 200 || *s == 409));
    assert_eq!(outbox_rows(&app, "t-1").await, 1, "one set of outbox rows");
    assert_eq!(run_state(&app, "t-1").await, "approved");
    let (status, page) = alice.decide(&link, "approve", &csrf).await;
    assert_eq!(status, 409, "a used link is refused");
    assert!(page.contains("already used"));
    let dispatcher = app.dispatcher();
    eventually(
        "the approved effect to be sent",
        Duration::from_secs(10),
        || async {
            dispatcher.dispatch_once().await.unwrap();
            (run_state(&app, "t-1").await == "completed").then_some(())
        },
    )
    .await;
    assert_eq!(target.effect_count_for_key("support:t-1:reply"), 1);
    let trail = app
        .db
        .count("SELECT COUNT(*) FROM audit_events WHERE kind = 'approval_consumed' AND actor = 'alice'")
        .await;
    assert_eq!(trail, 1, "the approver is the actor in the audit log");
}

async fn get_changes_nothing(backend: Backend) {
    let (app, _target, _) = gated_app(backend, 0.0, 3600).await;
    let link = pending(&app, "t-2", "send_reply").await;
    let before = app.db.count("SELECT COUNT(*) FROM audit_events").await;
    let alice = Browser::login(&app, &app.approver).await;
    let anonymous = Browser::anonymous(&app);
    for i in 0..50 {
        let (status, _) = if i % 2 == 0 {
            alice.get(&link).await
        } else {
            anonymous.get(&link).await
        };
        assert!(status == 200 || status == 401, "{status}");
    }
    assert_eq!(
        app.db.count("SELECT COUNT(*) FROM audit_events").await,
        before
    );
    assert_eq!(run_state(&app, "t-2").await, "awaiting_human");
    assert_eq!(
        app.db
            .count("SELECT COUNT(*) FROM challenges WHERE state = 'pending'")
            .await,
        1
    );
    assert_eq!(outbox_rows(&app, "t-2").await, 0);
}

async fn reject_sends_nothing_and_callbacks_report(backend: Backend) {
    let (app, target, _) = gated_app(backend, 0.0, 3600).await;
    let lease = claim(&app, "t-3", None).await;
    let callback = target.url("/resume/t-3");
    let (status, body) = gate(
        &app,
        "t-3",
        &lease,
        "send_reply",
        json!({"callback_url": callback}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let link = body["approval_url"]
        .as_str()
        .unwrap()
        .strip_prefix(&app.base)
        .unwrap()
        .to_owned();
    let alice = Browser::login(&app, &app.approver).await;
    let csrf = csrf_of(&alice.get(&link).await.1);
    let (status, page) = alice.decide(&link, "reject", &csrf).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(run_state(&app, "t-3").await, "failed_terminal");
    assert_eq!(
        outbox_rows(&app, "t-3").await,
        0,
        "reject enqueues no effect"
    );
    let dispatcher = app.dispatcher();
    let sent = eventually("the callback", Duration::from_secs(10), || async {
        dispatcher.dispatch_once().await.unwrap();
        target
            .requests()
            .into_iter()
            .find(|r| r.path == "/resume/t-3")
    })
    .await;
    let reported: Value = serde_json::from_slice(&sent.body).unwrap();
    assert_eq!(reported["decision"], "rejected");
    assert_eq!(reported["state"], "failed_terminal");
    assert_eq!(
        target.effect_count_for_key("support:t-3:reply"),
        0,
        "nothing else was sent"
    );
    let (_, run) = app.get_run("support", "t-3").await;
    assert!(
        run["reason"]
            .as_str()
            .unwrap()
            .contains("rejected by alice"),
        "{run}"
    );
}

async fn failure_between_consume_and_outbox_commits_nothing(backend: Backend) {
    let (app, target, _) = gated_app(backend, 0.0, 3600).await;
    let link = pending(&app, "t-4", "send_reply").await;
    let alice = Browser::login(&app, &app.approver).await;
    let csrf = csrf_of(&alice.get(&link).await.1);
    match backend {
        Backend::Sqlite => {
            app.db
                .exec(
                    "CREATE TRIGGER injected BEFORE INSERT ON effects BEGIN \
                 SELECT RAISE(ABORT, 'injected failure'); END",
                )
                .await
        }
        Backend::Postgres => {
            app.db
                .exec(
                    "CREATE FUNCTION injected() RETURNS trigger AS $$ BEGIN \
                 RAISE EXCEPTION 'injected failure'; END $$ LANGUAGE plpgsql",
                )
                .await;
            app.db
                .exec(
                    "CREATE TRIGGER injected BEFORE INSERT ON effects \
                 FOR EACH ROW EXECUTE FUNCTION injected()",
                )
                .await
        }
    }
    let (status, _) = alice.decide(&link, "approve", &csrf).await;
    assert_eq!(status, 500, "the outbox insert failed");
    assert_eq!(run_state(&app, "t-4").await, "awaiting_human");
    assert_eq!(
        app.db
            .count("SELECT COUNT(*) FROM challenges WHERE state = 'pending'")
            .await,
        1,
        "the challenge was not consumed"
    );
    app.db
        .exec(match backend {
            Backend::Sqlite => "DROP TRIGGER injected",
            Backend::Postgres => "DROP TRIGGER injected ON effects",
        })
        .await;
    let (status, page) = alice.decide(&link, "approve", &csrf).await;
    assert_eq!(status, 200, "the token is still usable: {page}");
    assert_eq!(outbox_rows(&app, "t-4").await, 1);
    assert!(target.requests().is_empty());
}

async fn model_output_renders_inert(backend: Backend) {
    let (app, _target, _) = gated_app(backend, 1.0, 3600).await;
    let lease = claim(&app, "t-5", None).await;
    let evil = "<script>alert('x')</script><img src=x onerror=alert(1)>";
    let (status, body) = app
        .post(
            "/v1/runs/output",
            Some(&app.workflow),
            &json!({"namespace": "support", "key": "t-5",
            "lease": lease, "operation": "refund", "output": {"amount": 10, "reply": evil},
            "model": {"provider_class": "hosted", "model": "m-1", "revision": "2026-11"}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = gate(&app, "t-5", &lease, "refund", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["decision"], "human",
        "sample_rate 1 sends every run to a person"
    );
    let link = body["approval_url"]
        .as_str()
        .unwrap()
        .strip_prefix(&app.base)
        .unwrap()
        .to_owned();
    let alice = Browser::login(&app, &app.approver).await;
    let (status, page) = alice.get(&link).await;
    assert_eq!(status, 200);
    assert!(
        !page.contains("<script>") && !page.contains("<img"),
        "output must be escaped"
    );
    assert!(
        page.contains("&lt;script&gt;"),
        "the output is shown as text"
    );
    assert!(
        page.contains("m-1") && page.contains("2026-11"),
        "the model is named"
    );
}

on_both_backends!(
    concurrent_approvals_consume_once,
    get_changes_nothing,
    reject_sends_nothing_and_callbacks_report,
    failure_between_consume_and_outbox_commits_nothing,
    model_output_renders_inert,
);
