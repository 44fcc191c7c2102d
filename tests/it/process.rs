//! The real `oncegate` binary: several processes on one PostgreSQL,
//! `kill -9` durability, the first-start token, and the CLI commands.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use futures_util::future::join_all;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use oncegate::config::Scope;
use serde_json::{json, Value};

use crate::harness::{on_both_backends, token, Backend, TestDb};

const BIN: &str = env!("CARGO_BIN_EXE_oncegate");

/// A running `oncegate serve` process.
pub(crate) struct Server {
    child: Child,
    pub(crate) base: String,
    /// Everything printed to stdout so far, resent after every line.
    stdout: mpsc::Receiver<String>,
}

pub(crate) fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    for (var, _) in oncegate::config::ENV_VARS {
        cmd.env_remove(var);
    }
    cmd.env_remove("ONCEGATE_CONFIG").env_remove("RUST_LOG");
    cmd
}

impl Server {
    /// Starts `oncegate serve` and waits for its "listening" log line.
    pub(crate) fn start(config: &Path, cwd: &Path, extra_env: &[(&str, &str)]) -> Self {
        let mut cmd = command(&["--log-format", "json", "serve"]);
        cmd.env("ONCEGATE_CONFIG", config)
            .env("ONCEGATE_LISTEN", "127.0.0.1:0")
            .current_dir(cwd)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn oncegate");
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stdout = child.stdout.take().unwrap();
        let (out_tx, out_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut text = String::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                text.push_str(&line);
                text.push('\n');
                let _ = out_tx.send(text.clone());
            }
        });
        let mut seen = Vec::new();
        let addr = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("oncegate did not start; stderr: {seen:#?}"));
            if let Ok(event) = serde_json::from_str::<Value>(&line) {
                if event["message"] == "oncegate listening" {
                    break event["address"].as_str().unwrap().to_owned();
                }
            }
            seen.push(line);
        };
        Self {
            child,
            base: format!("http://{addr}"),
            stdout: out_rx,
        }
    }

    /// Waits until stdout holds `pattern`; returns all of stdout.
    fn stdout_with(&self, pattern: &str) -> String {
        let mut text = String::new();
        while !text.contains(pattern) {
            text = self
                .stdout
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("stdout never showed {pattern:?}: {text}"));
        }
        text
    }

    /// The first-start admin token: stdout is a pipe here, so the server
    /// names the 0600 file beside its database instead of printing it.
    fn bootstrap_token(&self, dir: &Path) -> String {
        let path = dir.join("oncegate-admin-token");
        let stdout = self.stdout_with("oncegate-admin-token");
        assert!(
            stdout.contains(&path.display().to_string()),
            "the path is printed: {stdout}"
        );
        assert!(
            !stdout.contains("og_"),
            "a pipe never gets the token: {stdout}"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "owner only");
        }
        let token = std::fs::read_to_string(&path).unwrap().trim().to_owned();
        assert!(token.starts_with("og_"), "{token}");
        token
    }

    fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }

    /// Sends SIGTERM and returns the exit status.
    pub(crate) fn stop(self) -> std::process::ExitStatus {
        self.stop_with_stdout().0
    }

    /// Sends SIGTERM; returns the exit status and all of stdout.
    fn stop_with_stdout(mut self) -> (std::process::ExitStatus, String) {
        self.signal(Signal::SIGTERM);
        let status = self.child.wait().unwrap();
        // The reader thread ends when the pipe closes.
        let stdout = self.stdout.iter().last().unwrap_or_default();
        (status, stdout)
    }

    /// kill -9: no chance to flush or shut down.
    pub(crate) fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes a config file naming the database and one workflow token.
fn write_config(dir: &Path, db_url: &str) -> (std::path::PathBuf, String) {
    write_config_with(dir, db_url, "")
}

/// The same, with more TOML appended.
pub(crate) fn write_config_with(
    dir: &Path,
    db_url: &str,
    extra: &str,
) -> (std::path::PathBuf, String) {
    let (secret, entry) = token("n8n", &[Scope::Workflow]);
    let text = format!(
        "[database]\nurl = \"{db_url}\"\nmax_connections = 4\n\n[[tokens]]\nsubject = \"{}\"\ndigest = \"{}\"\nscopes = [\"workflow\"]\n",
        entry.subject, entry.digest
    );
    let path = dir.join("oncegate.toml");
    std::fs::write(&path, format!("{text}\n{extra}")).unwrap();
    (path, secret)
}

async fn claim(client: &reqwest::Client, base: &str, token: &str, key: &str) -> Value {
    let resp = client
        .post(format!("{base}/v1/claims"))
        .bearer_auth(token)
        .json(&json!({ "namespace": "stripe", "key": key, "payload": { "key": key } }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    resp.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_one_postgres_have_one_winner() {
    let db = TestDb::new(Backend::Postgres).await;
    let dir = tempfile::tempdir().unwrap();
    let (config, secret) = write_config(dir.path(), &db.url);
    let a = Server::start(&config, dir.path(), &[]);
    let b = Server::start(&config, dir.path(), &[]);
    let client = reqwest::Client::new();
    let answers = join_all((0..100).map(|i| {
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        claim(&client, base, &secret, "evt_shared")
    }))
    .await;
    let winners = answers
        .iter()
        .filter(|a| a["claimed"] == json!(true))
        .count();
    assert_eq!(winners, 1, "{answers:#?}");
    assert!(answers.iter().all(|a| a["claimed"].is_boolean()));
    assert!(a.stop().success());
    assert!(b.stop().success());
}

async fn acknowledged_claims_survive_kill_9(backend: Backend) {
    let db = TestDb::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let (config, secret) = write_config(dir.path(), &db.url);
    let server = Server::start(&config, dir.path(), &[]);
    let client = reqwest::Client::new();
    let keys: Vec<String> = (0..50).map(|i| format!("evt_{i}")).collect();
    let answers = join_all(
        keys.iter()
            .map(|k| claim(&client, &server.base, &secret, k)),
    )
    .await;
    assert!(answers.iter().all(|a| a["claimed"] == json!(true)));
    server.kill9();

    let server = Server::start(&config, dir.path(), &[]);
    for key in &keys {
        let resp = client
            .get(format!("{}/v1/runs", server.base))
            .query(&[("namespace", "stripe"), ("key", key.as_str())])
            .bearer_auth(&secret)
            .send()
            .await
            .unwrap();
        assert_eq!(
            resp.status().as_u16(),
            200,
            "acknowledged claim {key} was lost"
        );
        let run: Value = resp.json().await.unwrap();
        assert_eq!(run["state"], "processing");
        assert_eq!(run["version"], 1);
    }
    // And the restarted server still refuses a second owner.
    let again = claim(&client, &server.base, &secret, "evt_0").await;
    assert_eq!(again["claimed"], false);
    assert!(server.stop().success());
}

on_both_backends!(
    acknowledged_claims_survive_kill_9,
    accepted_webhooks_survive_kill_9_with_their_forward_pending,
    claims_acknowledged_under_concurrent_load_survive_kill_9,
);

/// Group commit: many claims share one commit, and each is answered only
/// once its batch is durable. Claims are acknowledged by 32 concurrent
/// clients while the process is killed mid-flight; after a restart every
/// acknowledged claim is there.
async fn claims_acknowledged_under_concurrent_load_survive_kill_9(backend: Backend) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let db = TestDb::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let (config, secret) = write_config(dir.path(), &db.url);
    let server = Server::start(&config, dir.path(), &[]);
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..32)
        .map(|c| {
            let (base, secret) = (server.base.clone(), secret.clone());
            let (acked, stop) = (acked.clone(), stop.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let key = format!("load_{c}_{i}");
                    let sent = client
                        .post(format!("{base}/v1/claims"))
                        .bearer_auth(&secret)
                        .json(&json!({ "namespace": "stripe", "key": key, "payload": { "key": key } }))
                        .send()
                        .await;
                    // The process is gone: this claim was never acknowledged.
                    let Ok(resp) = sent else { break };
                    let Ok(answer) = resp.json::<Value>().await else { break };
                    assert_eq!(answer["claimed"], true, "{answer}");
                    acked.lock().unwrap().push(key);
                }
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while acked.lock().unwrap().len() < 400 {
        assert!(std::time::Instant::now() < deadline, "claims too slow");
        tokio::task::yield_now().await;
    }
    server.kill9();
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let listed = acked
        .iter()
        .map(|k| format!("'{k}'"))
        .collect::<Vec<_>>()
        .join(",");
    let stored = db
        .count(&format!(
            "SELECT COUNT(*) FROM runs WHERE namespace = 'stripe' AND run_key IN ({listed})"
        ))
        .await;
    assert_eq!(stored, acked.len() as i64, "acknowledged claims were lost");
    let server = Server::start(&config, dir.path(), &[]);
    let again = claim(&reqwest::Client::new(), &server.base, &secret, &acked[0]).await;
    assert_eq!(again["claimed"], false);
    assert!(server.stop().success());
}

async fn accepted_webhooks_survive_kill_9_with_their_forward_pending(backend: Backend) {
    use crate::ingress::{stripe_event, stripe_signature, SECRET};
    use crate::target::MockTarget;
    let workflow = MockTarget::start().await;
    let db = TestDb::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        "[[targets]]\nname = \"n8n\"\nbase_url = \"{}/webhook\"\nkind = \"workflow\"\n\n\
         [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"{SECRET}\"]\ntarget = \"n8n\"\n",
        workflow.base_url()
    );
    let (config, _) = write_config_with(dir.path(), &db.url, &extra);
    // The workflow side is down for the first process: nothing is forwarded.
    let server = Server::start(
        &config,
        dir.path(),
        &[("ONCEGATE_DISPATCHER_ENABLED", "false")],
    );
    let client = reqwest::Client::new();
    let t = chrono::Utc::now().timestamp();
    let sends = (0..20).map(|i| {
        let body = stripe_event(&format!("evt_{i}"), "charge.succeeded", "ch_1");
        let sig = stripe_signature(SECRET, t, &body);
        client
            .post(format!("{}/hooks/stripe", server.base))
            .header("stripe-signature", sig)
            .body(body)
            .send()
    });
    for resp in join_all(sends).await {
        assert_eq!(resp.unwrap().status().as_u16(), 200);
    }
    server.kill9();
    assert_eq!(
        db.count("SELECT COUNT(*) FROM effects WHERE state = 'pending'")
            .await,
        20
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM raw_events").await, 20);
    assert!(workflow.requests().is_empty());

    // Restarted with its dispatcher: every accepted event is delivered once.
    let server = Server::start(&config, dir.path(), &[]);
    workflow
        .wait_for_requests(20, Duration::from_secs(30))
        .await;
    crate::harness::eventually(
        "every ingress run completed",
        Duration::from_secs(30),
        || async {
            (db.count("SELECT COUNT(*) FROM runs WHERE state = 'completed'")
                .await
                == 20)
                .then_some(())
        },
    )
    .await;
    for i in 0..20 {
        assert_eq!(
            workflow.effect_count_for_key(&format!("stripe:evt_{i}:forward")),
            1
        );
    }
    assert_eq!(workflow.requests().len(), 20, "no resend");
    assert!(server.stop().success());
}

#[tokio::test]
async fn first_start_creates_one_admin_token_and_shows_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("empty.toml");
    std::fs::write(&config, "").unwrap();
    let server = Server::start(&config, dir.path(), &[]);
    assert!(
        dir.path().join("oncegate.db").exists(),
        "SQLite is the default"
    );
    let token = server.bootstrap_token(dir.path());
    let client = reqwest::Client::new();
    let answer = claim(&client, &server.base, &token, "evt_1").await;
    assert_eq!(answer["claimed"], true);
    assert!(server.stop().success(), "SIGTERM is a clean shutdown");

    let db = std::fs::read(dir.path().join("oncegate.db")).unwrap();
    assert!(
        !db.windows(token.len()).any(|w| w == token.as_bytes()),
        "only the digest is stored"
    );

    let server = Server::start(&config, dir.path(), &[]);
    let answer = claim(&client, &server.base, &token, "evt_1").await;
    assert_eq!(
        answer["claimed"], false,
        "the stored token still works after restart"
    );
    let (status, stdout) = server.stop_with_stdout();
    assert!(status.success());
    assert!(
        !stdout.contains("og_") && !stdout.contains("created one admin token"),
        "the token is made and shown only once: {stdout}"
    );

    // Tokens configured: the first-start token is deleted, and emptying
    // `[[tokens]]` again makes a new one instead of reviving it.
    let status_of = |base: String, token: String| {
        let client = client.clone();
        async move {
            let body = json!({ "namespace": "stripe", "key": "evt_2", "payload": {} });
            let req = client.post(format!("{base}/v1/claims")).bearer_auth(token);
            crate::harness::answer(req.json(&body)).await.0
        }
    };
    let (_, entry) = crate::harness::token("n8n", &[Scope::Workflow]);
    let configured = dir.path().join("configured.toml");
    let tokens = format!(
        "[[tokens]]\nsubject = \"n8n\"\ndigest = \"{}\"\nscopes = [\"workflow\"]\n",
        entry.digest
    );
    std::fs::write(&configured, tokens).unwrap();
    let server = Server::start(&configured, dir.path(), &[]);
    assert_eq!(status_of(server.base.clone(), token.clone()).await, 401);
    assert!(server.stop().success());
    let server = Server::start(&config, dir.path(), &[]);
    let fresh = server.bootstrap_token(dir.path());
    assert_ne!(fresh, token, "a new first-start token");
    assert_eq!(
        status_of(server.base.clone(), token.clone()).await,
        401,
        "the old one stays dead"
    );
    assert_eq!(status_of(server.base.clone(), fresh).await, 200);
    assert!(server.stop().success());
}

#[test]
fn token_new_output_is_accepted_by_config_check() {
    let out = command(&[
        "token",
        "new",
        "--subject",
        "n8n-prod",
        "--scope",
        "workflow",
        "--role",
        "ops",
    ])
    .output()
    .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let token = text
        .lines()
        .find(|l| l.starts_with("og_"))
        .expect("token line");
    let snippet = &text[text.find("[[tokens]]").expect("config entry")..];
    assert!(!snippet.contains(token), "the config holds only the digest");
    assert!(snippet.contains(&oncegate::tokens::digest(token)));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("oncegate.toml");
    std::fs::write(&path, snippet).unwrap();
    let check = command(&["config", "check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(String::from_utf8_lossy(&check.stdout).contains("1 token(s)"));
}

#[test]
fn config_check_names_the_bad_field_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[server]\nlisten = \"not-an-address\"\n").unwrap();
    let out = command(&["config", "check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("server.listen"), "{stderr}");

    let out = command(&["config", "check"])
        .env("ONCEGATE_DATABASE_URL", "mysql://nope")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("database.url"));
}

#[tokio::test]
async fn migrate_and_runs_get_work_offline() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("cli.db").display());
    let (config, secret) = write_config(dir.path(), &url);
    let out = command(&["migrate", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let server = Server::start(&config, dir.path(), &[]);
    claim(&reqwest::Client::new(), &server.base, &secret, "a/b?c#d").await;
    assert!(server.stop().success());

    let out = command(&[
        "runs",
        "get",
        "stripe",
        "a/b?c#d",
        "--json",
        "--config",
        config.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["key"], "a/b?c#d");
    assert_eq!(run["state"], "processing");

    let out = command(&[
        "runs",
        "get",
        "stripe",
        "missing",
        "--config",
        config.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no run"));
}
