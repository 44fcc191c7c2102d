//! The people and programs that call oncegate's API in the workflow chaos
//! runs: a workflow (claims, gates, commits) and an approver (a browser
//! session that posts decisions). Every call reports "no answer" as status
//! 0 instead of failing: the process may be dead.

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{json, Value};

/// The workflow's token, the approver's token and session.
pub struct People {
    client: reqwest::Client,
    workflow: String,
    approver: String,
    cookie: String,
}

impl People {
    pub fn new(workflow: String, approver: String) -> Self {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        Self {
            client,
            workflow,
            approver,
            cookie: String::new(),
        }
    }

    /// POSTs JSON as the workflow: status (0: no answer) and body.
    async fn post(&self, base: &str, path: &str, body: &Value) -> (u16, Value) {
        let sent = self
            .client
            .post(format!("{base}{path}"))
            .bearer_auth(&self.workflow)
            .json(body)
            .send()
            .await;
        match sent {
            Ok(resp) => {
                let status = resp.status().as_u16();
                (status, resp.json().await.unwrap_or(Value::Null))
            }
            Err(_) => (0, Value::Null),
        }
    }

    /// Claims `namespace/key` `copies` times at once (workers racing).
    pub async fn claim(
        &self,
        base: &str,
        namespace: &str,
        key: &str,
        lease_ms: i64,
        copies: usize,
    ) -> Vec<(u16, Value)> {
        let body = json!({ "namespace": namespace, "key": key, "payload": { "k": key },
            "requested_by": "ursula", "lease_ms": lease_ms });
        join_all((0..copies).map(|_| self.post(base, "/v1/claims", &body))).await
    }

    /// The one effect of `operation` a run proposes, to `target`.
    fn effects(operation: &str, target: &str, key: &str) -> Value {
        json!([{ "operation": operation, "effect_type": "reply", "target": target,
            "path": "/send", "body": { "to": "customer@example.com", "text": key } }])
    }

    /// Gates `support/<key>` for `send_reply`.
    pub async fn gate(&self, base: &str, key: &str, lease: &str, target: &str) -> (u16, Value) {
        let body = json!({ "namespace": "support", "key": key, "lease": lease,
            "effects": Self::effects("send_reply", target, key) });
        self.post(base, "/v1/runs/gate", &body).await
    }

    /// Commits `crm/<key>` with one ungated `crm_upsert` effect.
    pub async fn commit(&self, base: &str, key: &str, lease: &str, target: &str) -> (u16, Value) {
        let body = json!({ "namespace": "crm", "key": key, "lease": lease,
            "effects": Self::effects("crm_upsert", target, key) });
        self.post(base, "/v1/runs/commit", &body).await
    }

    /// Opens the approver's browser session (stored: it outlives restarts).
    pub async fn login(&mut self, base: &str) {
        let resp = self
            .client
            .post(format!("{base}/login"))
            .form(&[("token", self.approver.as_str()), ("next", "/approvals")])
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 303);
        let set = resp.headers()["set-cookie"].to_str().unwrap();
        self.cookie = set.split(';').next().unwrap().to_owned();
    }

    /// Posts the approval of `challenge` `copies` times at once (a double
    /// click); returns the statuses.
    pub async fn approve(&self, base: &str, challenge: &str, copies: usize) -> Vec<u16> {
        let secret =
            oncegate::approval::Secret::parse(self.cookie.trim_start_matches("og_session="))
                .unwrap();
        let csrf = secret.csrf(challenge);
        let form = [
            ("decision", "approve"),
            ("csrf", csrf.as_str()),
            ("reason", "checked"),
        ];
        let posts = (0..copies).map(|_| {
            self.client
                .post(format!("{base}/approvals/{challenge}"))
                .header("cookie", &self.cookie)
                .header("accept", "application/json")
                .form(&form)
                .send()
        });
        join_all(posts)
            .await
            .into_iter()
            .map(|r| r.map(|r| r.status().as_u16()).unwrap_or(0))
            .collect()
    }
}
