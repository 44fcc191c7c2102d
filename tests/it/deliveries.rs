//! The deliveries log (DESIGN.md §3, "Every delivery is visible") through
//! the real server on both backends: a `duplicate_of` event is stored,
//! listed and linked, and forwarded once when an operator says so (never
//! twice, however many times or however concurrently asked); a stored
//! event is redelivered as a new run; 1,000 refused signatures write no
//! row anywhere and live only in the in-memory ring and the counters;
//! bad input is a clear 4xx that changes nothing.

use std::sync::Arc;

use futures_util::future::join_all;
use oncegate::clock::{Clock, ManualClock};
use oncegate::config::Config;
use oncegate::ingress::{DeliveryEntry, DeliveryOutcome, RawEvent, RawStatus};
use oncegate::ledger::{ClaimRequest, IdempotencyKey, Namespace, PayloadHash, RunMetadata};
use oncegate::retention::{sweep, RetentionConfig, DAY_MS};
use serde_json::{json, Value};

use crate::approvals::Browser as Http;
use crate::console::csrf_in;
use crate::harness::{answer, on_both_backends, Backend, TestApp, TestDb};
use crate::ingress::{deliver, stripe_event, stripe_signature, SECRET};
use crate::target::MockTarget;

on_both_backends!(
    a_duplicate_of_event_is_logged_and_forwarded_once_when_an_operator_says_so,
    a_thousand_refused_signatures_write_no_row,
    the_log_is_searchable_and_bad_input_changes_nothing,
    the_console_page_lists_and_forwards_behind_its_csrf_token,
    retention_deletes_old_entries_and_unclaimed_duplicate_bodies,
);

/// A Stripe source whose business key collapses every event about one charge.
fn charges(base: String) -> impl FnOnce(&mut Config) {
    move |config: &mut Config| {
        let text = format!(
            "[[targets]]\nname = \"n8n\"\nbase_url = \"{base}\"\nkind = \"workflow\"\n\
             [[sources]]\nname = \"charges\"\nscheme = \"stripe\"\nsecrets = [\"{SECRET}\"]\n\
             target = \"n8n\"\npath = \"/charges\"\nbusiness_key = \"charge:{{/data/object/id}}\"\n"
        );
        let parsed: Config = toml::from_str(&text).unwrap();
        config.targets = parsed.targets;
        config.sources = parsed.sources;
    }
}

async fn send(app: &TestApp, body: &[u8]) -> (u16, Value) {
    let sig = stripe_signature(SECRET, chrono::Utc::now().timestamp(), body);
    deliver(app, "charges", body, &[("stripe-signature", sig)]).await
}

async fn get(app: &TestApp, path: &str, token: &str) -> (u16, Value) {
    answer(
        app.client
            .get(format!("{}{path}", app.base))
            .bearer_auth(token),
    )
    .await
}

/// Steps the dispatcher until nothing is due; the forwards the workflow got.
async fn forwards(app: &TestApp, mock: &MockTarget) -> Vec<crate::target::Recorded> {
    let dispatcher = app.dispatcher();
    for _ in 0..50 {
        if dispatcher.dispatch_once().await.unwrap().leased == 0 {
            break;
        }
    }
    mock.requests()
        .into_iter()
        .filter(|r| r.path == "/charges")
        .collect()
}

/// Row counts of every table, by name.
async fn every_table(app: &TestApp) -> Vec<(String, i64)> {
    let sql = match app.db.backend {
        Backend::Sqlite => {
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
        }
        Backend::Postgres => {
            "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename"
        }
    };
    let mut out = Vec::new();
    for table in app.db.texts(sql).await {
        let n = app.db.count(&format!("SELECT COUNT(*) FROM {table}")).await;
        out.push((table, n));
    }
    out
}

async fn a_duplicate_of_event_is_logged_and_forwarded_once_when_an_operator_says_so(
    backend: Backend,
) {
    let mock = MockTarget::start().await;
    let app = TestApp::spawn_with(backend, charges(mock.base_url())).await;
    let first = stripe_event("evt_1", "charge.succeeded", "ch_1");
    let later = stripe_event("evt_2", "charge.updated", "ch_1");
    assert_eq!(send(&app, &first).await, (200, json!({ "received": true })));
    let (status, collapsed) = send(&app, &later).await;
    assert_eq!(status, 200);
    assert_eq!(
        collapsed["duplicate_of"],
        json!({ "namespace": "charges", "key": "evt_1" })
    );
    assert_eq!(
        forwards(&app, &mock).await.len(),
        1,
        "only the first is forwarded"
    );

    // Visible: stored as a raw event, listed, linked to the run holding the key.
    let (status, page) = get(&app, "/v1/deliveries?outcome=duplicate_of", &app.operator).await;
    assert_eq!(status, 200, "{page}");
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{page}");
    let entry = &items[0];
    assert_eq!(entry["event_id"], "evt_2");
    assert_eq!(entry["event_type"], "charge.updated");
    assert_eq!(entry["status"], 200);
    assert_eq!(
        entry["run"],
        json!({ "namespace": "charges", "key": "evt_1" })
    );
    assert_eq!(entry["body_bytes"], later.len());
    assert!(entry["forwarded"].is_null());
    let raw = entry["raw_event_id"].as_str().unwrap().to_owned();
    assert_eq!(
        app.db
            .text(&format!("SELECT status FROM raw_events WHERE id = '{raw}'"))
            .await,
        "duplicate_of"
    );
    let id = entry["id"].as_str().unwrap().to_owned();

    // Forward anyway, asked five times at once: one forward, four refusals.
    let path = format!("/v1/deliveries/{id}/forward");
    let reason = json!({ "reason": "charge.updated carries the refund the workflow needs" });
    let answers = join_all((0..5).map(|_| app.post(&path, Some(&app.operator), &reason))).await;
    let done: Vec<&Value> = answers
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, a)| a)
        .collect();
    assert_eq!(done.len(), 1, "{answers:?}");
    for (status, problem) in answers.iter().filter(|(s, _)| *s != 200) {
        assert_eq!(*status, 409, "{problem}");
        assert!(
            problem["type"]
                .as_str()
                .unwrap()
                .ends_with("already-forwarded")
                || problem["type"]
                    .as_str()
                    .unwrap()
                    .ends_with("delivery-changed"),
            "{problem}"
        );
    }
    assert_eq!(done[0]["run"]["key"], "evt_2");
    assert_eq!(done[0]["run"]["state"], "approved");
    assert_eq!(done[0]["delivery"]["forwarded"]["run"]["key"], "evt_2");
    assert_eq!(done[0]["delivery"]["forwarded"]["by"], "ops");
    let (status, again) = app.post(&path, Some(&app.operator), &reason).await;
    assert_eq!(status, 409, "{again}");
    assert_eq!(again["type"], "urn:oncegate:problem:already-forwarded");

    let sent = forwards(&app, &mock).await;
    assert_eq!(sent.len(), 2, "the duplicate_of event goes out once");
    let second = &sent[1];
    assert_eq!(second.body, later, "byte for byte");
    assert_eq!(
        second.idempotency_key.as_deref(),
        Some("charges:evt_2:forward")
    );
    assert_eq!(forwards(&app, &mock).await.len(), 2, "and never again");

    // Audited on the new run and noted on the holder, with the operator.
    let kinds = |key: &str| {
        format!(
            "SELECT kind || ' ' || actor FROM audit_events WHERE namespace = 'charges' \
             AND run_key = '{key}' ORDER BY seq"
        )
    };
    let on_new = app.db.texts(&kinds("evt_2")).await;
    assert!(on_new.contains(&"approve ops".to_owned()), "{on_new:?}");
    let detail = app
        .db
        .text("SELECT detail FROM audit_events WHERE namespace = 'charges' AND run_key = 'evt_2' AND kind = 'approve'")
        .await;
    assert!(
        detail.contains(&id) && detail.contains("refund the workflow"),
        "{detail}"
    );
    let on_holder = app.db.texts(&kinds("evt_1")).await;
    assert!(
        on_holder.contains(&"delivery_forwarded_anyway ops".to_owned()),
        "{on_holder:?}"
    );

    // A redelivery of the first event: a new run, linked, sent once more.
    let (_, page) = get(
        &app,
        "/v1/deliveries?event_id=evt_1&outcome=accepted",
        &app.operator,
    )
    .await;
    let first_id = page["items"][0]["id"].as_str().unwrap().to_owned();
    let (status, redone) = app
        .post(
            &format!("/v1/deliveries/{first_id}/redeliver"),
            Some(&app.operator),
            &json!({ "reason": "the workflow lost its execution" }),
        )
        .await;
    assert_eq!(status, 200, "{redone}");
    assert_eq!(redone["run"]["key"], "evt_1~redelivery-1");
    assert_eq!(redone["delivery"]["redeliveries"], 1);
    let sent = forwards(&app, &mock).await;
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[2].body, first);
    assert_eq!(sent[2].header("x-oncegate-redelivery"), Some("1"));
    assert_eq!(
        sent[2].idempotency_key.as_deref(),
        Some("charges:evt_1~redelivery-1:forward")
    );
    app.stop().await;
}

async fn a_thousand_refused_signatures_write_no_row(backend: Backend) {
    let mock = MockTarget::start().await;
    let app = TestApp::spawn_with(backend, charges(mock.base_url())).await;
    let before = every_table(&app).await;
    assert!(before.iter().any(|(t, _)| t == "deliveries"), "{before:?}");
    let body = stripe_event("evt_forged", "charge.succeeded", "ch_9");
    let forged = stripe_signature(
        "whsec_not_the_secret",
        chrono::Utc::now().timestamp(),
        &body,
    );
    let headers = [("stripe-signature", forged)];
    for _ in 0..20 {
        let batch = join_all((0..50).map(|_| deliver(&app, "charges", &body, &headers))).await;
        assert!(batch.iter().all(|(s, _)| *s == 401), "{batch:?}");
    }
    assert_eq!(
        every_table(&app).await,
        before,
        "1,000 refused signatures write no row anywhere"
    );
    let (status, refused) = get(
        &app,
        "/v1/deliveries/refused?source=charges&limit=500",
        &app.operator,
    )
    .await;
    assert_eq!(status, 200, "{refused}");
    let refused = refused.as_array().unwrap();
    assert_eq!(
        refused.len(),
        100,
        "the ring keeps the latest 100 per source"
    );
    assert_eq!(refused[0]["outcome"], "signature_refused");
    assert_eq!(refused[0]["status"], 401);
    assert_eq!(refused[0]["body_bytes"], body.len());
    let (_, page) = get(&app, "/v1/deliveries", &app.operator).await;
    assert_eq!(
        page["items"],
        json!([]),
        "nothing unauthenticated is in the log"
    );
    let metrics = app.scrape().await;
    assert!(
        metrics.contains(
            r#"oncegate_deliveries_total{outcome="signature_refused",source="charges"} 1000"#
        ),
        "{metrics}"
    );
    app.stop().await;
}

async fn the_log_is_searchable_and_bad_input_changes_nothing(backend: Backend) {
    let mock = MockTarget::start().await;
    let app = TestApp::spawn_with(backend, charges(mock.base_url())).await;
    let first = stripe_event("evt_1", "charge.succeeded", "ch_1");
    send(&app, &first).await;
    let (status, dup) = send(&app, &first).await;
    assert_eq!((status, dup["duplicate"].clone()), (200, json!(true)));
    let (status, _) = send(&app, b"not json").await;
    assert_eq!(status, 400);
    send(&app, &stripe_event("evt_2", "charge.updated", "ch_1")).await;

    let (_, page) = get(&app, "/v1/deliveries?source=charges", &app.operator).await;
    let outcomes: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        ["duplicate_of", "bad_request", "in_flight", "accepted"],
        "newest first (the redelivery came while the forward was queued)"
    );
    let (_, page) = get(&app, "/v1/deliveries?event_id=evt_1", &app.operator).await;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert_eq!(
        page["items"][0]["run"],
        json!({ "namespace": "charges", "key": "evt_1" })
    );
    let (_, bad) = get(&app, "/v1/deliveries?outcome=bad_request", &app.operator).await;
    assert_eq!(bad["items"][0]["status"], 400);
    assert!(
        bad["items"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("not JSON"),
        "{bad}"
    );
    let (_, later) = get(
        &app,
        "/v1/deliveries?since=2999-01-01T00:00:00Z",
        &app.operator,
    )
    .await;
    assert_eq!(later["items"], json!([]));
    let (_, recent) = get(
        &app,
        "/v1/deliveries?since=1h&until=2999-01-01T00:00:00Z",
        &app.operator,
    )
    .await;
    assert_eq!(recent["items"].as_array().unwrap().len(), 4);
    // Keyset pages of one walk the whole log once.
    let mut seen = Vec::new();
    let mut path = "/v1/deliveries?limit=1".to_owned();
    loop {
        let (status, page) = get(&app, &path, &app.operator).await;
        assert_eq!(status, 200, "{page}");
        seen.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["id"].clone()),
        );
        match page["next_cursor"].as_str() {
            Some(c) => path = format!("/v1/deliveries?limit=1&cursor={c}"),
            None => break,
        }
        assert!(seen.len() <= 5, "the pages end");
    }
    seen.dedup();
    assert_eq!(seen.len(), 4);

    // Bad input: a clear 4xx, and nothing changed.
    let before = every_table(&app).await;
    for (path, field) in [
        ("/v1/deliveries?outcome=lost", "outcome"),
        ("/v1/deliveries?since=yesterday", "since"),
        ("/v1/deliveries?limit=0", "limit"),
        ("/v1/deliveries?cursor=x", "cursor"),
    ] {
        let (status, problem) = get(&app, path, &app.operator).await;
        assert_eq!(status, 400, "{path}: {problem}");
        assert_eq!(problem["field"], field, "{path}");
    }
    let (status, _) = get(&app, "/v1/deliveries?colour=red", &app.operator).await;
    assert_eq!(status, 400);
    let (status, _) = get(&app, "/v1/deliveries", &app.workflow).await;
    assert_eq!(status, 403, "the operator scope reads the log");
    let (_, page) = get(&app, "/v1/deliveries?outcome=accepted", &app.operator).await;
    let accepted = page["items"][0]["id"].as_str().unwrap().to_owned();
    let (_, page) = get(&app, "/v1/deliveries?outcome=in_flight", &app.operator).await;
    let duplicate = page["items"][0]["id"].as_str().unwrap().to_owned();
    let reason = json!({ "reason": "because" });
    let cases = [
        (
            format!("/v1/deliveries/{accepted}/forward"),
            reason.clone(),
            409,
            "not-duplicate-of",
        ),
        (
            format!("/v1/deliveries/{duplicate}/redeliver"),
            reason.clone(),
            409,
            "not-redeliverable",
        ),
        (
            "/v1/deliveries/nope/forward".to_owned(),
            reason.clone(),
            404,
            "not-found",
        ),
        (
            format!("/v1/deliveries/{accepted}/redeliver"),
            json!({ "reason": " " }),
            400,
            "invalid-request",
        ),
        (
            format!("/v1/deliveries/{accepted}/redeliver"),
            json!({ "why": "x" }),
            400,
            "invalid-request",
        ),
    ];
    for (path, body, status, slug) in cases {
        let (got, problem) = app.post(&path, Some(&app.operator), &body).await;
        assert_eq!(got, status, "{path}: {problem}");
        assert!(
            problem["type"].as_str().unwrap_or_default().ends_with(slug),
            "{path}: {problem}"
        );
    }
    let (status, _) = app
        .post(
            &format!("/v1/deliveries/{accepted}/redeliver"),
            Some(&app.workflow),
            &reason,
        )
        .await;
    assert_eq!(status, 403);
    assert_eq!(every_table(&app).await, before, "nothing changed");
    app.stop().await;
}

async fn the_console_page_lists_and_forwards_behind_its_csrf_token(backend: Backend) {
    let mock = MockTarget::start().await;
    let app = TestApp::spawn_with(backend, charges(mock.base_url())).await;
    send(&app, &stripe_event("evt_1", "charge.succeeded", "ch_1")).await;
    send(&app, &stripe_event("evt_2", "charge.refunded", "ch_1")).await;
    let body = stripe_event("evt_x", "charge.succeeded", "ch_x");
    let forged = stripe_signature("whsec_wrong", chrono::Utc::now().timestamp(), &body);
    let (status, _) = deliver(&app, "charges", &body, &[("stripe-signature", forged)]).await;
    assert_eq!(status, 401);
    // Entries other than duplicate_of are written in batches; reads flush.
    app.state.logbook.flush().await;
    let dup = app
        .db
        .text("SELECT id FROM deliveries WHERE outcome = 'duplicate_of'")
        .await;
    let accepted = app
        .db
        .text("SELECT id FROM deliveries WHERE outcome = 'accepted'")
        .await;

    let anonymous = Http::anonymous(&app);
    assert_ne!(
        anonymous.get("/ui/deliveries").await.0,
        200,
        "a session is needed"
    );
    let ops = Http::login(&app, &app.operator).await;
    let (status, page) = ops.get("/ui/deliveries").await;
    assert_eq!(status, 200);
    for needle in [
        "evt_1",
        "evt_2",
        "charge.refunded",
        "duplicate_of",
        "Forward anyway",
        "Redeliver",
        "signature_refused",
    ] {
        assert!(page.contains(needle), "{needle} missing from the page");
    }
    let (_, only) = ops
        .get("/ui/deliveries?outcome=duplicate_of&source=charges")
        .await;
    assert!(
        only.contains("evt_2") && !only.contains("charge.succeeded"),
        "the filter applies"
    );
    let (status, bad) = ops.get("/ui/deliveries?since=someday").await;
    assert_eq!(status, 200);
    assert!(
        bad.contains("role=\"alert\""),
        "a bad criterion is shown, not stored"
    );

    let forward = format!("/ui/deliveries/{dup}/forward");
    let token = csrf_in(&page, &forward);
    let other = csrf_in(&page, &format!("/ui/deliveries/{accepted}/redeliver"));
    for fields in [
        vec![("reason", "needed")],
        vec![("reason", "needed"), ("csrf", "forged")],
        vec![("reason", "needed"), ("csrf", other.as_str())],
    ] {
        assert_eq!(
            ops.post_form(&forward, &fields).await.status(),
            403,
            "{fields:?}"
        );
    }
    let no_reason = ops
        .post_form(&forward, &[("reason", " "), ("csrf", token.as_str())])
        .await;
    assert_eq!(no_reason.status(), 400);
    let runs = "SELECT COUNT(*) FROM runs WHERE namespace = 'charges' AND run_key = 'evt_2'";
    assert_eq!(app.db.count(runs).await, 0, "refused forms change nothing");

    let done = ops
        .post_form(
            &forward,
            &[("reason", "the refund matters"), ("csrf", token.as_str())],
        )
        .await;
    assert_eq!(done.status(), 303);
    let again = ops
        .post_form(&forward, &[("reason", "twice"), ("csrf", token.as_str())])
        .await;
    assert_eq!(again.status(), 409, "forward anyway happens once");
    assert_eq!(app.db.count(runs).await, 1);
    assert_eq!(
        app.db
            .text("SELECT actor FROM audit_events WHERE namespace = 'charges' AND run_key = 'evt_2' AND kind = 'approve'")
            .await,
        "ops",
        "the signed-in subject is the actor"
    );
    let (_, page) = ops.get("/ui/deliveries").await;
    assert!(page.contains("forwarded as"), "the row links the new run");
    assert!(
        !page.contains(&format!("action=\"{forward}\"")),
        "and offers it no more"
    );
    let sent = forwards(&app, &mock).await;
    assert_eq!(sent.len(), 2);
    app.stop().await;
}

/// An entry of `outcome` for `event_id` received at `at`, with its raw
/// event when the outcome stores one.
fn entry(event_id: &str, outcome: DeliveryOutcome, at: i64) -> (DeliveryEntry, Option<RawEvent>) {
    let body = stripe_event(event_id, "charge.updated", "ch_1");
    let hash = PayloadHash::of_bytes(&body);
    let raw = (outcome == DeliveryOutcome::DuplicateOf).then(|| RawEvent {
        id: format!("raw-{event_id}"),
        source: "charges".into(),
        event_id: event_id.into(),
        event_type: Some("charge.updated".into()),
        status: RawStatus::DuplicateOf,
        payload_hash: hash.clone(),
        content_type: Some("application/json".into()),
        headers: Default::default(),
        body: body.clone(),
        received_at: at,
    });
    let entry = DeliveryEntry {
        id: format!("d-{event_id}"),
        source: "charges".into(),
        event_id: Some(event_id.into()),
        event_type: Some("charge.updated".into()),
        outcome,
        status: 200,
        payload_hash: hash.to_string(),
        body_bytes: body.len() as i64,
        raw_event_id: raw.as_ref().map(|r| r.id.clone()),
        run: Some(("charges".into(), "evt_holder".into())),
        detail: None,
        forwarded: None,
        redeliveries: 0,
        received_at: at,
    };
    (entry, raw)
}

async fn retention_deletes_old_entries_and_unclaimed_duplicate_bodies(backend: Backend) {
    const START: i64 = 1_700_000_000_000;
    let db = TestDb::new(backend).await;
    let clock = Arc::new(ManualClock::new(START));
    let store = db.manual_store(clock.clone()).await;
    let recent = START + 25 * DAY_MS;
    for (id, outcome, at) in [
        ("evt_old", DeliveryOutcome::Duplicate, START),
        ("evt_orphan", DeliveryOutcome::DuplicateOf, START),
        ("evt_taken", DeliveryOutcome::DuplicateOf, START),
        ("evt_recent", DeliveryOutcome::DuplicateOf, recent),
    ] {
        let (entry, raw) = entry(id, outcome, at);
        store.record_delivery(&entry, raw.as_ref()).await.unwrap();
    }
    // evt_taken was forwarded anyway: its body belongs to its run now.
    let claim = ClaimRequest {
        namespace: Namespace::parse("charges").unwrap(),
        key: IdempotencyKey::parse("evt_taken").unwrap(),
        business_key: None,
        payload_hash: PayloadHash::of_bytes(b"x"),
        lease_ms: 60_000,
        metadata: RunMetadata::default(),
        claimed_by: "ops".into(),
    };
    store.claim(&claim).await.unwrap();
    clock.advance_ms(31 * DAY_MS);
    let config = RetentionConfig {
        archive_dir: std::env::temp_dir().join(format!("og-deliveries-{}", uuid::Uuid::new_v4())),
        ..RetentionConfig::default()
    };
    let redactor = oncegate::audit::Redactor::none();
    let report = sweep(store.as_ref(), &config, &redactor, clock.now_ms(), false)
        .await
        .unwrap();
    assert_eq!(report.deliveries_deleted, 3, "{report:?}");
    assert_eq!(report.duplicate_bodies_deleted, 1, "{report:?}");
    assert_eq!(
        db.texts("SELECT id FROM deliveries").await,
        ["d-evt_recent"]
    );
    assert_eq!(
        db.texts("SELECT event_id FROM raw_events ORDER BY event_id")
            .await,
        ["evt_recent", "evt_taken"],
        "a body some run took up goes with that run"
    );
    let _ = std::fs::remove_dir_all(&config.archive_dir);
    store.close().await;
}
