//! The raw approval token appears nowhere but in the gate's answer, and a
//! token made at run time nowhere but in its creation's answer: not in a
//! full dump of the database (audit table included), not in the logs at
//! TRACE, not in `/metrics` (both stores, the real binary).

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use oncegate::config::Scope;
use serde_json::{json, Value};

use crate::harness::{answer, eventually, on_both_backends, token, Backend, TestDb};
use crate::logs::start;
use crate::process::write_config_with;
use crate::target::MockTarget;

/// Every byte the database holds, as text: the SQLite files, or `pg_dump`.
pub(crate) async fn dump(db: &TestDb, backend: Backend, dir: &std::path::Path) -> Vec<u8> {
    match backend {
        Backend::Sqlite => {
            let mut all = Vec::new();
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if name.starts_with("secrecy.db") {
                    all.extend(std::fs::read(&path).unwrap());
                }
            }
            all
        }
        Backend::Postgres => {
            let out = std::process::Command::new("pg_dump")
                .arg("--dbname")
                .arg(&db.url)
                .output()
                .expect("pg_dump runs");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        }
    }
}

pub(crate) fn holds(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

async fn approval_token_is_nowhere(backend: Backend) {
    let db = TestDb::new(backend).await;
    let target = MockTarget::start().await;
    let dir = tempfile::tempdir().unwrap();
    let url = match backend {
        Backend::Sqlite => format!("sqlite://{}", dir.path().join("secrecy.db").display()),
        Backend::Postgres => db.url.clone(),
    };
    let (approver, entry) = token("alice", &[Scope::Approver]);
    let (admin, admin_entry) = token("root", &[Scope::Admin]);
    let extra = format!(
        "[[tokens]]\nsubject = \"alice\"\ndigest = \"{}\"\nscopes = [\"approver\"]\n\n\
         [[tokens]]\nsubject = \"root\"\ndigest = \"{}\"\nscopes = [\"admin\"]\n\n\
         [[targets]]\nname = \"mail\"\nbase_url = \"{}\"\n\n\
         [[operations]]\nname = \"send_reply\"\ncustomer_visible = true\n",
        entry.digest,
        admin_entry.digest,
        target.base_url()
    );
    let (config, workflow) = write_config_with(dir.path(), &url, &extra);
    let log = dir.path().join("oncegate.log");
    let (child, base) = start(&config, dir.path(), &log);
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let claim: Value = http
        .post(format!("{base}/v1/claims"))
        .bearer_auth(&workflow)
        .json(&json!({"namespace": "support", "key": "t-1", "payload": {"n": 1}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let gate: Value = http
        .post(format!("{base}/v1/runs/gate"))
        .bearer_auth(&workflow)
        .json(
            &json!({"namespace": "support", "key": "t-1", "lease": claim["lease"],
            "effects": [{"operation": "send_reply", "effect_type": "reply", "target": "mail",
                "path": "/send", "body": {"text": "hi"}}]}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let link = gate["approval_url"].as_str().expect("a link").to_owned();
    let raw = link.rsplit('/').next().unwrap().to_owned();
    assert_eq!(raw.len(), 43);
    let login = http
        .post(format!("{base}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={approver}&next=%2Fapprovals"))
        .send()
        .await
        .unwrap();
    let cookie = login.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let session = cookie.trim_start_matches("og_session=").to_owned();
    let page = http
        .get(&link)
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let at = page.find("name=\"csrf\" value=\"").unwrap() + 19;
    let csrf = page[at..].split('"').next().unwrap();
    let decided = http
        .post(&link)
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("decision=approve&csrf={csrf}"))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 200);
    eventually(
        "the approved effect to be sent",
        Duration::from_secs(30),
        || async { (target.effect_count_for_key("support:t-1:reply") == 1).then_some(()) },
    )
    .await;
    let runtime = runtime_token_made_used_and_revoked(&http, &base, &admin).await;
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("oncegate_gate_decisions_total"),
        "the decision is counted"
    );
    kill(Pid::from_raw(child.0.id() as i32), Signal::SIGTERM).unwrap();
    let mut child = child;
    assert!(child.0.wait().unwrap().success());
    let logs = std::fs::read(&log).unwrap();
    let database = dump(&db, backend, dir.path()).await;
    assert!(
        holds(&database, "sha256:"),
        "the dump is real: it holds the token's digest"
    );
    for (what, secret) in [
        ("approval token", raw.as_str()),
        ("session cookie", session.as_str()),
        ("approver token", approver.as_str()),
        ("workflow token", workflow.as_str()),
        ("admin token", admin.as_str()),
        ("run-time token", runtime.as_str()),
    ] {
        assert!(!holds(&logs, secret), "the TRACE logs hold the {what}");
        assert!(!metrics.contains(secret), "/metrics holds the {what}");
        assert!(
            !holds(&database, secret),
            "the database dump holds the {what}"
        );
    }
}

/// Makes a token through the API, uses it, revokes it; returns it.
async fn runtime_token_made_used_and_revoked(
    http: &reqwest::Client,
    base: &str,
    admin: &str,
) -> String {
    let body = json!({"subject": "made-at-run-time", "scopes": ["operator"]});
    let made = http.post(format!("{base}/v1/admin/tokens")).json(&body);
    let (status, made) = answer(made.bearer_auth(admin)).await;
    assert_eq!(status, 201, "{made}");
    let secret = made["token"].as_str().expect("a token").to_owned();
    let inbox = || {
        http.get(format!("{base}/v1/approvals"))
            .bearer_auth(&secret)
    };
    assert_eq!(answer(inbox()).await.0, 200, "the token works");
    let revoke = http.post(format!(
        "{base}/v1/admin/tokens/{}/revoke",
        made["id"].as_str().unwrap()
    ));
    assert_eq!(answer(revoke.bearer_auth(admin)).await.0, 200);
    assert_eq!(answer(inbox()).await.0, 401, "the revoked token is refused");
    secret
}

on_both_backends!(approval_token_is_nowhere);
