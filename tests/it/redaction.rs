//! Redaction on both backends: a configured field's value never reaches a
//! table (every column of every table is dumped as text and searched, in
//! plain and hex form), except the verbatim body an effect must forward,
//! and that one only until the effect is done and the sweeper ran; the
//! archive files never hold it either. Model output is minimised to the
//! operation's `keep_fields` and redacted before it is stored: neither its
//! row, nor the approval card built from it (JSON and HTML), nor the
//! server's logs (captured at trace level while the output is posted,
//! gated and shown), nor the archive hold a redacted or a dropped value.

use oncegate::clock::{Clock, SystemClock};
use oncegate::config::Config;
use oncegate::retention::{sweep, RetentionConfig, DAY_MS};
use serde_json::{json, Value};

use crate::harness::{on_both_backends, Backend, TestApp, TestDb};
use crate::ingress::{deliver, stripe_signature, SECRET};
use crate::target::{Behaviour, MockTarget};

const EMAIL: &str = "who-is-this@example.com";
const CARD: &str = "card-9876-5432";
/// A field of the model output its operation does not keep.
const NOTE: &str = "internal-note-only-for-the-model";

/// The server's own log lines (target `oncegate…`, every level), written
/// to memory while at least one [`Capture`] lives; one subscriber for the
/// whole test binary, installed by the first capture.
mod logs {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex, OnceLock};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;

    static ACTIVE: AtomicUsize = AtomicUsize::new(0);
    static BUFFER: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();

    #[derive(Clone)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Captures while it lives.
    pub struct Capture;

    impl Capture {
        pub fn start() -> Self {
            BUFFER.get_or_init(|| {
                let buffer = Arc::new(Mutex::new(Vec::new()));
                let sink = Sink(buffer.clone());
                let layer = tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_writer(move || sink.clone())
                    .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                        ACTIVE.load(Ordering::SeqCst) > 0 && meta.target().starts_with("oncegate")
                    }));
                let subscriber = tracing_subscriber::registry().with(layer);
                tracing::subscriber::set_global_default(subscriber)
                    .expect("no other global subscriber in the test binary");
                buffer
            });
            ACTIVE.fetch_add(1, Ordering::SeqCst);
            Self
        }

        /// Everything captured so far (by any live capture).
        pub fn text(&self) -> String {
            let buffer = BUFFER.get().expect("started").lock().unwrap();
            String::from_utf8_lossy(&buffer).into_owned()
        }
    }

    impl Drop for Capture {
        fn drop(&mut self) {
            ACTIVE.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Every `table.column` whose text holds `needle` (or its hex).
pub async fn columns_holding(db: &TestDb, needle: &str) -> Vec<String> {
    let hex = hex::encode(needle);
    let upper = hex.to_uppercase();
    let pg = db.backend == Backend::Postgres;
    let tables_sql = if pg {
        "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public'"
    } else {
        "SELECT name FROM sqlite_master WHERE type = 'table'"
    };
    let columns_sql = |t: &str| {
        if pg {
            format!(
                "SELECT column_name::text FROM information_schema.columns \
                 WHERE table_schema = 'public' AND table_name = '{t}'"
            )
        } else {
            format!("SELECT name FROM pragma_table_info('{t}')")
        }
    };
    let cast = |t: &str, c: &str| {
        if pg {
            format!("SELECT \"{c}\"::text FROM \"{t}\"")
        } else {
            // hex() reads text and blobs alike, whatever their bytes.
            format!("SELECT hex(\"{c}\") FROM \"{t}\"")
        }
    };
    let mut found = Vec::new();
    for table in db.texts(tables_sql).await {
        for column in db.texts(&columns_sql(&table)).await {
            let values = db.texts(&cast(&table, &column)).await;
            if values
                .iter()
                .any(|v| v.contains(needle) || v.contains(&hex) || v.contains(&upper))
            {
                found.push(format!("{table}.{column}"));
            }
        }
    }
    found
}

fn configure(base: String, archive: std::path::PathBuf) -> impl FnOnce(&mut Config) {
    move |config: &mut Config| {
        let parsed: Config = toml::from_str(&format!(
            "[[targets]]\nname = \"n8n\"\nbase_url = \"{base}/webhook\"\nkind = \"workflow\"\n\
             [[targets]]\nname = \"crm_api\"\nbase_url = \"{base}\"\n\
             [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"{SECRET}\"]\n\
             target = \"n8n\"\npath = \"/stripe-events\"\n\
             [[operations]]\nname = \"send_email\"\ngate = \"none\"\n\
             [[operations]]\nname = \"draft_reply\"\ncustomer_visible = true\n\
             [operations.output]\nmax_repairs = 1\nkeep_fields = [\"/reply\", \"/data\"]\n\
             [operations.output.schema]\ntype = \"object\"\nrequired = [\"reply\"]\n\
             [operations.output.schema.properties]\nreply = {{ type = \"string\" }}\n\
             data = {{ type = \"object\" }}\nnotes = {{ type = \"string\" }}\n\
             [[redact]]\nnamespace = \"stripe\"\npointers = [\"/data/object/customer_email\"]\n\
             fields = [\"card_last4\"]\n\
             [[redact]]\nnamespace = \"payments\"\npointers = [\"/data/object/customer_email\"]\n\
             fields = [\"card_last4\"]\n"
        ))
        .unwrap();
        config.targets = parsed.targets;
        config.sources = parsed.sources;
        config.operations = parsed.operations;
        config.redact = parsed.redact;
        config.retention = RetentionConfig {
            archive_dir: archive,
            ..RetentionConfig::default()
        };
    }
}

fn event(id: &str, email: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "id": id, "type": "customer.updated",
        "data": { "object": { "id": "cus_1", "customer_email": email, "card_last4": CARD } },
    }))
    .unwrap()
}

async fn signed(app: &TestApp, body: &[u8]) -> (u16, Value) {
    let sig = stripe_signature(SECRET, chrono::Utc::now().timestamp(), body);
    deliver(app, "stripe", body, &[("stripe-signature", sig)]).await
}

async fn redacted_fields_never_reach_a_table(backend: Backend) {
    let mock = MockTarget::start().await;
    let echo = String::from_utf8(event("evt_echo", EMAIL)).unwrap();
    mock.on_path("/webhook/stripe-events", Behaviour::json(200, &echo));
    mock.on_path(
        "/fail",
        Behaviour::Respond {
            status: 400,
            headers: vec![("content-type".into(), "text/html".into())],
            body: format!("<p>no customer {EMAIL}</p>"),
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::spawn_with(
        backend,
        configure(mock.base_url(), dir.path().join("archive")),
    )
    .await;

    // A delivery (forwarded to a target that echoes it), then a conflicting
    // redelivery (quarantined as evidence).
    assert_eq!(signed(&app, &event("evt_1", EMAIL)).await.0, 200);
    let (_, q) = signed(&app, &event("evt_1", "other-person@example.com")).await;
    assert_eq!(q["quarantined"], true);
    // A workflow run whose effect fails permanently against an echoing
    // target, and one that completes with the field in its result.
    let payload = json!({ "data": { "object": { "customer_email": EMAIL } } });
    let (_, claim) = app
        .claim(json!({ "namespace": "payments", "key": "biz:1", "payload": payload }))
        .await;
    let commit = json!({ "namespace": "payments", "key": "biz:1", "lease": claim["lease"],
        "result": { "data": { "object": { "customer_email": EMAIL } }, "card_last4": CARD },
        "effects": [{ "operation": "send_email", "effect_type": "send_email", "target": "crm_api",
                      "path": "/fail", "body": { "data": { "object": { "customer_email": EMAIL } } } }] });
    assert_eq!(
        app.post("/v1/runs/commit", Some(&app.workflow), &commit)
            .await
            .0,
        200
    );
    let (_, claim) = app
        .claim(json!({ "namespace": "payments", "key": "biz:2", "payload": {} }))
        .await;
    let complete = json!({ "namespace": "payments", "key": "biz:2", "lease": claim["lease"],
        "result": { "nested": [{ "card_last4": CARD }], "data": { "object": { "customer_email": EMAIL } } } });
    assert_eq!(
        app.post("/v1/runs/complete", Some(&app.workflow), &complete)
            .await
            .0,
        200
    );
    // Model output holding both values and a field its operation does not
    // keep, validated, gated and shown on a card, the logs captured.
    let capture = logs::Capture::start();
    let (_, claim) = app
        .claim(json!({ "namespace": "payments", "key": "biz:3", "payload": {} }))
        .await;
    let output = json!({ "namespace": "payments", "key": "biz:3", "lease": claim["lease"],
        "operation": "draft_reply",
        "output": { "reply": "Your card is fine", "card_last4": CARD, "notes": NOTE,
                    "data": { "object": { "customer_email": EMAIL } } },
        "model": { "provider_class": "hosted", "model": "drafter", "revision": "r1" } });
    let (status, answer) = app
        .post("/v1/runs/output", Some(&app.workflow), &output)
        .await;
    assert_eq!(status, 200, "{answer}");
    let gate = json!({ "namespace": "payments", "key": "biz:3", "lease": claim["lease"],
        "summary": "a reply", "effects": [{ "operation": "draft_reply", "effect_type": "reply",
            "target": "crm_api", "path": "/reply", "body": { "text": "Your card is fine" } }] });
    let (status, answer) = app.post("/v1/runs/gate", Some(&app.workflow), &gate).await;
    assert_eq!(status, 200, "{answer}");
    let (status, inbox) = crate::deadletters::get(&app, "/v1/approvals", &app.approver).await;
    assert_eq!(status, 200, "{inbox}");
    let card = inbox.to_string();
    assert!(card.contains("Your card is fine"), "{card}");
    assert!(
        card.contains("customer_email"),
        "a kept field is shown, redacted: {card}"
    );
    let link = answer["approval_url"].as_str().expect("a person decides");
    let alice = crate::approvals::Browser::login(&app, &app.approver).await;
    let (status, html) = alice
        .get(link.strip_prefix(&app.base).expect("under the base"))
        .await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Your card is fine"), "{html}");
    let logged = capture.text();
    drop(capture);
    assert!(
        logged.contains("/v1/runs/output"),
        "the capture holds the server's lines"
    );
    for needle in [EMAIL, CARD, NOTE] {
        assert!(!card.contains(needle), "{needle} on the card: {card}");
        assert!(!html.contains(needle), "{needle} on the card's page");
        assert!(!logged.contains(needle), "{needle} in the logs");
    }
    assert!(
        columns_holding(&app.db, NOTE).await.is_empty(),
        "a field the operation does not keep is never stored"
    );

    let dispatcher = app.dispatcher();
    for _ in 0..3 {
        dispatcher.dispatch_once().await.unwrap();
    }
    assert_eq!(mock.requests().len(), 2);
    let (_, run) = app.get_run("payments", "biz:1").await;
    assert_eq!(run["state"], "dead_lettered");

    // Only the bodies kept to be forwarded hold the value, nothing else.
    for needle in [EMAIL, CARD] {
        assert_eq!(
            columns_holding(&app.db, needle).await,
            ["effects.body"],
            "{needle}"
        );
    }
    // The operator resolves the dead letters (the dlq part's move, done by
    // hand here); the sweeper scrubs what is no longer needed verbatim.
    app.db
        .exec("UPDATE runs SET state = 'failed_terminal' WHERE run_key = 'biz:1'")
        .await;
    app.db
        .exec("UPDATE dead_letters SET resolved_at = 1, resolution = 'rejected'")
        .await;
    let redactor = app.state.config.redactor();
    let retention = &app.state.config.retention;
    let now = SystemClock.now_ms();
    let r = sweep(app.store.as_ref(), retention, &redactor, now, false)
        .await
        .unwrap();
    assert_eq!(r.scrubbed, 2);
    for needle in [EMAIL, CARD, "other-person@example.com"] {
        assert_eq!(
            columns_holding(&app.db, needle).await,
            Vec::<String>::new(),
            "{needle}"
        );
    }
    let (_, run) = app.get_run("payments", "biz:2").await;
    assert_eq!(
        run["result"]["data"]["object"]["customer_email"],
        "[redacted]"
    );
    assert_eq!(run["result"]["nested"][0]["card_last4"], "[redacted]");

    // Archived, nothing holds it either: not the tables, not the files.
    let r = sweep(
        app.store.as_ref(),
        retention,
        &redactor,
        now + 91 * DAY_MS,
        false,
    )
    .await
    .unwrap();
    assert_eq!(r.slimmed, 3, "{r:?}");
    let mut archived = String::new();
    for file in &r.files {
        archived.push_str(&std::fs::read_to_string(file).unwrap());
    }
    assert!(archived.contains("evt_1") && archived.contains("[redacted]"));
    for needle in [EMAIL, CARD, NOTE] {
        assert!(!archived.contains(needle), "{needle} in the archive");
        assert!(columns_holding(&app.db, needle).await.is_empty());
    }
    app.stop().await;
}

on_both_backends!(redacted_fields_never_reach_a_table);
