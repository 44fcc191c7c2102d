//! A database that refuses writes: every write answers 503 problem+json
//! `database-unavailable` (never 500), nothing is acknowledged or sent,
//! reads keep working, and everything works again once writes are allowed.
//!
//! SQLite refuses through the server's own write connection: `PRAGMA
//! query_only` (SQLITE_READONLY, what a read-only database answers) and
//! `PRAGMA max_page_count` at the current size (SQLITE_FULL, a full
//! disk). PostgreSQL: `ALTER DATABASE … SET default_transaction_read_only`,
//! then the server's sessions are ended so its pool reconnects under it.

use std::sync::Arc;
use std::time::Duration;

use oncegate::app;
use oncegate::clock::{SharedClock, SystemClock};
use oncegate::config::{Config, Scope};
use oncegate::db::sqlite::SqliteStore;
use oncegate::db::{SharedStore, StoreOptions};
use serde_json::{json, Value};
use sqlx::Connection;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::harness::{eventually, on_both_backends, pg_admin_url, token, Backend, TestDb};
use crate::ingress::{stripe_signature, SECRET};
use crate::target::MockTarget;

/// The app under test, and its SQLite store (to reach its write connection).
struct App {
    base: String,
    client: reqwest::Client,
    workflow: String,
    state: oncegate::state::AppState,
    sqlite: Option<Arc<SqliteStore>>,
    shutdown: CancellationToken,
}

async fn spawn(db: &TestDb, target: &MockTarget) -> App {
    let clock: SharedClock = Arc::new(SystemClock);
    let options = StoreOptions {
        max_connections: 3,
        busy_timeout_ms: 1_000,
        clock: clock.clone(),
        use_db_clock: true,
        redaction: Default::default(),
        ledger: Default::default(),
    };
    let (store, sqlite): (SharedStore, _) = match db.backend {
        Backend::Sqlite => {
            let store = Arc::new(SqliteStore::connect(&db.url, options).await.unwrap());
            (store.clone(), Some(store))
        }
        Backend::Postgres => (oncegate::db::connect(&db.url, options).await.unwrap(), None),
    };
    store.migrate().await.unwrap();
    let (workflow, entry) = token("n8n", &[Scope::Workflow]);
    let mut config = Config::default();
    config.database.url = db.url.clone();
    config.tokens = vec![entry];
    config.dispatcher.enabled = false;
    config.targets = vec![toml::from_str(&format!(
        "name = \"n8n\"\nbase_url = \"{}/webhook\"\nkind = \"workflow\"\n",
        target.base_url()
    ))
    .unwrap()];
    config.sources = vec![toml::from_str(&format!(
        "name = \"shop\"\nscheme = \"stripe\"\nsecrets = [\"{SECRET}\"]\ntarget = \"n8n\"\n"
    ))
    .unwrap()];
    config.validate().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (state, _) = app::build_state(config, store, clock).await.unwrap();
    let shutdown = CancellationToken::new();
    let (serving, stop) = (state.clone(), shutdown.clone());
    tokio::spawn(async move { app::run_server(listener, serving, stop).await.unwrap() });
    App {
        base,
        client: reqwest::Client::new(),
        workflow,
        state,
        sqlite,
        shutdown,
    }
}

impl App {
    /// Delivers event `id` (with `pad` bytes of padding in its body).
    async fn deliver(&self, id: &str, pad: usize) -> (u16, Option<String>, Value) {
        let body =
            serde_json::to_vec(&json!({ "id": id, "type": "order.paid", "pad": "x".repeat(pad) }))
                .unwrap();
        let t = chrono::Utc::now().timestamp();
        let resp = self
            .client
            .post(format!("{}/hooks/shop", self.base))
            .header("content-type", "application/json")
            .header("stripe-signature", stripe_signature(SECRET, t, &body))
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
        let body: Value = resp.json().await.unwrap();
        if status == 503 {
            assert_eq!(ct, "application/problem+json");
        }
        (status, retry_after, body)
    }

    async fn dispatch(&self) -> Result<oncegate::outbox::StepReport, oncegate::db::StoreError> {
        crate::harness::dispatcher_for(&self.state)
            .dispatch_once()
            .await
    }

    async fn get(&self, path: &str) -> u16 {
        let resp = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.workflow)
            .send()
            .await
            .unwrap();
        resp.status().as_u16()
    }
}

/// Runs one statement on the SQLite store's own write connection (the
/// only one that writes), between two group commits, and returns the
/// first column of its first row.
async fn on_write_connection(store: &SqliteStore, sql: &str) -> Option<i64> {
    store.writer().between_batches(sql).await.unwrap()
}

/// Every delivery while writes are refused: 503 database-unavailable, with Retry-After.
async fn refused(app: &App, ids: &[&str], pad: usize) {
    for id in ids {
        let (status, retry_after, body) = app.deliver(id, pad).await;
        assert_eq!(status, 503, "{id}: {body}");
        assert_eq!(
            body["type"], "urn:oncegate:problem:database-unavailable",
            "{body}"
        );
        assert!(retry_after.is_some(), "503 names when to come back");
    }
}

async fn stored(db: &TestDb, ids: &[&str]) -> i64 {
    let list = ids
        .iter()
        .map(|id| format!("'{id}'"))
        .collect::<Vec<_>>()
        .join(",");
    db.count(&format!(
        "SELECT COUNT(*) FROM runs WHERE run_key IN ({list})"
    ))
    .await
}

/// Turns refusal on or off: SQLite through the server's write connection,
/// PostgreSQL for the database, with the server's sessions ended.
async fn read_only(db: &TestDb, app: &App, on: bool) {
    if let Some(store) = &app.sqlite {
        let value = if on { "ON" } else { "OFF" };
        on_write_connection(store, &format!("PRAGMA query_only = {value}")).await;
        return;
    }
    let name = db.url.rsplit('/').next().unwrap();
    let mut admin = sqlx::PgConnection::connect(&pg_admin_url()).await.unwrap();
    let setting = if on {
        "SET default_transaction_read_only = on"
    } else {
        "RESET default_transaction_read_only"
    };
    sqlx::query(&format!("ALTER DATABASE {name} {setting}"))
        .execute(&mut admin)
        .await
        .unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()")
        .bind(name)
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();
}

async fn a_database_that_refuses_writes_answers_503_and_recovers(backend: Backend) {
    let target = MockTarget::start().await;
    target.honour_keys("idempotency-key", true);
    let db = TestDb::new(backend).await;
    let app = spawn(&db, &target).await;
    assert_eq!(app.deliver("evt_before", 0).await.0, 200);
    assert_eq!(app.deliver("evt_pending", 0).await.0, 200);

    read_only(&db, &app, true).await;
    let refused_ids = ["evt_r1", "evt_r2", "evt_r3"];
    refused(&app, &refused_ids, 0).await;
    // A duplicate of a stored event is either answered from what is
    // stored (SQLite reads it without a write) or refused; never stored twice.
    let (status, _, body) = app.deliver("evt_before", 0).await;
    match status {
        200 => assert_eq!(body["duplicate"], true, "{body}"),
        503 => {}
        other => panic!("a duplicate while writes are refused: {other} {body}"),
    }
    let claim = json!({ "namespace": "crm", "key": "k1", "payload": {} });
    let resp = app
        .client
        .post(format!("{}/v1/claims", app.base))
        .bearer_auth(&app.workflow)
        .json(&claim)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert!(
        app.dispatch().await.is_err(),
        "the dispatcher cannot lease, so sends nothing"
    );
    assert!(
        target.requests().is_empty(),
        "a refused write sends nothing"
    );
    // Reads still answer.
    assert_eq!(app.get("/v1/runs?namespace=shop&key=evt_before").await, 200);
    // Not ready: every write would be refused.
    assert_eq!(app.get("/readyz").await, 503);
    assert_eq!(
        stored(&db, &refused_ids).await,
        0,
        "nothing refused was stored"
    );

    read_only(&db, &app, false).await;
    // The provider redelivers after each 503 (Retry-After). On PostgreSQL a
    // pooled connection the server ended fails its next statement (503) and
    // is then discarded, so a few redeliveries may be refused before every
    // one is accepted, with no operator action.
    for id in refused_ids {
        eventually(
            &format!("{id} accepted once writes are allowed"),
            Duration::from_secs(30),
            || async {
                match app.deliver(id, 0).await {
                    (200, _, _) => Some(()),
                    (503, _, _) => None,
                    (status, _, body) => panic!("{id}: {status} {body}"),
                }
            },
        )
        .await;
    }
    assert_eq!(stored(&db, &refused_ids).await, 3);
    // Ready again (a PostgreSQL connection the server ended may fail one
    // probe before the pool replaces it).
    eventually(
        "ready once writes are allowed",
        Duration::from_secs(30),
        || async { (app.get("/readyz").await == 200).then_some(()) },
    )
    .await;
    app.dispatch().await.unwrap();
    for id in ["evt_before", "evt_pending", "evt_r1", "evt_r2", "evt_r3"] {
        assert_eq!(
            target.effect_count_for_key(&format!("shop:{id}:forward")),
            1,
            "{id}"
        );
    }
    app.shutdown.cancel();
}

/// SQLite at its page limit (a full disk): a delivery that needs new pages
/// is refused with 503, and accepted once the limit is lifted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_sqlite_database_answers_503_and_recovers() {
    let target = MockTarget::start().await;
    let db = TestDb::new(Backend::Sqlite).await;
    let app = spawn(&db, &target).await;
    let store = app.sqlite.clone().unwrap();
    assert_eq!(app.deliver("evt_small", 0).await.0, 200);
    // No free pages to reuse: the next write must grow the file.
    db.exec("VACUUM").await;
    let pages = on_write_connection(&store, "PRAGMA page_count")
        .await
        .unwrap();
    let limit = on_write_connection(&store, &format!("PRAGMA max_page_count = {pages}")).await;
    assert_eq!(limit, Some(pages));
    refused(&app, &["evt_big1", "evt_big2"], 20_000).await;
    assert_eq!(stored(&db, &["evt_big1", "evt_big2"]).await, 0);

    on_write_connection(&store, "PRAGMA max_page_count = 1073741823").await;
    assert_eq!(app.deliver("evt_big1", 20_000).await.0, 200);
    assert_eq!(app.deliver("evt_big2", 20_000).await.0, 200);
    assert_eq!(stored(&db, &["evt_big1", "evt_big2"]).await, 2);
    app.shutdown.cancel();
}

on_both_backends!(a_database_that_refuses_writes_answers_503_and_recovers);
