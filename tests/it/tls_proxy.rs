//! TLS in front (docs/tls.md): Debian's nginx (`scripts/ensure-nginx`),
//! configured with deploy/nginx/oncegate.conf exactly as the guide shows
//! it, ends TLS with a certificate made for the test and passes plain HTTP
//! to the real binary on loopback. Checked: HTTPS works end to end (sign-in
//! and an approval decided through the proxy), approval links are https
//! under `server.public_base_url`, and the request log names the client
//! nginx saw, from nginx only: a direct request forging `X-Forwarded-For`
//! is logged with its own address. nginx and oncegate are killed on Drop.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oncegate::config::Scope;
use serde_json::{json, Value};

use crate::harness::token;
use crate::logs;
use crate::process::write_config_with;
use crate::target::MockTarget;

/// The server block the guide shows, with `{{…}}` placeholders.
const TEMPLATE: &str = include_str!("../../deploy/nginx/oncegate.conf");
const GUIDE: &str = include_str!("../../docs/tls.md");
const NGINX: &str = "/usr/sbin/nginx";
/// Where the test's client connects from (all of 127/8 is loopback), so
/// the address nginx passes is told apart from nginx's own 127.0.0.1.
const CLIENT: [u8; 4] = [127, 0, 0, 2];
/// A client that reaches oncegate directly, around the proxy.
const DIRECT: [u8; 4] = [127, 0, 0, 3];
const FORGED: &str = "203.0.113.9";

#[test]
fn the_guide_shows_the_config_the_test_runs() {
    assert!(
        GUIDE.contains(TEMPLATE),
        "docs/tls.md must show deploy/nginx/oncegate.conf verbatim"
    );
}

/// nginx in the foreground with its own prefix, killed on Drop.
struct Nginx {
    child: Child,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Nginx {
    /// Serves the template on `127.0.0.1:<port>`, in front of `upstream`.
    fn start(dir: &Path, port: u16, upstream: &str, cert: &Path, key: &Path) -> Self {
        let server = fill(
            TEMPLATE,
            &[
                ("listen", format!("127.0.0.1:{port}")),
                ("server_name", "localhost".into()),
                ("certificate", cert.display().to_string()),
                ("certificate_key", key.display().to_string()),
                ("oncegate", upstream.to_owned()),
            ],
        );
        std::fs::write(dir.join("oncegate.conf"), server).unwrap();
        let d = dir.display();
        // What Debian's /etc/nginx/nginx.conf provides, kept inside `dir`.
        let main = format!(
            "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
             include {d}/oncegate.conf;\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), main).unwrap();
        let error_log = dir.join("error.log");
        let child = Command::new(NGINX)
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-e")
            .arg(&error_log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {NGINX} ({e}); run scripts/ensure-nginx"));
        let mut nginx = Self { child };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            let log = || std::fs::read_to_string(&error_log).unwrap_or_default();
            if let Ok(Some(status)) = nginx.child.try_wait() {
                panic!("nginx exited ({status}): {}", log());
            }
            assert!(Instant::now() < deadline, "nginx did not listen: {}", log());
            std::thread::sleep(Duration::from_millis(50));
        }
        nginx
    }
}

/// The template with every `{{name}}` replaced.
fn fill(template: &str, values: &[(&str, String)]) -> String {
    let mut text = template.to_owned();
    for (name, value) in values {
        text = text.replace(&format!("{{{{{name}}}}}"), value);
    }
    assert!(!text.contains("{{"), "a placeholder is left: {text}");
    text
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (scripts/ensure-nginx installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A test CA and a certificate for `localhost` it signed; returns the
/// certificate, its key and the CA's PEM (the client's only root).
fn certificate(dir: &Path) -> (PathBuf, PathBuf, Vec<u8>) {
    let days = ["-days", "2"];
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-subj",
            "/CN=oncegate test CA",
            days[0],
            days[1],
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "tls.key",
            "-out",
            "tls.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "tls.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "tls.pem",
            "-extfile",
            "san.ext",
            days[0],
            days[1],
        ],
    );
    let ca = std::fs::read(dir.join("ca.pem")).unwrap();
    (dir.join("tls.pem"), dir.join("tls.key"), ca)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A client that trusts only the test CA, finds `localhost` at nginx and
/// connects from `from`.
fn client(ca: &[u8], port: u16, from: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca).unwrap())
        .resolve("localhost", SocketAddr::from(([127, 0, 0, 1], port)))
        .local_address(IpAddr::from(from))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The `client` the request log shows for the request with `correlation`.
fn logged_client(log: &Path, correlation: &str) -> String {
    let line = logs::log_line(log, Duration::from_secs(10), |e| {
        e["message"] == "request finished" && e["span"]["correlation_id"] == correlation
    });
    line["span"]["client"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn config_extra(public: &str, target: &MockTarget, approver_digest: &str) -> String {
    format!(
        r#"
[[tokens]]
subject = "alice"
digest = "{approver_digest}"
scopes = ["approver"]

[server]
public_base_url = "{public}"
trusted_proxies = ["127.0.0.1"]

[[targets]]
name = "mail"
base_url = "{target}"

[[operations]]
name = "send_reply"
customer_visible = true
[operations.approval]
"#,
        target = target.base_url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_through_nginx_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, ca) = certificate(dir.path());
    let port = free_port();
    let public = format!("https://localhost:{port}");
    let target = MockTarget::start().await;
    let (alice, alice_entry) = token("alice", &[Scope::Approver]);
    let db_url = format!("sqlite://{}", dir.path().join("oncegate.db").display());
    let extra = config_extra(&public, &target, &alice_entry.digest);
    let (config, workflow) = write_config_with(dir.path(), &db_url, &extra);
    let log = dir.path().join("oncegate.log");
    let (_server, base) = logs::start(&config, dir.path(), &log);
    let upstream = base.trim_start_matches("http://");
    let _nginx = Nginx::start(dir.path(), port, upstream, &cert, &key);
    let https = client(&ca, port, CLIENT);

    let ready = https.get(format!("{public}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    assert!(ready.text().await.unwrap().contains("\"ready\""));

    // A gated run: its approval link is on the https base.
    let claim: Value = https
        .post(format!("{public}/v1/claims"))
        .bearer_auth(&workflow)
        .json(&json!({"namespace": "support", "key": "t-1", "payload": {"k": 1}, "requested_by": "ursula"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let lease = claim["lease"].as_str().expect("a lease");
    let effects = json!([{"operation": "send_reply", "effect_type": "reply", "target": "mail",
        "path": "/send", "body": {"text": "We refunded you."}}]);
    let gated: Value = https
        .post(format!("{public}/v1/runs/gate"))
        .bearer_auth(&workflow)
        .json(
            &json!({"namespace": "support", "key": "t-1", "lease": lease,
            "effects": effects, "summary": "Refund reply"}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(gated["state"], "awaiting_human", "{gated}");
    let link = gated["approval_url"].as_str().unwrap();
    assert!(link.starts_with(&format!("{public}/approve/")), "{link}");

    // Sign in and decide through the proxy, as a browser would.
    let signed_in = https
        .post(format!("{public}/login"))
        .header("origin", &public)
        .form(&[("token", alice.as_str()), ("next", "/approvals")])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), 303);
    let set = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        set.starts_with("__Host-og_session=") && set.contains("Secure"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap().to_owned();
    let page = https
        .get(link)
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let csrf = crate::approvals::csrf_of(&page.text().await.unwrap());
    let decided = https
        .post(link)
        .header("cookie", &cookie)
        .header("origin", &public)
        .form(&[
            ("decision", "approve"),
            ("csrf", csrf.as_str()),
            ("reason", "checked"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 200);
    crate::harness::eventually(
        "the approved effect is sent",
        Duration::from_secs(20),
        || async { (!target.effects().is_empty()).then_some(()) },
    )
    .await;

    // The client's address: what nginx saw, and only from nginx.
    let through = https
        .get(format!("{public}/healthz"))
        .header("x-correlation-id", "tls-through")
        .header("x-forwarded-for", FORGED)
        .send()
        .await
        .unwrap();
    assert_eq!(through.status(), 200);
    assert_eq!(logged_client(&log, "tls-through"), "127.0.0.2");
    let direct = client(&ca, port, DIRECT)
        .get(format!("{base}/healthz"))
        .header("x-correlation-id", "tls-direct")
        .header("x-forwarded-for", FORGED)
        .header("x-real-ip", FORGED)
        .send()
        .await
        .unwrap();
    assert_eq!(direct.status(), 200);
    assert_eq!(logged_client(&log, "tls-direct"), "127.0.0.3");
}
