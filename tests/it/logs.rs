//! The real binary's logs at `RUST_LOG=trace`, JSON format: spans carry
//! the route, correlation id and run, and no token, signing secret,
//! signature, lease or target credential appears at any level.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

use crate::harness::eventually;
use crate::ingress::stripe_signature;
use crate::process::{command, write_config_with};
use crate::target::MockTarget;

const SIGNING_SECRET: &str = "whsec_logtestsigningsecret93ab";
const TARGET_SECRET: &str = "Bearer target-credential-5c71e0";
const CORRELATION: &str = "corr-logtest-1";

/// The server process, killed if a test fails before stopping it.
pub(crate) struct Running(pub(crate) Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `oncegate --log-format json serve` at trace level, its stderr
/// going to `log`; returns the process and its base URL.
pub(crate) fn start(config: &Path, dir: &Path, log: &Path) -> (Running, String) {
    start_on(config, dir, log, "127.0.0.1:0")
}

/// [`start`] on the address `listen`.
pub(crate) fn start_on(config: &Path, dir: &Path, log: &Path, listen: &str) -> (Running, String) {
    let mut cmd = command(&["--log-format", "json", "serve"]);
    cmd.env("ONCEGATE_CONFIG", config)
        .env("ONCEGATE_LISTEN", listen)
        .env("RUST_LOG", "trace")
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    let child = Running(cmd.spawn().expect("spawn oncegate"));
    let listening = log_line(log, Duration::from_secs(60), |e| {
        e["message"] == "oncegate listening"
    });
    let addr = listening["address"].as_str().unwrap().to_owned();
    (child, format!("http://{addr}"))
}

/// The first JSON line of `log` that `matches`, waiting up to `timeout`
/// for it (the log file is written by another process).
pub(crate) fn log_line(log: &Path, timeout: Duration, matches: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let found = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| matches(e));
        if let Some(event) = found {
            return event;
        }
        assert!(Instant::now() < deadline, "no such log line:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Claims, completes, is refused a wrong token, takes a signed delivery
/// and forwards it with a credential header.
async fn traffic(base: &str, token: &str, target: &MockTarget) -> (String, String) {
    let client = reqwest::Client::new();
    let claim: Value = client
        .post(format!("{base}/v1/claims"))
        .bearer_auth(token)
        .header("x-correlation-id", CORRELATION)
        .json(&json!({ "namespace": "crm", "key": "order-1", "payload": { "n": 1 } }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let lease = claim["lease"].as_str().expect("claimed").to_owned();
    let done = client
        .post(format!("{base}/v1/runs/complete"))
        .bearer_auth(token)
        .json(&json!({ "namespace": "crm", "key": "order-1", "lease": lease }))
        .send()
        .await
        .unwrap();
    assert_eq!(done.status().as_u16(), 200);
    let refused = client
        .post(format!("{base}/v1/claims"))
        .bearer_auth(format!("{token}x"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    let body = crate::ingress::stripe_event("evt_log_1", "charge.succeeded", "ch_1");
    let signature = stripe_signature(SIGNING_SECRET, chrono::Utc::now().timestamp(), &body);
    let delivered = client
        .post(format!("{base}/hooks/stripe"))
        .header("stripe-signature", &signature)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(delivered.status().as_u16(), 200);
    let forwarded = target.wait_for_requests(1, Duration::from_secs(30)).await;
    assert_eq!(forwarded[0].header("authorization"), Some(TARGET_SECRET));
    (lease, signature)
}

fn events(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_logs_carry_spans_and_never_secrets() {
    let target = MockTarget::start().await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("logs.db").display());
    let extra = format!(
        "[[targets]]\nname = \"n8n\"\nbase_url = \"{}/webhook\"\nkind = \"workflow\"\n\
         secret_headers = {{ authorization = \"{TARGET_SECRET}\" }}\n\n\
         [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"{SIGNING_SECRET}\"]\ntarget = \"n8n\"\n",
        target.base_url()
    );
    let (config, token) = write_config_with(dir.path(), &url, &extra);
    let log = dir.path().join("oncegate.log");
    let (mut child, base) = start(&config, dir.path(), &log);
    let (lease, signature) = traffic(&base, &token, &target).await;
    // The forward's run completes once its effect is recorded.
    eventually(
        "the dispatch is logged",
        Duration::from_secs(30),
        || async {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.contains("effect attempt recorded").then_some(())
        },
    )
    .await;
    kill(Pid::from_raw(child.0.id() as i32), Signal::SIGTERM).unwrap();
    assert!(child.0.wait().unwrap().success());

    let text = std::fs::read_to_string(&log).unwrap();
    let hex_signature = signature.split("v1=").nth(1).unwrap();
    for secret in [
        token.as_str(),
        &token[3..],
        lease.as_str(),
        SIGNING_SECRET,
        "logtestsigningsecret93ab",
        signature.as_str(),
        hex_signature,
        TARGET_SECRET,
        "target-credential-5c71e0",
    ] {
        assert!(!text.contains(secret), "the logs hold {secret:?}");
    }
    let events = events(&text);
    assert!(
        events
            .iter()
            .any(|e| e["target"].as_str().is_some_and(|t| t.starts_with("sqlx"))),
        "trace level really was on"
    );
    let claim = events
        .iter()
        .find(|e| e["message"] == "request finished" && e["span"]["route"] == "/v1/claims")
        .expect("the claim's request line");
    let span = &claim["span"];
    assert_eq!(span["method"], "POST");
    assert_eq!(span["correlation_id"], CORRELATION);
    assert_eq!(span["namespace"], "crm");
    assert_eq!(span["key"], "order-1");
    assert_eq!(span["version"], 1);
    assert_eq!(claim["status"], 200);
    let dispatch = events
        .iter()
        .find(|e| e["message"] == "effect attempt recorded")
        .expect("the dispatch line");
    let span = &dispatch["span"];
    assert_eq!(span["name"], "dispatch");
    assert_eq!(span["namespace"], "stripe");
    assert_eq!(span["key"], "evt_log_1");
    assert_eq!(span["target"], "n8n");
    assert!(span["effect_id"].is_string() && span["correlation_id"].is_string());
    // The delivery's request span and its forward's dispatch share the id.
    let delivery = events
        .iter()
        .find(|e| e["message"] == "request finished" && e["span"]["route"] == "/hooks/{source}")
        .expect("the delivery's request line");
    assert_eq!(delivery["span"]["correlation_id"], span["correlation_id"]);
}
