//! Test harness: fresh databases, in-process apps and real binaries.
//!
//! PostgreSQL tests each get a database cloned from a migrated template
//! (named by a hash of the migration files, built once under an advisory
//! lock) and dropped afterwards, so tests run in parallel without sharing
//! rows and the server never runs out of connections.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use oncegate::app;
use oncegate::clock::{ManualClock, SharedClock, SystemClock};
use oncegate::config::{Config, Scope, TokenConfig};
use oncegate::db::{self as store, SharedStore, StoreOptions};
use oncegate::ledger::{
    ClaimOutcome, ClaimRequest, IdempotencyKey, Namespace, OwnerCall, PayloadHash, RunMetadata,
};
use oncegate::outbox::{EffectSpec, NewEffect};
use oncegate::tokens::{digest, generate_token};
use serde_json::Value;
use sha2::{Digest, Sha256};
use sqlx::Connection;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Which backend a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The PostgreSQL server tests use (the maintenance database).
pub fn pg_admin_url() -> String {
    std::env::var("ONCEGATE_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn pg_url_for(db: &str) -> String {
    let admin = pg_admin_url();
    let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
    format!("{base}/{db}")
}

fn migrations_hash() -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("migrations/postgres");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut hasher = Sha256::new();
    for f in files {
        hasher.update(std::fs::read(f).unwrap());
    }
    hex::encode(&hasher.finalize()[..6])
}

/// A database that exists for one test.
pub struct TestDb {
    pub backend: Backend,
    pub url: String,
    pg_name: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    pub async fn new(backend: Backend) -> Self {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}", dir.path().join("oncegate.db").display());
                Self {
                    backend,
                    url,
                    pg_name: None,
                    _dir: Some(dir),
                }
            }
            Backend::Postgres => {
                let name = format!("og_test_{}", uuid::Uuid::new_v4().simple());
                create_pg_database(&name).await;
                Self {
                    backend,
                    url: pg_url_for(&name),
                    pg_name: Some(name),
                    _dir: None,
                }
            }
        }
    }

    /// A store on this database with a hand-moved clock (also for
    /// PostgreSQL, whose lease times then come from the clock, not `now()`).
    pub async fn manual_store(&self, clock: Arc<ManualClock>) -> SharedStore {
        self.store(clock, false).await
    }

    pub async fn store(&self, clock: SharedClock, use_db_clock: bool) -> SharedStore {
        self.store_redacting(clock, use_db_clock, Default::default())
            .await
    }

    /// A store that applies these redaction rules before storage.
    pub async fn store_redacting(
        &self,
        clock: SharedClock,
        use_db_clock: bool,
        redaction: Arc<oncegate::audit::Redactor>,
    ) -> SharedStore {
        self.store_with(clock, use_db_clock, redaction, Default::default())
            .await
    }

    /// A store with these redaction rules and these ledger recovery rules.
    pub async fn store_with(
        &self,
        clock: SharedClock,
        use_db_clock: bool,
        redaction: Arc<oncegate::audit::Redactor>,
        ledger: Arc<oncegate::ledger::LedgerConfig>,
    ) -> SharedStore {
        let options = StoreOptions {
            max_connections: 3,
            busy_timeout_ms: 5_000,
            clock,
            use_db_clock,
            redaction,
            ledger,
        };
        let store = store::connect(&self.url, options).await.unwrap();
        store.migrate().await.unwrap();
        store
    }

    /// Runs raw SQL, for tests that need a state no API reaches yet.
    pub async fn exec(&self, sql: &str) {
        match self.backend {
            Backend::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.url).await.unwrap();
                sqlx::query(sql).execute(&mut c).await.unwrap();
                c.close().await.unwrap();
            }
            Backend::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.url).await.unwrap();
                sqlx::query(sql).execute(&mut c).await.unwrap();
                c.close().await.unwrap();
            }
        }
    }

    /// Runs a raw `SELECT` of one text column (NULL as "").
    pub async fn texts(&self, sql: &str) -> Vec<String> {
        let rows: Vec<Option<String>> = match self.backend {
            Backend::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.url).await.unwrap();
                let rows = sqlx::query_scalar(sql).fetch_all(&mut c).await.unwrap();
                c.close().await.unwrap();
                rows
            }
            Backend::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.url).await.unwrap();
                let rows = sqlx::query_scalar(sql).fetch_all(&mut c).await.unwrap();
                c.close().await.unwrap();
                rows
            }
        };
        rows.into_iter().map(Option::unwrap_or_default).collect()
    }

    /// The one text value `sql` selects.
    pub async fn text(&self, sql: &str) -> String {
        match self.backend {
            Backend::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.url).await.unwrap();
                let v: String = sqlx::query_scalar(sql).fetch_one(&mut c).await.unwrap();
                c.close().await.unwrap();
                v
            }
            Backend::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.url).await.unwrap();
                let v: String = sqlx::query_scalar(sql).fetch_one(&mut c).await.unwrap();
                c.close().await.unwrap();
                v
            }
        }
    }

    /// Counts rows with a raw `SELECT COUNT(*) …`.
    pub async fn count(&self, sql: &str) -> i64 {
        match self.backend {
            Backend::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.url).await.unwrap();
                let n: i64 = sqlx::query_scalar(sql).fetch_one(&mut c).await.unwrap();
                c.close().await.unwrap();
                n
            }
            Backend::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.url).await.unwrap();
                let n: i64 = sqlx::query_scalar(sql).fetch_one(&mut c).await.unwrap();
                c.close().await.unwrap();
                n
            }
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some(name) = self.pg_name.take() else {
            return;
        };
        // Drop runs outside any runtime guarantee: use a thread of our own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                if let Ok(mut c) = sqlx::PgConnection::connect(&pg_admin_url()).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut c)
                        .await;
                    let _ = c.close().await;
                }
            });
        })
        .join();
    }
}

async fn create_pg_database(name: &str) {
    let template = format!("og_tpl_{}", migrations_hash());
    let mut admin = sqlx::PgConnection::connect(&pg_admin_url())
        .await
        .expect("PostgreSQL must run on 127.0.0.1:5432 (scripts/test starts it)");
    sqlx::query("SELECT pg_advisory_lock(727274)")
        .execute(&mut admin)
        .await
        .unwrap();
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
        .bind(&template)
        .fetch_optional(&mut admin)
        .await
        .unwrap();
    if exists.is_none() {
        let building = format!("{template}_building");
        sqlx::query(&format!("DROP DATABASE IF EXISTS {building} WITH (FORCE)"))
            .execute(&mut admin)
            .await
            .unwrap();
        sqlx::query(&format!("CREATE DATABASE {building}"))
            .execute(&mut admin)
            .await
            .unwrap();
        let options = StoreOptions {
            max_connections: 1,
            busy_timeout_ms: 1_000,
            clock: Arc::new(SystemClock),
            use_db_clock: true,
            redaction: Default::default(),
            ledger: Default::default(),
        };
        let store = store::connect(&pg_url_for(&building), options)
            .await
            .unwrap();
        store.migrate().await.unwrap();
        store.close().await;
        retry_while_in_use(
            &mut admin,
            &building,
            &format!("ALTER DATABASE {building} RENAME TO {template}"),
        )
        .await;
    }
    retry_while_in_use(
        &mut admin,
        &template,
        &format!("CREATE DATABASE {name} TEMPLATE {template}"),
    )
    .await;
    sqlx::query("SELECT pg_advisory_unlock(727274)")
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();
}

/// Runs DDL that needs `db` to have no sessions, ending any that linger
/// (a closed pool's backends exit asynchronously).
async fn retry_while_in_use(admin: &mut sqlx::PgConnection, db: &str, ddl: &str) {
    for attempt in 0.. {
        match sqlx::query(ddl).execute(&mut *admin).await {
            Ok(_) => return,
            Err(sqlx::Error::Database(e))
                if e.code().as_deref() == Some("55006") && attempt < 50 =>
            {
                sqlx::query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
                )
                .bind(db)
                .execute(&mut *admin)
                .await
                .unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{ddl}: {e}"),
        }
    }
}

/// A token and the config entry that accepts it.
pub fn token(subject: &str, scopes: &[Scope]) -> (String, TokenConfig) {
    let token = generate_token();
    let entry = TokenConfig {
        subject: subject.into(),
        digest: digest(&token),
        scopes: scopes.to_vec(),
        roles: vec![],
        namespaces: None,
    };
    (token, entry)
}

/// An app served in-process on 127.0.0.1:0.
pub struct TestApp {
    pub base: String,
    pub client: reqwest::Client,
    /// A token with the workflow scope.
    pub workflow: String,
    /// A token with the operator scope only.
    pub operator: String,
    /// A token with the approver scope only.
    pub approver: String,
    pub store: SharedStore,
    pub db: TestDb,
    pub state: oncegate::state::AppState,
    shutdown: CancellationToken,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl TestApp {
    pub async fn spawn(backend: Backend) -> Self {
        Self::spawn_with(backend, |_| {}).await
    }

    pub async fn spawn_with(backend: Backend, adjust: impl FnOnce(&mut Config)) -> Self {
        Self::spawn_on(backend, Arc::new(SystemClock), true, adjust).await
    }

    /// An app whose every part reads `clock` (PostgreSQL too: its lease
    /// times then come from the clock, not `now()`).
    pub async fn spawn_clocked(
        backend: Backend,
        clock: Arc<ManualClock>,
        adjust: impl FnOnce(&mut Config),
    ) -> Self {
        Self::spawn_on(backend, clock, false, adjust).await
    }

    async fn spawn_on(
        backend: Backend,
        clock: SharedClock,
        use_db_clock: bool,
        adjust: impl FnOnce(&mut Config),
    ) -> Self {
        let db = TestDb::new(backend).await;
        let (workflow, wf_entry) = token("n8n", &[Scope::Workflow]);
        let (operator, op_entry) = token("ops", &[Scope::Operator]);
        let (approver, ap_entry) = token("alice", &[Scope::Approver]);
        let mut config = Config::default();
        config.database.url = db.url.clone();
        config.database.max_connections = 3;
        config.tokens = vec![wf_entry, op_entry, ap_entry];
        config.server.listen = "127.0.0.1:0".parse().unwrap();
        // Tests drive the dispatcher step by step (see `dispatcher`).
        config.dispatcher.enabled = false;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        config.server.public_base_url = Some(base.clone());
        adjust(&mut config);
        let store = db
            .store_with(
                clock.clone(),
                use_db_clock,
                Arc::new(config.redactor()),
                Arc::new(config.ledger.clone()),
            )
            .await;
        let (state, bootstrap) = app::build_state(config, store.clone(), clock)
            .await
            .unwrap();
        assert!(
            bootstrap.is_none(),
            "configured tokens must suppress the bootstrap token"
        );
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let app_state = state.clone();
        let server = tokio::spawn(async move {
            app::run_server(listener, state, stop).await.unwrap();
        });
        Self {
            base,
            client: reqwest::Client::new(),
            workflow,
            operator,
            approver,
            store,
            db,
            state: app_state,
            shutdown,
            server: Some(server),
        }
    }

    /// A dispatcher over this app's store, targets and kill switch.
    pub fn dispatcher(&self) -> oncegate::outbox::Dispatcher {
        dispatcher_for(&self.state)
    }

    /// POSTs JSON with a bearer token; returns status and parsed body.
    pub async fn post(&self, path: &str, token: Option<&str>, body: &Value) -> (u16, Value) {
        let mut req = self.client.post(format!("{}{path}", self.base)).json(body);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        answer(req).await
    }

    /// POSTs a raw JSON body to `/hooks/{source}` without a signature; the status.
    pub async fn hook_unsigned(&self, source: &str, body: &str) -> u16 {
        let response = self
            .client
            .post(format!("{}/hooks/{source}", self.base))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        response.status().as_u16()
    }

    /// The server's `/metrics` text (asserting a 200).
    pub async fn scrape(&self) -> String {
        scrape(&self.client, &self.base).await
    }

    pub async fn claim(&self, body: Value) -> (u16, Value) {
        self.post("/v1/claims", Some(&self.workflow), &body).await
    }

    pub async fn get_run(&self, namespace: &str, key: &str) -> (u16, Value) {
        let req = self
            .client
            .get(format!("{}/v1/runs", self.base))
            .query(&[("namespace", namespace), ("key", key)])
            .bearer_auth(&self.workflow);
        answer(req).await
    }

    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(server) = self.server.take() {
            server.await.unwrap();
        }
        self.store.close().await;
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Claims `crm/<key>` and commits one `send_email` effect directly
/// through a store (key `crm:<key>:send_email`).
pub async fn queue_effect(store: &SharedStore, key: &str, target: &str, url: String) {
    let effect = NewEffect {
        operation: "send_email".into(),
        effect_type: "send_email".into(),
        target: target.into(),
        method: "POST".into(),
        url,
        headers: Default::default(),
        body: Some(b"{}".to_vec()),
        idempotency_key: format!("crm:{key}:send_email"),
        spec: EffectSpec::default(),
        not_before: None,
        role: oncegate::outbox::EffectRole::Act,
        schema_version: None,
    };
    queue_new_effect(store, key, effect).await;
}

/// Claims `crm/<key>` and commits `effect` directly through a store,
/// past the API's checks (as a row edited in the database would be).
pub async fn queue_new_effect(store: &SharedStore, key: &str, effect: NewEffect) {
    let claim = ClaimRequest {
        namespace: Namespace::parse("crm").unwrap(),
        key: IdempotencyKey::parse(key).unwrap(),
        business_key: None,
        payload_hash: PayloadHash::of_bytes(key.as_bytes()),
        lease_ms: 30_000,
        metadata: RunMetadata::default(),
        claimed_by: "test".into(),
    };
    let ClaimOutcome::Claimed { lease, .. } = store.claim(&claim).await.unwrap() else {
        panic!("claim {key}")
    };
    let call = OwnerCall {
        namespace: claim.namespace,
        key: claim.key,
        lease,
        actor: "test".into(),
    };
    store.commit(&call, None, &[effect]).await.unwrap();
}

/// Polls `check` until it returns `Some`, panicking after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Expands one async test body into a SQLite and a PostgreSQL test.
macro_rules! on_both_backends {
    ($($name:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::harness::Backend::Sqlite).await
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::harness::Backend::Postgres).await
                }
            )+
        }
    };
}
pub(crate) use on_both_backends;

/// A dispatcher over an app state's store, targets and kill switch.
pub fn dispatcher_for(s: &oncegate::state::AppState) -> oncegate::outbox::Dispatcher {
    let mut config = s.config.dispatcher.clone();
    config.enabled = true;
    oncegate::outbox::Dispatcher::new(
        s.store.clone(),
        &s.config.targets,
        config,
        s.clock.clone(),
        s.metrics.clone(),
        s.wake.clone(),
        s.kill_switch.clone(),
    )
    .unwrap()
}

/// The `/metrics` text of the server at `base` (asserting a 200).
pub async fn scrape(client: &reqwest::Client, base: &str) -> String {
    let resp = client.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    resp.text().await.unwrap()
}

/// Sends `req`: its status and its JSON body (`null` when it has none).
pub async fn answer(req: reqwest::RequestBuilder) -> (u16, Value) {
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Runs `oncegate <args>` against a served app with `token` (its URL and
/// token from the environment, no config file); success, stdout, stderr.
pub async fn oncegate_cli(base: &str, token: &str, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(args)
        .env("ONCEGATE_URL", base)
        .env("ONCEGATE_TOKEN", token)
        .env_remove("ONCEGATE_CONFIG")
        .output()
        .await
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// Every point in time in an API answer is an RFC 3339 string: each
/// non-null field named `at` or ending in `_at`, at any depth (durations
/// such as `lease_ms` are not times and stay numbers).
pub fn assert_times_rfc3339(answer: &Value) {
    fn walk(value: &Value, path: &str) {
        match value {
            Value::Object(map) => {
                for (name, v) in map {
                    let here = format!("{path}.{name}");
                    if (name == "at" || name.ends_with("_at")) && !v.is_null() {
                        let text = v
                            .as_str()
                            .unwrap_or_else(|| panic!("{here} is {v}, not RFC 3339"));
                        chrono::DateTime::parse_from_rfc3339(text)
                            .unwrap_or_else(|e| panic!("{here} = {text:?}: {e}"));
                    }
                    walk(v, &here);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, &format!("{path}[{i}]"));
                }
            }
            _ => {}
        }
    }
    walk(answer, "$");
}
