//! The approval browser test: a person in headless Chromium signs in, opens the
//! approval link, sees the card, approves, and the target receives the
//! effect once. Driven through chromedriver's W3C WebDriver protocol.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::approvals::{claim, gate, gated_app, run_state, sent_once};
use crate::harness::{eventually, Backend};

/// A chromedriver process and one headless Chromium session.
struct Browser {
    driver: Child,
    http: reqwest::Client,
    session: String,
}

impl Drop for Browser {
    /// Ends chromedriver and the Chromium it started, whatever the test's
    /// outcome: chromedriver runs in a process group of its own, and the
    /// whole group is killed (killing chromedriver alone left Chromium
    /// running, orphaned, after the suite).
    fn drop(&mut self) {
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Browser {
    async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver must be installed (apt-get install chromium chromium-driver)");
        let mut browser = Self {
            driver,
            http: reqwest::Client::new(),
            session: format!("http://127.0.0.1:{port}"),
        };
        let base = browser.session.clone();
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome",
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": ["--headless=new",
                "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--window-size=1280,900"]}}}});
        let http = browser.http.clone();
        let created: Value = eventually(
            "chromedriver to open a session",
            Duration::from_secs(30),
            || {
                let (http, caps, base) = (http.clone(), caps.clone(), base.clone());
                async move {
                    let resp = http
                        .post(format!("{base}/session"))
                        .json(&caps)
                        .send()
                        .await
                        .ok()?;
                    resp.json::<Value>()
                        .await
                        .ok()
                        .filter(|v| v["value"]["sessionId"].is_string())
                }
            },
        )
        .await;
        browser.session = format!(
            "{base}/session/{}",
            created["value"]["sessionId"].as_str().unwrap()
        );
        browser
    }

    /// One WebDriver command; `Err` carries the driver's error.
    async fn try_call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> Result<Value, Value> {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.session));
        if method != reqwest::Method::GET {
            req = req.json(&body);
        }
        let value: Value = req.send().await.unwrap().json().await.unwrap();
        if value["value"]["error"].is_null() {
            Ok(value["value"].clone())
        } else {
            Err(value)
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        self.try_call(method, path, body)
            .await
            .unwrap_or_else(|e| panic!("webdriver {path}: {e}"))
    }

    async fn go(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", json!({ "url": url }))
            .await;
    }

    /// The element `css` selects, waiting (with a deadline) while a page loads.
    async fn find(&self, css: &str) -> String {
        let query = json!({"using": "css selector", "value": css});
        let found = eventually(
            &format!("an element {css}"),
            Duration::from_secs(15),
            || async {
                self.try_call(reqwest::Method::POST, "/element", query.clone())
                    .await
                    .ok()
            },
        )
        .await;
        found
            .as_object()
            .unwrap()
            .values()
            .next()
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The page's text once it contains `wanted` (polled with a deadline).
    async fn text_with(&self, wanted: &str) -> String {
        eventually(
            &format!("the page to show {wanted:?}"),
            Duration::from_secs(15),
            || async {
                let body = self.find("body").await;
                let text = self
                    .try_call(
                        reqwest::Method::GET,
                        &format!("/element/{body}/text"),
                        Value::Null,
                    )
                    .await
                    .ok()?;
                let text = text.as_str().unwrap_or_default().to_owned();
                text.contains(wanted).then_some(text)
            },
        )
        .await
    }

    async fn type_into(&self, css: &str, text: &str) {
        let el = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{el}/value"),
            json!({ "text": text }),
        )
        .await;
    }

    async fn click(&self, css: &str) {
        let el = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{el}/click"),
            json!({}),
        )
        .await;
    }

    async fn url(&self) -> String {
        self.call(reqwest::Method::GET, "/url", Value::Null)
            .await
            .as_str()
            .unwrap()
            .to_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_approves_in_the_browser_and_the_effect_goes_out_once() {
    let (app, target, _) = gated_app(Backend::Sqlite, 0.0, 3600).await;
    let lease = claim(&app, "b-1", Some("ursula")).await;
    let (status, body) = gate(&app, "b-1", &lease, "send_reply", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let link = body["approval_url"].as_str().unwrap().to_owned();
    let browser = Browser::start().await;
    browser.go(&link).await;
    // The link asks an anonymous visitor to sign in.
    browser.text_with("Sign in").await;
    browser.click("a[href^='/login']").await;
    browser.type_into("#token", &app.approver).await;
    browser.click("button[type=submit]").await;
    let card = browser.text_with("Re-run protocol").await;
    let after_login = browser.url().await;
    assert!(
        after_login.ends_with(link.trim_start_matches(&app.base)),
        "back on the link: {after_login}"
    );
    for shown in [
        "support / b-1",
        "https://crm.example/tickets/42",
        "ursula",
        "support:b-1:reply",
        "Re-run protocol",
    ] {
        assert!(card.contains(shown), "the card shows {shown:?}:\n{card}");
    }
    assert_eq!(
        run_state(&app, "b-1").await,
        "awaiting_human",
        "opening the page changed nothing"
    );
    browser.click("button[value=approve]").await;
    browser.text_with("Decision recorded: approve").await;
    sent_once(&app, &target, "b-1").await;
    browser.go(&link).await;
    // The used link says so.
    browser.text_with("approved by alice").await;
}
