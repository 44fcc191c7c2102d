//! The operator's commands on dead letters, on both backends: resolve,
//! replay (same key, once at the target), the gate, replacement (new key,
//! linked both ways), and the list's filters and pages.

use serde_json::json;

use crate::deadletters::{app_for, claim_commit, dead_letter_of, dispatch_until, get};
use crate::harness::{on_both_backends, Backend};
use crate::target::{Behaviour, MockTarget};

on_both_backends!(
    resolve_ends_the_run_failed_terminal,
    replay_resends_once_under_the_same_key,
    gated_replay_needs_a_new_approval,
    replacement_takes_a_new_key_linked_both_ways,
    list_filters_and_pages,
);

async fn resolve_ends_the_run_failed_terminal(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/bad", Behaviour::no_commit(400));
    let app = app_for(backend, &mock).await;
    claim_commit(&app, "r1", "/bad").await;
    dispatch_until(&app, "r1", "dead_lettered").await;
    let id = dead_letter_of(&app, "crm", "r1").await["dead_letter"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/dead-letters/{id}/resolve");
    let (status, bad) = app
        .post(
            &path,
            Some(&app.operator),
            &json!({ "resolution": "reject", "note": "" }),
        )
        .await;
    assert_eq!((status, bad["field"].as_str()), (400, Some("note")));
    assert_eq!(
        app.post(
            &path,
            Some(&app.operator),
            &json!({ "resolution": "ignore", "note": "x" })
        )
        .await
        .0,
        400
    );
    assert_eq!(
        app.post(
            &path,
            Some(&app.workflow),
            &json!({ "resolution": "reject", "note": "x" })
        )
        .await
        .0,
        403
    );
    let (status, done) = app
        .post(
            &path,
            Some(&app.operator),
            &json!({ "resolution": "compensated", "note": "refunded by hand, ticket 42" }),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["run"]["state"], "failed_terminal");
    assert_eq!(done["dead_letter"]["resolution"], "compensated");
    assert_eq!(done["dead_letter"]["resolved_by"], "ops");
    assert!(done["dead_letter"]["retention_deadline"].is_string());
    let (status, again) = app
        .post(
            &path,
            Some(&app.operator),
            &json!({ "resolution": "reject", "note": "x" }),
        )
        .await;
    assert_eq!(
        (status, again["type"].as_str()),
        (409, Some("urn:oncegate:problem:already-resolved"))
    );
    let (status, _) = app
        .post(
            &format!("/v1/dead-letters/{id}/replay"),
            Some(&app.operator),
            &json!({ "reason": "x" }),
        )
        .await;
    assert_eq!(status, 409);
    let (_, claim) = app
        .claim(json!({ "namespace": "crm", "key": "r1", "payload": { "k": "r1" } }))
        .await;
    assert_eq!(
        (claim["claimed"].as_bool(), claim["state"].as_str()),
        (Some(false), Some("failed_terminal"))
    );
    let (_, detail) = get(&app, &format!("/v1/dead-letters/{id}"), &app.operator).await;
    crate::harness::assert_times_rfc3339(&detail);
    let last = detail["timeline"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (last["kind"].as_str(), last["actor"].as_str()),
        (Some("resolve"), Some("ops"))
    );
    assert_eq!(last["detail"]["note"], "refunded by hand, ticket 42");
    app.stop().await;
}

async fn replay_resends_once_under_the_same_key(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path_seq(
        "/flaky",
        vec![Behaviour::no_commit(422), Behaviour::status(200)],
    );
    let app = app_for(backend, &mock).await;
    claim_commit(&app, "p1", "/flaky").await;
    dispatch_until(&app, "p1", "dead_lettered").await;
    let id = dead_letter_of(&app, "crm", "p1").await["dead_letter"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, replayed) = app
        .post(
            &format!("/v1/dead-letters/{id}/replay"),
            Some(&app.operator),
            &json!({ "reason": "address fixed upstream" }),
        )
        .await;
    assert_eq!(status, 200, "{replayed}");
    assert_eq!(
        (
            replayed["run"]["state"].as_str(),
            replayed["effects"].as_u64()
        ),
        (Some("approved"), Some(1))
    );
    assert_eq!(replayed["dead_letter"]["resolution"], "replayed");
    let (_, in_flight) = app
        .claim(json!({ "namespace": "crm", "key": "p1", "payload": { "k": "p1" } }))
        .await;
    assert_eq!(
        (in_flight["claimed"].as_bool(), in_flight["state"].as_str()),
        (Some(false), Some("approved"))
    );
    dispatch_until(&app, "p1", "completed").await;
    let sent: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.path == "/flaky")
        .collect();
    assert_eq!(sent.len(), 2, "the failed attempt and the replay");
    assert!(
        sent.iter()
            .all(|r| r.idempotency_key.as_deref() == Some("crm:p1:send_email")),
        "the same key"
    );
    assert_eq!(mock.effect_count_for_key("crm:p1:send_email"), 1);
    let (_, detail) = get(&app, &format!("/v1/dead-letters/{id}"), &app.operator).await;
    let replay = detail["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["kind"] == "replay")
        .unwrap()
        .clone();
    assert_eq!(
        (
            replay["actor"].as_str(),
            replay["detail"]["reason"].as_str()
        ),
        (Some("ops"), Some("address fixed upstream"))
    );
    assert_eq!(detail["dead_letter"]["replay_count"], 1);

    // A completed key is never replayed, even through a record left open.
    let (status, _) = app
        .post(
            &format!("/v1/dead-letters/{id}/replay"),
            Some(&app.operator),
            &json!({ "reason": "again" }),
        )
        .await;
    assert_eq!(status, 409);
    app.db
        .exec(&format!(
            "UPDATE dead_letters SET resolved_at = NULL, resolution = NULL WHERE id = '{id}'"
        ))
        .await;
    let (status, refused) = app
        .post(
            &format!("/v1/dead-letters/{id}/replay"),
            Some(&app.operator),
            &json!({ "reason": "again" }),
        )
        .await;
    assert_eq!(
        (status, refused["state"].as_str()),
        (409, Some("completed")),
        "{refused}"
    );
    assert_eq!(
        refused["type"],
        "urn:oncegate:problem:run-not-dead-lettered"
    );
    assert_eq!(
        app.dispatcher().dispatch_once().await.unwrap().leased,
        0,
        "nothing re-queued"
    );
    assert_eq!(mock.requests().len(), 2);
    app.stop().await;
}

async fn gated_replay_needs_a_new_approval(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/refund", Behaviour::no_commit(400));
    let app = app_for(backend, &mock).await;
    // A gated effect enters the outbox only through a gate: put one there
    // directly, as an approval would.
    crate::harness::queue_effect(&app.store, "g1", "mock", mock.url("/refund")).await;
    app.db
        .exec("UPDATE effects SET operation = 'refund' WHERE run_key = 'g1'")
        .await;
    dispatch_until(&app, "g1", "dead_lettered").await;
    let id = dead_letter_of(&app, "crm", "g1").await["dead_letter"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, replayed) = app
        .post(
            &format!("/v1/dead-letters/{id}/replay"),
            Some(&app.operator),
            &json!({ "reason": "try again" }),
        )
        .await;
    assert_eq!(status, 200, "{replayed}");
    let (_, run) = app.get_run("crm", "g1").await;
    assert_eq!(run["state"], "awaiting_human", "{run}");
    assert_eq!(
        app.db
            .text("SELECT state FROM effects WHERE run_key = 'g1'")
            .await,
        "failed",
        "nothing re-queued before approval"
    );
    assert_eq!(app.dispatcher().dispatch_once().await.unwrap().leased, 0);
    // The new challenge is in the inbox (no link: only its hash could be stored).
    let challenge = app
        .db
        .text("SELECT id FROM challenges WHERE run_key = 'g1' AND state = 'pending' AND token_hash IS NULL")
        .await;
    mock.on_path("/refund", Behaviour::status(200));
    let alice = crate::approvals::Browser::login(&app, &app.approver).await;
    let page = format!("/approvals/{challenge}");
    let csrf = crate::approvals::csrf_of(&alice.get(&page).await.1);
    let (status, body) = alice.decide(&page, "approve", &csrf).await;
    assert_eq!(status, 200, "{body}");
    dispatch_until(&app, "g1", "completed").await;
    let sends = mock
        .requests()
        .iter()
        .filter(|r| r.path == "/refund")
        .count();
    assert_eq!(
        sends, 2,
        "the failed attempt, then one send after approval with the same key"
    );
    app.stop().await;
}

async fn replacement_takes_a_new_key_linked_both_ways(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/send", Behaviour::no_commit(422));
    let app = app_for(backend, &mock).await;
    claim_commit(&app, "order:1:v1", "/send").await;
    claim_commit(&app, "order:2:v1", "/send").await;
    dispatch_until(&app, "order:1:v1", "dead_lettered").await;
    let id = dead_letter_of(&app, "crm", "order:1:v1").await["dead_letter"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/dead-letters/{id}/replace");
    let (status, taken) = app
        .post(
            &path,
            Some(&app.operator),
            &json!({ "key": "order:2:v1", "reason": "x" }),
        )
        .await;
    assert_eq!(
        (status, taken["type"].as_str()),
        (409, Some("urn:oncegate:problem:key-taken"))
    );
    assert_eq!(
        app.post(
            &path,
            Some(&app.operator),
            &json!({ "key": "bad key", "reason": "x" })
        )
        .await
        .0,
        400
    );
    mock.on_path("/send", Behaviour::status(200));
    let (status, done) = app
        .post(
            &path,
            Some(&app.operator),
            &json!({ "key": "order:1:v2", "reason": "customer changed the address" }),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        (done["run"]["key"].as_str(), done["run"]["state"].as_str()),
        (Some("order:1:v2"), Some("approved"))
    );
    assert_eq!(
        done["dead_letter"]["replaced_by"],
        json!({ "namespace": "crm", "key": "order:1:v2" })
    );
    assert_eq!(
        app.get_run("crm", "order:1:v1").await.1["state"],
        "failed_terminal"
    );
    for key in ["order:1:v1", "order:1:v2"] {
        let (_, links) = get(
            &app,
            &format!("/v1/runs/links?namespace=crm&key={key}"),
            &app.operator,
        )
        .await;
        assert_eq!(links[0]["replaced_by_key"], "order:1:v2", "{key}: {links}");
        assert_eq!(links[0]["key"], "order:1:v1");
        crate::harness::assert_times_rfc3339(&links);
    }
    dispatch_until(&app, "order:1:v2", "completed").await;
    assert_eq!(
        mock.effect_count_for_key("crm:order:1:v2:send_email"),
        1,
        "the new key's own effect"
    );
    assert_eq!(mock.effect_count_for_key("crm:order:1:v1:send_email"), 0);
    assert_eq!(
        app.post(
            &path,
            Some(&app.operator),
            &json!({ "key": "order:1:v3", "reason": "x" })
        )
        .await
        .0,
        409
    );
    app.stop().await;
}

async fn list_filters_and_pages(backend: Backend) {
    let mock = MockTarget::start().await;
    mock.on_path("/bad", Behaviour::no_commit(400));
    let app = app_for(backend, &mock).await;
    for i in 0..3 {
        claim_commit(&app, &format!("l{i}"), "/bad").await;
    }
    dispatch_until(&app, "l2", "dead_lettered").await;
    for i in 0..2 {
        app.claim(json!({ "namespace": "other", "key": format!("w{i}"), "payload": {}, "execution_ref": format!("x{i}") })).await;
        let fail = json!({ "execution_ref": format!("x{i}"), "retryable": false, "error": { "message": "boom" } });
        assert_eq!(
            app.post("/v1/runs/fail-by-execution", Some(&app.workflow), &fail)
                .await
                .0,
            200
        );
    }
    let count = |q: &'static str| {
        let app = &app;
        async move {
            let (status, page) = get(app, &format!("/v1/dead-letters{q}"), &app.operator).await;
            assert_eq!(status, 200, "{q}: {page}");
            page["items"].as_array().unwrap().len()
        }
    };
    assert_eq!(count("").await, 5);
    assert_eq!(count("?class=permanent").await, 3);
    assert_eq!(count("?class=workflow_error&namespace=other").await, 2);
    assert_eq!(count("?state=dead_lettered").await, 5);
    assert_eq!(count("?resolved=true").await, 0);
    assert_eq!(count("?older_than=1h").await, 0);
    assert_eq!(count("?newer_than=1h").await, 5);
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let q = cursor
            .as_ref()
            .map_or("?limit=2".into(), |c| format!("?limit=2&cursor={c}"));
        let (_, page) = get(&app, &format!("/v1/dead-letters{q}"), &app.operator).await;
        seen.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["id"].as_str().unwrap().to_owned()),
        );
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let unique: std::collections::HashSet<_> = seen.iter().collect();
    assert_eq!((seen.len(), unique.len()), (5, 5), "every record once");
    for bad in [
        "?class=nope",
        "?limit=0",
        "?cursor=zz",
        "?older_than=soon",
        "?state=done",
    ] {
        assert_eq!(
            get(&app, &format!("/v1/dead-letters{bad}"), &app.operator)
                .await
                .0,
            400,
            "{bad}"
        );
    }
    assert_eq!(get(&app, "/v1/dead-letters", &app.workflow).await.0, 403);
    let (status, assigned) = app
        .post(
            &format!("/v1/dead-letters/{}/assign", seen[0]),
            Some(&app.operator),
            &json!({ "owner": "alice" }),
        )
        .await;
    assert_eq!((status, assigned["owner"].as_str()), (200, Some("alice")));
    app.stop().await;
}

#[tokio::test]
async fn dead_letter_routes_are_documented() {
    let mock = MockTarget::start().await;
    let app = app_for(Backend::Sqlite, &mock).await;
    let doc: serde_json::Value = app
        .client
        .get(format!("{}/openapi.json", app.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for path in [
        "/v1/dead-letters",
        "/v1/dead-letters/{id}",
        "/v1/dead-letters/{id}/resolve",
        "/v1/dead-letters/{id}/replay",
        "/v1/dead-letters/{id}/replace",
        "/v1/dead-letters/{id}/assign",
        "/v1/runs/links",
        "/v1/runs/fail-by-execution",
        "/v1/replay-jobs",
        "/v1/replay-jobs/dry-run",
        "/v1/replay-jobs/{id}",
        "/v1/replay-jobs/{id}/stop",
        "/v1/replay-jobs/{id}/resume",
    ] {
        assert!(
            doc["paths"][path].is_object(),
            "{path} missing from the OpenAPI document"
        );
    }
    app.stop().await;
}
