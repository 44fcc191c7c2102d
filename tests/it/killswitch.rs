//! The kill switch's deny-by-default rules that only time or a broken
//! database show: a value that cannot be re-read stops counting as
//! "enabled" within its two seconds, and `ONCEGATE_ACTIONS_ENABLED=false`
//! holds every effect from the first moment of a real process.

use std::sync::Arc;
use std::time::Duration;

use oncegate::clock::SystemClock;
use oncegate::config::Scope;
use oncegate::outbox::KillSwitch;
use serde_json::{json, Value};

use crate::harness::{answer, eventually, on_both_backends, token, Backend, TestDb};
use crate::process::{write_config_with, Server};
use crate::target::MockTarget;

on_both_backends!(an_unreadable_switch_counts_as_disabled);

async fn an_unreadable_switch_counts_as_disabled(backend: Backend) {
    let db = TestDb::new(backend).await;
    let store = db.store(Arc::new(SystemClock), false).await;
    let switch = KillSwitch::new(store.clone());
    assert!(switch.allows("mail").await, "nothing engaged: enabled");

    // The table goes away: every re-read fails from now on.
    db.exec("ALTER TABLE action_switches RENAME TO action_switches_gone")
        .await;
    eventually(
        "the last good value ages out",
        Duration::from_secs(15),
        || async { (!switch.allows("mail").await).then_some(()) },
    )
    .await;
    assert!(!switch.allows("*").await, "every scope is denied");

    // Readable again: the next re-read trusts it again.
    db.exec("ALTER TABLE action_switches_gone RENAME TO action_switches")
        .await;
    eventually("a fresh read enables", Duration::from_secs(15), || async {
        switch.allows("mail").await.then_some(())
    })
    .await;
}

async fn send(client: &reqwest::Client, url: String, token: &str, body: &Value) -> (u16, Value) {
    answer(client.post(url).bearer_auth(token).json(body)).await
}

#[tokio::test]
async fn actions_disabled_at_start_hold_effects_until_an_admin_enables_them() {
    let mail = MockTarget::start().await;
    let db = TestDb::new(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let (admin, admin_entry) = token("ops", &[Scope::Admin]);
    let extra = format!(
        "[[tokens]]\nsubject = \"ops\"\ndigest = \"{}\"\nscopes = [\"admin\"]\n\n\
         [[targets]]\nname = \"mail\"\nbase_url = \"{}\"\n\n\
         [[operations]]\nname = \"send_email\"\ngate = \"none\"\n",
        admin_entry.digest,
        mail.base_url()
    );
    let (config, workflow) = write_config_with(dir.path(), &db.url, &extra);
    let server = Server::start(
        &config,
        dir.path(),
        &[("ONCEGATE_ACTIONS_ENABLED", "false")],
    );
    let client = reqwest::Client::new();
    let url = |path: &str| format!("{}{path}", server.base);

    let claim = json!({ "namespace": "crm", "key": "mail:1", "payload": { "n": 1 } });
    let (status, claimed) = send(&client, url("/v1/claims"), &workflow, &claim).await;
    assert_eq!(status, 200, "{claimed}");
    let commit = json!({ "namespace": "crm", "key": "mail:1", "lease": claimed["lease"],
        "effects": [{ "operation": "send_email", "effect_type": "send_email", "target": "mail",
                      "path": "/send", "body": { "to": "x" } }] });
    let (status, answer) = send(&client, url("/v1/runs/commit"), &workflow, &commit).await;
    assert_eq!(status, 200, "{answer}");

    // Held: the switch is engaged in the database, by the environment,
    // and the scrape shows the effect waiting for it.
    let engaged = db
        .texts("SELECT changed_by FROM action_switches WHERE scope = '*' AND enabled = 0")
        .await;
    assert_eq!(engaged, ["env:ONCEGATE_ACTIONS_ENABLED"]);
    eventually(
        "the effect shows as held",
        Duration::from_secs(15),
        || async {
            let text = client
                .get(url("/metrics"))
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            text.contains("oncegate_effects_held{target=\"mail\"} 1")
                .then_some(())
        },
    )
    .await;
    assert!(mail.requests().is_empty(), "nothing sent while disabled");

    let on = json!({ "enabled": true });
    let (status, answer) = send(&client, url("/v1/admin/actions"), &admin, &on).await;
    assert_eq!(status, 200, "{answer}");
    mail.wait_for_requests(1, Duration::from_secs(30)).await;
    eventually("the run completes", Duration::from_secs(30), || async {
        (db.count("SELECT COUNT(*) FROM runs WHERE state = 'completed'")
            .await
            == 1)
            .then_some(())
    })
    .await;
    assert_eq!(mail.effect_count_for_key("crm:mail:1:send_email"), 1);
    assert_eq!(mail.requests().len(), 1, "sent once");
    assert!(server.stop().success());
}
