//! The approval transaction under SIGKILL: gated runs driven claim → gate
//! → approve while generations die inside the decision transaction, between
//! the challenge's consume and the outbox insert. Each approval is posted
//! until answered (sometimes twice at once, an approver's double click);
//! the crash must undo the consume, so the retry succeeds, and each
//! approved run sends its effect once.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use oncegate::config::Scope;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use super::points::crash_budget;
use super::supervisor::{CrashPlan, Supervisor};
use super::verdict::{check, Item, Mode};
use super::{db, events, report};
use crate::harness::{token, Backend, TestDb};
use crate::process::write_config_with;
use crate::target::MockTarget;

fn config(honours: &MockTarget, ignores: &MockTarget, approver_digest: &str) -> String {
    let target = |name: &str, base: String, honours: bool| {
        format!(
            "[[targets]]\nname = \"{name}\"\nbase_url = \"{base}\"\nhonours_idempotency_keys = {honours}\n\
             timeout_ms = 1000\nconnect_timeout_ms = 500\n[targets.retry]\nbase_ms = 20\ncap_ms = 200\n\n"
        )
    };
    format!(
        "[[tokens]]\nsubject = \"bob\"\ndigest = \"{approver_digest}\"\nscopes = [\"approver\"]\n\n\
         [dispatcher]\nlease_ms = 4000\nidle_poll_ms = 50\n\n{}{}\
         [[operations]]\nname = \"send_reply\"\ncustomer_visible = true\n[operations.approval]\nexpiry_secs = 3600\n",
        target("mail_hon", honours.base_url(), true),
        target("mail_ign", ignores.base_url(), false),
    )
}

/// The workflow and approver side of the run.
struct People {
    client: reqwest::Client,
    workflow: String,
    approver: String,
    cookie: String,
}

impl People {
    async fn post(&self, base: &str, path: &str, body: Value) -> Value {
        let resp = self
            .client
            .post(format!("{base}{path}"))
            .bearer_auth(&self.workflow)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path} refused on a live server");
        resp.json().await.unwrap()
    }

    /// Claims and gates `support/<key>`; returns the challenge id.
    async fn gated(&self, base: &str, key: &str, target: &str) -> String {
        let claim = json!({ "namespace": "support", "key": key, "payload": { "k": key }, "requested_by": "ursula" });
        let lease = self.post(base, "/v1/claims", claim).await["lease"]
            .as_str()
            .unwrap()
            .to_owned();
        let effects = json!([{ "operation": "send_reply", "effect_type": "reply", "target": target,
            "path": "/send", "body": { "to": "customer@example.com", "text": key } }]);
        let gate =
            json!({ "namespace": "support", "key": key, "lease": lease, "effects": effects });
        self.post(base, "/v1/runs/gate", gate).await["challenge_id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    async fn login(&mut self, base: &str) {
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

    /// Posts the approval `copies` times at once; returns the statuses (0:
    /// no answer).
    async fn approve(&self, base: &str, challenge: &str, copies: usize) -> Vec<u16> {
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

async fn approval_run(backend: Backend) {
    let started = Instant::now();
    let (honours, ignores) = (MockTarget::start().await, MockTarget::start().await);
    honours.honour_keys("idempotency-key", true);
    let (approver, entry) = token("bob", &[Scope::Approver]);
    let db = TestDb::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let (config, workflow) = write_config_with(
        dir.path(),
        &db.url,
        &config(&honours, &ignores, &entry.digest),
    );
    let n = 2 * events();
    let budget = crash_budget();
    let seed = 0xa99 ^ n as u64;
    let plan = CrashPlan {
        point: Some("approval_decide"),
        spread: (2 * n / budget) as u64,
        budget,
        seed,
    };
    let mut sup = Supervisor::new(&config, dir.path(), &db.url, plan);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut people = People {
        client,
        workflow,
        approver,
        cookie: String::new(),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let base = sup.base().await;
    people.login(&base).await;

    let (mut items, mut posts, mut double) = (Vec::new(), 0, 0);
    let deadline = Instant::now() + Duration::from_secs(300);
    for i in 0..n {
        let key = format!("k{i:05}");
        let mode = if i % 2 == 0 {
            Mode::Honours
        } else {
            Mode::Ignores
        };
        let target = if mode == Mode::Honours {
            "mail_hon"
        } else {
            "mail_ign"
        };
        let challenge = people.gated(&sup.base().await, &key, target).await;
        loop {
            assert!(
                Instant::now() < deadline,
                "approvals still unanswered after 300 s"
            );
            let copies = if rng.gen_bool(0.15) { 2 } else { 1 };
            double += usize::from(copies == 2);
            posts += copies;
            let statuses = people.approve(&sup.base().await, &challenge, copies).await;
            sup.reap().await;
            assert!(
                statuses.iter().all(|s| matches!(s, 0 | 200 | 409)),
                "{key}: {statuses:?}"
            );
            if statuses.contains(&200) {
                assert!(
                    statuses.iter().filter(|s| **s == 200).count() == 1,
                    "{key} approved twice: {statuses:?}"
                );
                break;
            }
            assert!(
                !statuses.contains(&409),
                "{key}: used before any approval was answered: {statuses:?}"
            );
        }
        items.push(Item {
            namespace: "support".into(),
            run_key: key.clone(),
            key: format!("support:{key}:reply"),
            mode,
            acked: true,
        });
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    while !db::settled(&db.url).await {
        if Instant::now() >= deadline {
            panic!(
                "the outbox did not drain in 180 s:\n{}",
                db::unsettled(&db.url).await
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        sup.reap().await;
        sup.base().await;
    }
    sup.stop().await;

    assert!(
        !sup.crashes.is_empty(),
        "no generation ever reached approval_decide"
    );
    let consumed = db::count(
        &db.url,
        "SELECT COUNT(*) FROM challenges WHERE state = 'approved'",
    )
    .await;
    assert_eq!(consumed, n as i64, "every challenge consumed once");
    let effects = db::count(
        &db.url,
        "SELECT COUNT(*) FROM effects WHERE operation = 'send_reply'",
    )
    .await;
    assert_eq!(effects, n as i64, "one effect per approved run");
    let honoured = check(&db.url, &items, Mode::Honours, &honours, &sup.crashes).await;
    let ignored = check(&db.url, &items, Mode::Ignores, &ignores, &sup.crashes).await;
    report(&json!({
        "point": "approval_decide",
        "backend": format!("{backend:?}").to_lowercase(),
        "events_per_target": n / 2,
        "approval_posts": posts,
        "double_posts": double,
        "crashes": sup.crashes.len(),
        "generations": sup.generations,
        "in_flight_at_death": sup.crashes.iter().map(|c| c.in_flight.len()).sum::<usize>(),
        "honours_keys": honoured,
        "ignores_keys": ignored,
        "seconds": started.elapsed().as_secs_f64().round(),
    }));
}

mod approval_decide {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::approval_run(crate::harness::Backend::Sqlite).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::approval_run(crate::harness::Backend::Postgres).await
    }
}
