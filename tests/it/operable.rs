//! Running oncegate on a real host: the operator commands over the API
//! from a shell that has none of the service's secrets, start-up checks
//! (`config check --connect`, one `serve` per SQLite file), plain logs in
//! a file, and the start page.

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use oncegate::config::Scope;
use serde_json::Value;

use crate::harness::{pg_admin_url, token, Backend, TestApp, TestDb};
use crate::logs::Running;
use crate::process::{command, write_config_with, Server};

/// Runs `cmd` to its end, killing it after `secs` (a command that should
/// have refused to start must not hang the suite).
fn output_within(mut cmd: Command, secs: u64) -> Output {
    let mut child = Running(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
            child
                .0
                .stdout
                .take()
                .unwrap()
                .read_to_end(&mut stdout)
                .unwrap();
            child
                .0
                .stderr
                .take()
                .unwrap()
                .read_to_end(&mut stderr)
                .unwrap();
            return Output {
                status,
                stdout,
                stderr,
            };
        }
        assert!(
            Instant::now() < deadline,
            "{cmd:?} still runs after {secs} s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The service's config: a target whose credential comes from `CRM_SECRET`,
/// which only the server's environment holds, and an admin token.
fn config_with_secret(dir: &std::path::Path, url: &str) -> (std::path::PathBuf, String) {
    let (admin, entry) = token("oncall", &[Scope::Admin]);
    let extra = format!(
        "[[targets]]\nname = \"crm\"\nbase_url = \"http://127.0.0.1:9/\"\n\
         secret_headers = {{ authorization = \"env:CRM_SECRET\" }}\n\n\
         [[tokens]]\nsubject = \"oncall\"\ndigest = \"{}\"\nscopes = [\"admin\"]\n",
        entry.digest
    );
    let (path, _) = write_config_with(dir, url, &extra);
    (path, admin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_disable_over_the_api_needs_no_secret_and_no_config() {
    let db = TestDb::new(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let (config, admin) = config_with_secret(dir.path(), &db.url);
    let server = Server::start(&config, dir.path(), &[("CRM_SECRET", "Bearer s3cr3t")]);
    // A laptop: no config file, no CRM_SECRET, only the URL and a token.
    let laptop = tempfile::tempdir().unwrap();
    let mut cmd = command(&[
        "actions",
        "disable",
        "--target",
        "crm",
        "--url",
        &server.base,
    ]);
    cmd.env("ONCEGATE_TOKEN", &admin).current_dir(laptop.path());
    let out = output_within(cmd, 30);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("actions disabled for crm"), "{shown}");
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("crm") && l.contains("DISABLED") && l.contains("oncall")),
        "{shown}"
    );
    assert!(!shown.contains("null"), "{shown}");

    let mut cmd = command(&[
        "actions",
        "status",
        "--json",
        "--url",
        &server.base,
        "--token",
        &admin,
    ]);
    cmd.current_dir(laptop.path());
    let out = output_within(cmd, 30);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let switches: Value = serde_json::from_slice(&out.stdout).unwrap();
    let crm = switches
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scope"] == "crm")
        .unwrap();
    assert_eq!(crm["enabled"], false);
    assert_eq!(
        crm["changed_by"], "oncall",
        "audited under the token's subject"
    );
    assert!(
        chrono::DateTime::parse_from_rfc3339(crm["changed_at"].as_str().unwrap()).is_ok(),
        "{crm}"
    );

    // A wrong token: the server's 401 in words, and a failure exit.
    let mut cmd = command(&[
        "actions",
        "enable",
        "--url",
        &server.base,
        "--token",
        "og_wrong",
    ]);
    cmd.current_dir(laptop.path());
    let out = output_within(cmd, 30);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("401"), "{}", text(&out.stderr));

    // audit status over the API.
    let mut cmd = command(&["audit", "status", "--json", "--url", &server.base]);
    cmd.env("ONCEGATE_TOKEN", &admin).current_dir(laptop.path());
    let out = output_within(cmd, 30);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        status.get("checkpoint").is_some() && status.get("verification").is_some(),
        "{status}"
    );
    assert!(server.stop().success());

    // The direct-database forms need the database settings only.
    let out = output_within(
        command(&["migrate", "--config", config.to_str().unwrap()]),
        60,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut cmd = command(&["actions", "enable", "--config", config.to_str().unwrap()]);
    cmd.current_dir(dir.path());
    let out = output_within(cmd, 60);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The service itself still insists on its secret.
    let out = output_within(
        command(&["config", "check", "--config", config.to_str().unwrap()]),
        30,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("CRM_SECRET"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_on_one_sqlite_file_is_refused() {
    let db = TestDb::new(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = write_config_with(dir.path(), &db.url, "");
    let first = Server::start(&config, dir.path(), &[]);
    let mut second = command(&["serve"]);
    second
        .env("ONCEGATE_CONFIG", &config)
        .env("ONCEGATE_LISTEN", "127.0.0.1:0")
        .current_dir(dir.path());
    let out = output_within(second, 30);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("another oncegate serve"), "{stderr}");
    assert!(stderr.contains("(pid "), "{stderr}");
    assert!(first.stop().success());
    // Released on exit: the next start works.
    let again = Server::start(&config, dir.path(), &[]);
    assert!(again.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_connect_names_why_the_database_cannot_be_used() {
    let check = |url: String| {
        let mut cmd = command(&["config", "check", "--connect"]);
        cmd.env("ONCEGATE_DATABASE_URL", url);
        output_within(cmd, 30)
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let refused = format!("postgres://postgres@127.0.0.1:{port}/x");
    let out = check(refused.clone());
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("connection refused"),
        "{}",
        text(&out.stderr)
    );
    // serve names the cause too, not only the pool's time-out.
    let mut serve = command(&["serve"]);
    serve
        .env("ONCEGATE_DATABASE_URL", refused)
        .env("ONCEGATE_LISTEN", "127.0.0.1:0");
    let out = output_within(serve, 60);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("connection refused"),
        "{}",
        text(&out.stderr)
    );

    let base = pg_admin_url();
    let base = base.rsplit_once('/').unwrap().0;
    let out = check(format!(
        "{base}/og_missing_{}",
        uuid::Uuid::new_v4().simple()
    ));
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("does not exist"),
        "{}",
        text(&out.stderr)
    );

    let db = TestDb::new(Backend::Postgres).await;
    let out = check(db.url.clone());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("takes writes"),
        "{}",
        text(&out.stdout)
    );
    let name = db.url.rsplit_once('/').unwrap().1.to_owned();
    db.exec(&format!(
        "ALTER DATABASE {name} SET default_transaction_read_only = on"
    ))
    .await;
    let out = check(db.url.clone());
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("read-only"),
        "{}",
        text(&out.stderr)
    );

    let sqlite = TestDb::new(Backend::Sqlite).await;
    let out = check(sqlite.url.clone());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("database ok"),
        "{}",
        text(&out.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn human_logs_in_a_file_carry_no_colour_codes() {
    let db = TestDb::new(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = write_config_with(dir.path(), &db.url, "");
    let log = dir.path().join("human.log");
    let mut cmd = command(&["--log-format", "human", "serve"]);
    cmd.env("ONCEGATE_CONFIG", &config)
        .env("ONCEGATE_LISTEN", "127.0.0.1:0")
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let child = Running(cmd.spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("oncegate listening") {
            break text;
        }
        assert!(Instant::now() < deadline, "no listening line: {text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(child);
    assert!(text.contains(" INFO "), "{text}");
    assert!(!text.contains('\u{1b}'), "ANSI codes in a file: {text:?}");
}

#[tokio::test]
async fn the_start_page_links_the_console_the_document_and_health() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let resp = app
        .client
        .get(format!("{}/", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let page = resp.text().await.unwrap();
    for link in [
        "href=\"/ui\"",
        "href=\"/openapi.json\"",
        "href=\"/healthz\"",
        "href=\"/readyz\"",
    ] {
        assert!(page.contains(link), "{link} missing: {page}");
    }
    app.stop().await;
}
