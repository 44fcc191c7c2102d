//! Target health (DESIGN.md §4) on both backends: a target answering 503
//! is paused for a cool-down and probed half-open, its effects keeping
//! their retry budget; a 410 disables it until an operator enables it; a
//! paused target never holds up another. The cool-down is 3 s of a manual
//! clock (the default is 30 s), so the tests move time instead of waiting.

use std::sync::Arc;

use oncegate::clock::ManualClock;
use oncegate::config::{Config, Scope};
use oncegate::outbox::Dispatcher;
use serde_json::{json, Value};

use crate::harness::{
    answer, on_both_backends, oncegate_cli, queue_effect, token, Backend, TestApp,
};
use crate::target::{Behaviour, MockTarget};

const START: i64 = 1_800_000_000_000;
const COOL_DOWN_MS: i64 = 3_000;

on_both_backends!(
    a_target_answering_503_is_paused_and_its_effects_keep_their_budget,
    a_gone_target_is_disabled_until_an_operator_enables_it,
    a_paused_target_never_blocks_another
);

/// Targets `mail` and `crm` (threshold 3, cool-down 3 s, cap 12 s, a
/// budget of 3 attempts) and an admin token.
fn targets(
    mail: &MockTarget,
    crm: &MockTarget,
    admin: oncegate::config::TokenConfig,
) -> impl FnOnce(&mut Config) {
    let toml = ["mail", "crm"]
        .iter()
        .zip([mail.base_url(), crm.base_url()])
        .map(|(name, base)| {
            format!(
                "[[targets]]\nname = \"{name}\"\nbase_url = \"{base}\"\ntimeout_ms = 2000\n\
                 retry = {{ max_attempts = 3, base_ms = 1, cap_ms = 2, max_elapsed_ms = 3600000 }}\n\
                 health = {{ failure_threshold = 3, cool_down_ms = {COOL_DOWN_MS}, cool_down_cap_ms = 12000 }}\n"
            )
        })
        .collect::<String>();
    move |config: &mut Config| {
        let parsed: Config = toml::from_str(&toml).unwrap();
        config.targets = parsed.targets;
        config.dispatcher.lease_ms = 10_000;
        config.tokens.push(admin);
    }
}

struct Fixture {
    app: TestApp,
    clock: Arc<ManualClock>,
    mail: MockTarget,
    crm: MockTarget,
    admin: String,
    dispatcher: Dispatcher,
}

async fn fixture(backend: Backend) -> Fixture {
    let (mail, crm) = (MockTarget::start().await, MockTarget::start().await);
    let (admin, entry) = token("root", &[Scope::Admin]);
    let clock = Arc::new(ManualClock::new(START));
    let app = TestApp::spawn_clocked(backend, clock.clone(), targets(&mail, &crm, entry)).await;
    let dispatcher = app.dispatcher();
    Fixture {
        app,
        clock,
        mail,
        crm,
        admin,
        dispatcher,
    }
}

impl Fixture {
    async fn queue(&self, target: &str, keys: impl Iterator<Item = String>) {
        let mock = if target == "mail" {
            &self.mail
        } else {
            &self.crm
        };
        for key in keys {
            queue_effect(&self.app.store, &key, target, mock.url("/send")).await;
        }
    }

    async fn steps(&self, n: usize) {
        for _ in 0..n {
            self.dispatcher.dispatch_once().await.unwrap();
        }
    }

    async fn health(&self, target: &str) -> Value {
        let req = self
            .app
            .client
            .get(format!("{}/v1/admin/targets", self.app.base))
            .bearer_auth(&self.app.operator);
        let (status, all) = answer(req).await;
        assert_eq!(status, 200, "{all}");
        all.as_array()
            .unwrap()
            .iter()
            .find(|t| t["target"] == target)
            .cloned()
            .expect("every configured target is listed")
    }

    async fn count(&self, sql: &str) -> i64 {
        self.app.db.count(sql).await
    }

    async fn stop(self) {
        self.app.stop().await;
    }
}

/// A provider outage: 503 with `Retry-After: 1` (shorter than the
/// cool-down, which wins), nothing applied.
fn unavailable() -> Behaviour {
    Behaviour::RespondNoCommit {
        status: 503,
        headers: vec![("retry-after".into(), "1".into())],
        body: "{}".into(),
    }
}

fn keys(prefix: &str, n: usize) -> impl Iterator<Item = String> + '_ {
    (0..n).map(move |i| format!("{prefix}{i}"))
}

async fn a_target_answering_503_is_paused_and_its_effects_keep_their_budget(backend: Backend) {
    let f = fixture(backend).await;
    f.mail.set_default(unavailable());
    f.queue("mail", keys("m", 10)).await;

    // The first batch fails; the third failure pauses the target for
    // every instance, and the failures from then on spend no budget.
    f.steps(1).await;
    let sent = f.mail.requests().len();
    assert_eq!(f.health("mail").await["state"], "paused");
    let spent = f
        .count("SELECT COUNT(*) FROM effects WHERE target = 'mail' AND attempts > 0")
        .await;
    assert!(
        spent <= 2,
        "only the failures before the pause count: {spent}"
    );

    // While it cools down nothing goes out, however often the dispatcher runs.
    f.clock.advance_ms(COOL_DOWN_MS - 1);
    f.steps(5).await;
    assert_eq!(
        f.mail.requests().len(),
        sent,
        "nothing is sent while paused"
    );

    // The cool-down ends: exactly one probe; it fails, and the next
    // cool-down is twice as long.
    f.clock.advance_ms(1);
    f.steps(3).await;
    assert_eq!(f.mail.requests().len(), sent + 1, "one half-open probe");
    let h = f.health("mail").await;
    assert_eq!(h["state"], "paused", "{h}");
    f.clock.advance_ms(COOL_DOWN_MS);
    f.steps(3).await;
    assert_eq!(
        f.mail.requests().len(),
        sent + 1,
        "the second cool-down is longer"
    );

    // Recovered: the next probe succeeds and every effect goes out once.
    f.mail.set_default(Behaviour::status(200));
    f.clock.advance_ms(COOL_DOWN_MS);
    f.steps(4).await;
    assert_eq!(f.health("mail").await["state"], "healthy");
    for key in keys("m", 10) {
        assert_eq!(
            f.mail
                .effect_count_for_key(&format!("crm:{key}:send_email")),
            1,
            "{key}"
        );
    }
    assert_eq!(f.count("SELECT COUNT(*) FROM dead_letters").await, 0);
    assert_eq!(
        f.count("SELECT COUNT(*) FROM runs WHERE namespace = 'crm' AND state <> 'completed'")
            .await,
        0
    );
    assert_eq!(
        f.count("SELECT COUNT(*) FROM effects WHERE attempts > 2")
            .await,
        0,
        "no effect spent more than the failures before the pause and its one success"
    );
    let audited = "SELECT COUNT(*) FROM audit_events WHERE run_key = 'target:mail' AND kind IN ";
    assert_eq!(f.count(&format!("{audited} ('target_paused')")).await, 2);
    assert_eq!(f.count(&format!("{audited} ('target_resumed')")).await, 1);
    let scraped = f.app.scrape().await;
    assert!(
        scraped.contains("oncegate_target_paused_seconds_total{target=\"mail\"} 9"),
        "{scraped}"
    );
    f.stop().await;
}

async fn a_gone_target_is_disabled_until_an_operator_enables_it(backend: Backend) {
    let f = fixture(backend).await;
    f.mail.set_default(Behaviour::no_commit(410));
    f.queue("mail", keys("g", 1)).await;
    f.steps(1).await;
    let h = f.health("mail").await;
    assert_eq!(h["state"], "disabled", "{h}");
    assert_eq!(h["cause"], "the target answered 410 Gone");

    // Nothing more is sent, however long it waits.
    f.queue("mail", keys("g", 3).skip(1)).await;
    f.clock.advance_ms(3_600_000);
    f.steps(5).await;
    assert_eq!(f.mail.requests().len(), 1, "nothing more after the 410");
    assert_eq!(f.count("SELECT COUNT(*) FROM dead_letters").await, 0);
    assert!(f
        .app
        .scrape()
        .await
        .contains("oncegate_target_disabled{target=\"mail\"} 1"));

    // Enabling needs the admin scope; an operator may only read.
    let enable = |token: &str| {
        f.app
            .client
            .post(format!("{}/v1/admin/targets/mail", f.app.base))
            .bearer_auth(token.to_owned())
            .json(&json!({ "enabled": true }))
    };
    assert_eq!(answer(enable(&f.app.operator)).await.0, 403);
    let (status, _) = answer(
        f.app
            .client
            .post(format!("{}/v1/admin/targets/nope", f.app.base))
            .bearer_auth(&f.admin)
            .json(&json!({ "enabled": true })),
    )
    .await;
    assert_eq!(status, 404, "an unknown target is refused");

    // The operator enables it from the CLI: the held effects go out once.
    f.mail.set_default(Behaviour::status(200));
    let (ok, out, err) = oncegate_cli(&f.app.base, &f.admin, &["targets", "enable", "mail"]).await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("HEALTHY"), "{out}");
    f.steps(2).await;
    for key in keys("g", 3) {
        assert_eq!(
            f.mail
                .effect_count_for_key(&format!("crm:{key}:send_email")),
            1,
            "{key}"
        );
    }
    assert_eq!(f.count("SELECT COUNT(*) FROM dead_letters").await, 0);
    let audited = "SELECT COUNT(*) FROM audit_events WHERE run_key = 'target:mail' AND actor = ";
    assert_eq!(
        f.count(&format!("{audited} 'root' AND kind = 'target_enabled'"))
            .await,
        1
    );
    let (ok, out, _) = oncegate_cli(&f.app.base, &f.app.operator, &["targets", "list"]).await;
    assert!(ok && out.contains("mail") && out.contains("crm"), "{out}");
    f.stop().await;
}

async fn a_paused_target_never_blocks_another(backend: Backend) {
    let f = fixture(backend).await;
    f.mail.set_default(unavailable());
    f.queue("mail", keys("p", 6)).await;
    f.steps(1).await;
    assert_eq!(f.health("mail").await["state"], "paused");
    let mail_sent = f.mail.requests().len();

    f.queue("crm", keys("c", 6)).await;
    f.steps(2).await;
    for key in keys("c", 6) {
        assert_eq!(
            f.crm.effect_count_for_key(&format!("crm:{key}:send_email")),
            1,
            "{key}"
        );
    }
    assert_eq!(f.mail.requests().len(), mail_sent, "mail stays paused");
    let scraped = f.app.scrape().await;
    assert!(
        scraped.contains("oncegate_target_paused{target=\"mail\"} 1"),
        "{scraped}"
    );
    assert!(
        !scraped.contains("oncegate_target_paused{target=\"crm\"} 1"),
        "{scraped}"
    );
    assert_eq!(f.health("crm").await["state"], "healthy");
    f.stop().await;
}
