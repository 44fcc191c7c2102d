//! Gate policies and the AI-output contract: approve_by_exception with its
//! human sample, act_with_window, schema violations and bounded repairs,
//! expiry and escalation (both stores).

use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};

use crate::approvals::{
    claim, csrf_of, gate, gated_app, outbox_rows, own_csrf, pending, run_state, Browser,
};
use crate::harness::{eventually, on_both_backends, Backend, TestApp};

fn model() -> Value {
    json!({"provider_class": "hosted", "model": "drafter", "revision": "r7"})
}

async fn post_output(app: &TestApp, key: &str, lease: &str, output: Value) -> (u16, Value) {
    app.post(
        "/v1/runs/output",
        Some(&app.workflow),
        &json!({"namespace": "support", "key": key,
        "lease": lease, "operation": "refund", "output": output, "model": model()}),
    )
    .await
}

/// Claims, records a valid output and gates; returns the gate's decision.
async fn refund_decision(app: &TestApp, key: &str, amount: i64) -> String {
    let lease = claim(app, key, None).await;
    let (status, body) =
        post_output(app, key, &lease, json!({"amount": amount, "reply": "ok"})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = gate(app, key, &lease, "refund", json!({})).await;
    assert_eq!(status, 200, "{body}");
    body["decision"].as_str().unwrap().to_owned()
}

/// How many of `n` eligible runs went to a person.
async fn humans(app: &TestApp, prefix: &str, n: usize) -> usize {
    let decisions: Vec<String> = stream::iter(0..n)
        .map(|i| async move { refund_decision(app, &format!("{prefix}-{i}"), 20).await })
        .buffer_unordered(8)
        .collect()
        .await;
    assert!(decisions.iter().all(|d| d == "human" || d == "auto"));
    decisions.iter().filter(|d| *d == "human").count()
}

async fn exception_rules_and_sample(backend: Backend) {
    for (rate, n, low, high) in [(0.0, 100, 0, 0), (1.0, 100, 100, 100), (0.25, 400, 72, 128)] {
        let (app, _t, _) = gated_app(backend, rate, 3600).await;
        let sent = humans(&app, "s", n).await;
        // 0.25 of 400: mean 100, sd 8.66; 99.9% two-sided bounds ±3.29 sd.
        assert!(
            (low..=high).contains(&sent),
            "rate {rate}: {sent} of {n} to a person"
        );
        if rate == 0.0 {
            assert_eq!(
                refund_decision(&app, "big", 500).await,
                "human",
                "a failed rule needs a person"
            );
            let rule = app
                .db
                .text("SELECT detail FROM audit_events WHERE run_key = 's-0' AND kind = 'approve'")
                .await;
            assert!(
                rule.contains("\"decision\":\"auto\"") && rule.contains("rules_held"),
                "{rule}"
            );
            assert_eq!(
                outbox_rows(&app, "s-0").await,
                1,
                "auto-acted effects are queued"
            );
            let why = app
                .db
                .text("SELECT card FROM challenges WHERE run_key = 'big'")
                .await;
            assert!(why.contains("did not hold"), "{why}");
        }
        app.stop().await;
    }
}

async fn output_contract_lists_violations_and_bounds_repairs(backend: Backend) {
    let (app, _t, _) = gated_app(backend, 0.0, 3600).await;
    let lease = claim(&app, "o-1", None).await;
    let (status, body) = gate(&app, "o-1", &lease, "refund", json!({})).await;
    assert_eq!(status, 409, "no validated output yet: {body}");
    assert_eq!(body["type"], "urn:oncegate:problem:output-not-validated");
    let bad = json!({"amount": "ten", "reply": "x".repeat(300), "category": "other"});
    let (status, body) = post_output(&app, "o-1", &lease, bad.clone()).await;
    assert_eq!(status, 422, "{body}");
    let paths: Vec<&str> = body["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["path"].as_str().unwrap())
        .collect();
    for p in ["/amount", "/reply", "/category"] {
        assert!(paths.contains(&p), "{p} in {paths:?}");
    }
    assert_eq!(body["repairs_left"], 1);
    let (status, body) = post_output(&app, "o-1", &lease, bad).await;
    assert_eq!(status, 422);
    assert_eq!(body["repairs_left"], 0);
    assert_eq!(
        body["state"], "failed_terminal",
        "past max_repairs the run fails for good"
    );
    assert_eq!(run_state(&app, "o-1").await, "failed_terminal");
    assert_eq!(
        app.db
            .count("SELECT COUNT(*) FROM run_outputs WHERE run_key = 'o-1'")
            .await,
        2
    );
    let (status, _) = post_output(&app, "o-1", &lease, json!({"amount": 1, "reply": "ok"})).await;
    assert_eq!(status, 409, "the lease is gone");
    // A repaired output is accepted and gates.
    let lease = claim(&app, "o-2", None).await;
    assert_eq!(
        post_output(&app, "o-2", &lease, json!({"amount": 1}))
            .await
            .0,
        422
    );
    assert_eq!(
        post_output(&app, "o-2", &lease, json!({"amount": 1, "reply": "ok"}))
            .await
            .0,
        200
    );
    assert_eq!(gate(&app, "o-2", &lease, "refund", json!({})).await.0, 200);
}

async fn act_with_window_cancels_until_sent(backend: Backend) {
    let (app, target, _) = gated_app(backend, 0.0, 3600).await;
    let lease = claim(&app, "w-1", None).await;
    let (status, body) = gate(&app, "w-1", &lease, "nudge", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["state"].as_str(), body["decision"].as_str()),
        (Some("approved"), Some("window"))
    );
    let id = app
        .db
        .text("SELECT id FROM effects WHERE run_key = 'w-1'")
        .await;
    let dispatcher = app.dispatcher();
    dispatcher.dispatch_once().await.unwrap();
    assert!(target.requests().is_empty(), "nothing before not_before");
    let (status, body) = app
        .post(
            &format!("/v1/effects/{id}/cancel"),
            Some(&app.workflow),
            &json!({}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    dispatcher.dispatch_once().await.unwrap();
    assert!(
        target.requests().is_empty(),
        "a cancelled effect is never sent"
    );
    assert_eq!(run_state(&app, "w-1").await, "completed");
    // Once sent, cancel is refused.
    let lease = claim(&app, "w-2", None).await;
    assert_eq!(gate(&app, "w-2", &lease, "nudge", json!({})).await.0, 200);
    app.db
        .exec("UPDATE effects SET not_before = 0, next_attempt_at = 0 WHERE run_key = 'w-2'")
        .await;
    eventually(
        "the window to pass and the effect to go",
        Duration::from_secs(10),
        || async {
            dispatcher.dispatch_once().await.unwrap();
            (target.effect_count_for_key("support:w-2:reply") == 1).then_some(())
        },
    )
    .await;
    let id = app
        .db
        .text("SELECT id FROM effects WHERE run_key = 'w-2'")
        .await;
    let (status, _) = app
        .post(
            &format!("/v1/effects/{id}/cancel"),
            Some(&app.workflow),
            &json!({}),
        )
        .await;
    assert_eq!(status, 409, "sent effects cannot be cancelled");
}

async fn expiry_dead_letters_and_escalation_asks_again(backend: Backend) {
    let (app, target, people) = gated_app(backend, 0.0, 1).await;
    let link = pending(&app, "e-1", "send_reply").await;
    let lease = claim(&app, "e-2", None).await;
    let (_, body) = gate(
        &app,
        "e-2",
        &lease,
        "escalating",
        json!({"callback_url": target.url("/resume/e-2")}),
    )
    .await;
    assert_eq!(body["state"], "awaiting_human");
    let alice = Browser::login(&app, &app.approver).await;
    let csrf = own_csrf(&app, &alice, "e-1").await;
    let sweeper = oncegate::app::approval_sweeper(&app.state);
    eventually(
        "both challenges to expire and be swept",
        Duration::from_secs(15),
        || async {
            sweeper.sweep_once().await.unwrap();
            let escalated = app
                .db
                .count("SELECT COUNT(*) FROM challenges WHERE state = 'escalated'")
                .await;
            (run_state(&app, "e-1").await == "dead_lettered" && escalated == 1).then_some(())
        },
    )
    .await;
    let (status, page) = alice.decide(&link, "approve", &csrf).await;
    assert_eq!(status, 409, "an expired link sends nothing: {page}");
    assert_eq!(
        app.db.count("SELECT COUNT(*) FROM dead_letters WHERE run_key = 'e-1' AND class = 'approval_expired'").await,
        1
    );
    assert_eq!(outbox_rows(&app, "e-1").await, 0);
    assert_eq!(
        run_state(&app, "e-2").await,
        "awaiting_human",
        "escalation keeps the run waiting"
    );
    let escalated = app.db.text(
        "SELECT id FROM challenges WHERE run_key = 'e-2' AND state = 'pending' AND escalation = 1").await;
    let inbox = format!("/approvals/{escalated}");
    assert!(alice
        .get(&inbox)
        .await
        .1
        .contains("not among the intended approvers"));
    let dave = Browser::login(&app, &people.dave).await;
    let csrf = csrf_of(&dave.get(&inbox).await.1);
    assert_eq!(dave.decide(&inbox, "approve", &csrf).await.0, 200);
    assert_eq!(run_state(&app, "e-2").await, "approved");
    let (status, cards) = approvals(&app, "all").await;
    assert_eq!(status, 200);
    let states: Vec<&str> = cards
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["state"].as_str().unwrap())
        .collect();
    assert!(
        states.contains(&"expired")
            && states.contains(&"escalated")
            && states.contains(&"approved")
    );
}

async fn approvals(app: &TestApp, state: &str) -> (u16, Value) {
    let resp = app
        .client
        .get(format!("{}/v1/approvals?state={state}", app.base))
        .bearer_auth(&app.approver)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

async fn pending_list_shows_the_card(backend: Backend) {
    let (app, _t, _) = gated_app(backend, 0.0, 3600).await;
    pending(&app, "c-1", "send_reply").await;
    let (status, cards) = approvals(&app, "pending").await;
    assert_eq!(status, 200);
    let card = &cards[0];
    assert_eq!(card["key"], "c-1");
    assert_eq!(card["source_url"], "https://crm.example/tickets/42");
    assert_eq!(card["requested_by"], "ursula");
    assert_eq!(card["effects"][0]["idempotency_key"], "support:c-1:reply");
    assert!(
        card["expires_at"].as_str().is_some()
            && card["page"].as_str().unwrap().starts_with("/approvals/")
    );
    let resp = app
        .client
        .get(format!("{}/v1/approvals", app.base))
        .bearer_auth(&app.workflow)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403, "workflows do not read the inbox");
}

on_both_backends!(
    exception_rules_and_sample,
    output_contract_lists_violations_and_bounds_repairs,
    act_with_window_cancels_until_sent,
    expiry_dead_letters_and_escalation_asks_again,
    pending_list_shows_the_card,
    the_human_sample_is_keyed_with_the_server_secret,
);

/// A run's sample point as the server computes it (`secret`) or as a
/// workflow could before the sample was keyed (`None`: plain SHA-256).
fn sample_point(secret: Option<&[u8]>, key: &str) -> f64 {
    use hmac::{Hmac, Mac};
    use sha2::{Digest, Sha256};
    let message = format!("sample:support\n{key}");
    let digest = match secret {
        Some(secret) => {
            let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
            mac.update(message.as_bytes());
            mac.finalize().into_bytes().to_vec()
        }
        None => Sha256::digest(message.as_bytes()).to_vec(),
    };
    let top = u64::from_be_bytes(digest[..8].try_into().unwrap());
    (top >> 11) as f64 / (1u64 << 53) as f64
}

/// Issue 25 M5: the workflow knows each run's namespace and key, yet the
/// unkeyed prediction no longer tells which runs a person sees; the
/// decisions follow the stored server secret exactly, so a retried gate
/// (on any instance) decides the same way.
async fn the_human_sample_is_keyed_with_the_server_secret(backend: Backend) {
    let (app, _t, _) = gated_app(backend, 0.5, 3600).await;
    let keys: Vec<String> = (0..24).map(|i| format!("p-{i}")).collect();
    let shared = &app;
    let decided: Vec<(String, String)> = stream::iter(keys)
        .map(|key| async move {
            let decision = refund_decision(shared, &key, 20).await;
            (key, decision)
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let secret = app
        .db
        .text("SELECT value FROM server_secrets WHERE name = 'server'")
        .await;
    assert_eq!(secret.len(), 64, "32 random bytes, hex");
    let human = |point: f64| if point < 0.5 { "human" } else { "auto" };
    let mut unkeyed_wrong = 0;
    for (key, decision) in &decided {
        assert_eq!(
            decision,
            human(sample_point(Some(secret.as_bytes()), key)),
            "{key}: the keyed sample decides"
        );
        if decision != human(sample_point(None, key)) {
            unkeyed_wrong += 1;
        }
    }
    // Matching all 24 by chance has probability 2^-24.
    assert!(unkeyed_wrong > 0, "the unkeyed prediction still works");
    app.stop().await;
}
