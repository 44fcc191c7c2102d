//! The operator console over plain HTTP, on both backends: sign-in and scopes, CSRF on every form, GET changing
//! nothing, escaping. The shared fixtures of the browser tests live here.

use std::time::Duration;

use oncegate::config::{Config, Scope};
use serde_json::{json, Value};

use crate::approvals::Browser as Http;
use crate::harness::{eventually, on_both_backends, token, Backend, TestApp};
use crate::target::{Behaviour, MockTarget};

/// A console app: target `mail` (the mock), `send_email` (no gate) and
/// `send_reply` (approve before acting, model output validated first).
pub struct Console {
    pub app: TestApp,
    pub mock: MockTarget,
    /// Operator and approver.
    pub olga: String,
    /// Admin.
    pub root: String,
}

fn console_config(base: &str) -> Config {
    toml::from_str(&format!(
        r#"
[[targets]]
name = "mail"
base_url = "{base}"
timeout_ms = 2000
connect_timeout_ms = 500
retry = {{ max_attempts = 2, base_ms = 1, cap_ms = 2, max_elapsed_ms = 60000 }}

[[operations]]
name = "send_email"
gate = "none"

[[operations]]
name = "send_reply"
customer_visible = true
[operations.approval]
expiry_secs = 86400
[operations.output]
max_repairs = 2
[operations.output.schema]
type = "object"
required = ["reply"]
properties.reply = {{ type = "string", maxLength = 2000 }}
properties.category = {{ enum = ["refund", "faq", "complaint"] }}
"#
    ))
    .unwrap()
}

impl Console {
    pub async fn start(backend: Backend) -> Self {
        let mock = MockTarget::start().await;
        mock.on_path("/bad", Behaviour::no_commit(422));
        let parsed = console_config(&mock.base_url());
        let (olga, olga_entry) = token("olga", &[Scope::Operator, Scope::Approver]);
        let (root, root_entry) = token("root", &[Scope::Admin]);
        let app = TestApp::spawn_with(backend, move |c| {
            c.targets = parsed.targets;
            c.operations = parsed.operations;
            c.tokens.extend([olga_entry, root_entry]);
            c.validate().unwrap();
        })
        .await;
        Self {
            app,
            mock,
            olga,
            root,
        }
    }

    /// Claims `ns/key`; returns the lease.
    pub async fn claim(&self, ns: &str, key: &str, extra: Value) -> String {
        let mut body = json!({"namespace": ns, "key": key, "payload": {"k": key},
            "execution_ref": format!("exec-{key}")});
        if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
            b.extend(e);
        }
        let (status, answer) = self.app.claim(body).await;
        assert_eq!(status, 200, "{answer}");
        answer["lease"].as_str().expect("claimed").to_owned()
    }

    /// Claims `crm/key` and commits one email to `path` (not sent yet).
    pub async fn email(&self, key: &str, path: &str) {
        let lease = self
            .claim("crm", key, json!({"operation": "send_email"}))
            .await;
        let effects = json!([{"operation": "send_email", "effect_type": "send_email",
            "target": "mail", "path": path, "body": {"to": "a@example.com"}}]);
        let body = json!({"namespace": "crm", "key": key, "lease": lease, "effects": effects});
        let (status, answer) = self
            .app
            .post("/v1/runs/commit", Some(&self.app.workflow), &body)
            .await;
        assert_eq!(status, 200, "{answer}");
    }

    /// Claims `support/key` for ursula, records the model's draft and gates
    /// it; returns the approval link (absolute URL).
    pub async fn gated_reply(&self, key: &str, reply: &str) -> String {
        let lease = self
            .claim(
                "support",
                key,
                json!({"operation": "send_reply", "requested_by": "ursula",
                    "source_url": format!("https://crm.example/tickets/{key}")}),
            )
            .await;
        let output = json!({"namespace": "support", "key": key, "lease": lease,
            "output": {"reply": reply, "category": "refund"},
            "model": {"provider_class": "hosted", "model": "gpt-4o-mini", "revision": "2024-07-18"}});
        let (status, answer) = self
            .app
            .post("/v1/runs/output", Some(&self.app.workflow), &output)
            .await;
        assert_eq!(status, 200, "{answer}");
        let gate = json!({"namespace": "support", "key": key, "lease": lease,
            "summary": format!("Refund reply for ticket {key}"),
            "effects": [{"operation": "send_reply", "effect_type": "reply", "target": "mail",
                "path": "/send", "body": {"to": "customer@example.com", "text": reply}}]});
        let (status, answer) = self
            .app
            .post("/v1/runs/gate", Some(&self.app.workflow), &gate)
            .await;
        assert_eq!(status, 200, "{answer}");
        answer["approval_url"].as_str().unwrap().to_owned()
    }

    /// Steps the dispatcher until `ns/key` is in `state`.
    pub async fn dispatch_until(&self, ns: &str, key: &str, state: &str) {
        let dispatcher = self.app.dispatcher();
        eventually(
            &format!("{ns}/{key} to be {state}"),
            Duration::from_secs(30),
            || async {
                dispatcher.dispatch_once().await.unwrap();
                (self.state(ns, key).await == state).then_some(())
            },
        )
        .await;
    }

    /// The run's state now.
    pub async fn state(&self, ns: &str, key: &str) -> String {
        let (_, run) = self.app.get_run(ns, key).await;
        run["state"].as_str().unwrap_or_default().to_owned()
    }

    /// The id of the open dead letter of `crm/key`.
    pub async fn dead_letter_id(&self, key: &str) -> String {
        self.app
            .db
            .text(&format!(
                "SELECT id FROM dead_letters WHERE namespace = 'crm' AND run_key = '{key}' \
                 AND resolved_at IS NULL"
            ))
            .await
    }
}

/// The CSRF token of the form posting to `action` (the bar's sign-out form
/// has one too).
pub fn csrf_in(page: &str, action: &str) -> String {
    let form = page
        .find(&format!("action=\"{action}\""))
        .unwrap_or_else(|| panic!("no form posts to {action}"));
    crate::approvals::csrf_of(&page[form..])
}

on_both_backends!(
    pages_need_a_session_and_the_operator_scope,
    every_form_checks_its_csrf_token_and_get_changes_nothing,
    hostile_values_are_shown_as_text,
    an_admin_disables_and_enables_a_target_from_the_console,
);

async fn pages_need_a_session_and_the_operator_scope(backend: Backend) {
    let c = Console::start(backend).await;
    let anonymous = Http::anonymous(&c.app);
    let resp = anonymous
        .post_form("/ui/actions", &[("scope", "*"), ("enabled", "false")])
        .await;
    assert_eq!(resp.status(), 303, "no session: to the sign-in page");
    let (status, _) = anonymous.get("/ui/runs?key=a/b").await;
    assert_eq!(status, 303);
    let resp = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{}/ui/runs?key=a/b", c.app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.headers()["location"],
        "/login?next=%2Fui%2Fruns%3Fkey%3Da%2Fb"
    );
    let alice = Http::login(&c.app, &c.app.approver).await;
    assert_eq!(alice.get("/ui").await.0, 403, "an approver is no operator");
    assert_eq!(alice.get("/ui/dead-letters").await.0, 403);
    let (status, inbox) = alice.get("/ui/approvals").await;
    assert_eq!(status, 200, "approvers open the inbox");
    assert!(
        !inbox.contains("href=\"/ui/dead-letters\""),
        "their bar shows the inbox only"
    );
    let ops = Http::login(&c.app, &c.app.operator).await;
    for page in [
        "/ui",
        "/ui/runs",
        "/ui/approvals",
        "/ui/dead-letters",
        "/ui/replay-jobs",
        "/ui/actions",
        "/ui/targets",
    ] {
        let resp = ops.request_get(page).await;
        assert_eq!(resp.status(), 200, "{page}");
        let csp = resp.headers()["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("default-src 'none'"), "{page}: {csp}");
        assert_eq!(resp.headers()["x-frame-options"], "DENY");
        assert_eq!(resp.headers()["cache-control"], "no-store");
        let html = resp.text().await.unwrap();
        assert!(!html.contains("<script"), "{page} has no script");
        assert!(!html.contains("<style"), "{page} has no inline style");
        let links: Vec<&str> = html
            .match_indices("<link")
            .map(|(at, _)| &html[at..])
            .collect();
        assert!(
            links.len() == 1
                && links[0].starts_with("<link rel=\"stylesheet\" href=\"/assets/console.css\">"),
            "{page} links its own stylesheet only"
        );
        assert!(
            !html.contains(" src=") && !html.contains("url("),
            "{page} fetches nothing else"
        );
    }
    let resp = ops
        .post_form("/ui/actions", &[("scope", "*"), ("enabled", "false")])
        .await;
    assert_eq!(
        resp.status(),
        403,
        "operators read the switch; admins change it"
    );
    assert_eq!(
        c.app.db.count("SELECT COUNT(*) FROM action_switches").await,
        0
    );
    let resp = ops
        .post_form("/ui/targets", &[("target", "mail"), ("enabled", "false")])
        .await;
    assert_eq!(
        resp.status(),
        403,
        "operators read target health; admins change it"
    );
    assert_eq!(
        c.app.db.count("SELECT COUNT(*) FROM target_health").await,
        0
    );
    c.app.stop().await;
}

async fn every_form_checks_its_csrf_token_and_get_changes_nothing(backend: Backend) {
    let c = Console::start(backend).await;
    c.email("bad-1", "/bad").await;
    c.dispatch_until("crm", "bad-1", "dead_lettered").await;
    let id = c.dead_letter_id("bad-1").await;
    let root = Http::login(&c.app, &c.root).await;
    let audit_before = c.app.db.count("SELECT COUNT(*) FROM audit_events").await;
    for page in [
        "/ui".to_owned(),
        "/ui/runs?key=bad".to_owned(),
        "/ui/run?namespace=crm&key=bad-1".to_owned(),
        "/ui/dead-letters".to_owned(),
        format!("/ui/dead-letters/{id}"),
        format!("/ui/replay?ids={id}"),
        "/ui/actions/confirm?scope=*&enabled=false".to_owned(),
        "/ui/targets".to_owned(),
        "/ui/targets/confirm?target=mail&enabled=false".to_owned(),
        "/ui/approvals".to_owned(),
    ] {
        for _ in 0..3 {
            assert_eq!(root.get(&page).await.0, 200, "{page}");
        }
    }
    let (_, page) = root.get(&format!("/ui/dead-letters/{id}")).await;
    let replay_token = csrf_in(&page, &format!("/ui/dead-letters/{id}/replay"));
    let forms: Vec<(String, Vec<(&str, &str)>)> = vec![
        (
            format!("/ui/dead-letters/{id}/replay"),
            vec![("reason", "x")],
        ),
        (
            format!("/ui/dead-letters/{id}/resolve"),
            vec![("resolution", "reject"), ("note", "x")],
        ),
        (
            "/ui/actions".into(),
            vec![("scope", "*"), ("enabled", "false")],
        ),
        (
            "/ui/replay-jobs".into(),
            vec![("ids", id.as_str()), ("reason", "x"), ("rate_per_sec", "1")],
        ),
        (
            "/ui/targets".into(),
            vec![("target", "mail"), ("enabled", "false")],
        ),
    ];
    for (path, fields) in &forms {
        let missing = root.post_form(path, fields).await;
        assert_eq!(missing.status(), 403, "{path} without a token");
        let mut wrong = fields.clone();
        wrong.push(("csrf", "forged"));
        assert_eq!(
            root.post_form(path, &wrong).await.status(),
            403,
            "{path} forged"
        );
        if !path.ends_with("/replay") {
            let mut other = fields.clone();
            other.push(("csrf", replay_token.as_str()));
            assert_eq!(
                root.post_form(path, &other).await.status(),
                403,
                "{path} with another form's token"
            );
        }
    }
    assert_eq!(
        c.app.db.count("SELECT COUNT(*) FROM audit_events").await,
        audit_before,
        "neither GETs nor refused forms wrote anything"
    );
    assert_eq!(c.state("crm", "bad-1").await, "dead_lettered");
    assert_eq!(
        c.app.db.count("SELECT COUNT(*) FROM action_switches").await,
        0
    );
    assert_eq!(c.app.db.count("SELECT COUNT(*) FROM replay_jobs").await, 0);
    assert_eq!(
        c.app.db.count("SELECT COUNT(*) FROM target_health").await,
        0,
        "no target was disabled"
    );
    let resp = root
        .post_form(
            &format!("/ui/dead-letters/{id}/replay"),
            &[("reason", "target fixed"), ("csrf", replay_token.as_str())],
        )
        .await;
    assert_eq!(resp.status(), 303, "the right token works");
    assert_eq!(c.state("crm", "bad-1").await, "approved");
    let actor = c
        .app
        .db
        .text("SELECT actor FROM audit_events WHERE kind = 'replay'")
        .await;
    assert_eq!(actor, "root", "the signed-in subject is the actor");
    c.app.stop().await;
}

async fn hostile_values_are_shown_as_text(backend: Backend) {
    let c = Console::start(backend).await;
    let key = "<script>alert(1)</script>";
    c.claim("crm", key, json!({"source_url": "javascript:alert(2)"}))
        .await;
    c.gated_reply("t-<b>x</b>", "Hi <img src=x onerror=alert(3)>")
        .await;
    let ops = Http::login(&c.app, &c.olga).await;
    let run_page = format!(
        "/ui/run?namespace=crm&key={}",
        url::form_urlencoded::byte_serialize(key.as_bytes()).collect::<String>()
    );
    let search = format!(
        "/ui/runs?key={}",
        url::form_urlencoded::byte_serialize(b"<script>").collect::<String>()
    );
    for page in [
        run_page.as_str(),
        search.as_str(),
        "/ui/approvals",
        "/ui/runs?namespace=support",
    ] {
        let (status, html) = ops.get(page).await;
        assert_eq!(status, 200, "{page}");
        assert!(!html.contains("<script>alert"), "{page}");
        assert!(!html.contains("<img src=x"), "{page}");
        assert!(!html.contains("<b>x</b>"), "{page}");
        assert!(!html.contains("href=\"javascript:"), "{page}");
    }
    let (_, html) = ops.get(&run_page).await;
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    let (_, html) = ops.get("/ui/approvals").await;
    assert!(
        html.contains("t-&lt;b&gt;x&lt;/b&gt;"),
        "the key is shown, as text"
    );
    c.app.stop().await;
}

async fn an_admin_disables_and_enables_a_target_from_the_console(backend: Backend) {
    let c = Console::start(backend).await;
    let root = Http::login(&c.app, &c.root).await;
    let state = || {
        c.app
            .db
            .text("SELECT state FROM target_health WHERE target = 'mail'")
    };
    for (enabled, expected) in [("false", "disabled"), ("true", "healthy")] {
        let (status, page) = root
            .get(&format!(
                "/ui/targets/confirm?target=mail&enabled={enabled}"
            ))
            .await;
        assert_eq!(status, 200);
        let csrf = csrf_in(&page, "/ui/targets");
        let fields = [
            ("target", "mail"),
            ("enabled", enabled),
            ("csrf", csrf.as_str()),
        ];
        let resp = root.post_form("/ui/targets", &fields).await;
        assert_eq!(resp.status(), 303);
        assert_eq!(state().await, expected);
        let (_, list) = root.get("/ui/targets").await;
        assert!(list.contains(&format!("badge {expected}")), "{list}");
    }
    let audited = "SELECT COUNT(*) FROM audit_events WHERE run_key = 'target:mail' \
        AND kind IN ('target_disabled', 'target_enabled')";
    assert_eq!(c.app.db.count(audited).await, 2);
    c.app.stop().await;
}
