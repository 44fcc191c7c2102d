//! OpenID providers for the OIDC tests, started by the tests on
//! 127.0.0.1:0 and killed on drop whatever the outcome: the real
//! `oidc-provider` (tests/fixtures/oidc/provider.mjs) and a deliberately
//! misbehaving one (crafted.mjs). Both need `scripts/ensure-oidc-provider`.
//! And [`Flow`]: a browser's part of the sign-in over plain HTTP (cookies
//! per origin, redirects followed by hand, none across to another site
//! without being seen).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use oncegate::approval::oidc::OidcConfig;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The client secret both providers know the `oncegate` client by.
pub const CLIENT_SECRET: &str = "oncegate-test-client-secret";

fn install_dir() -> String {
    std::env::var("ONCEGATE_OIDC_PROVIDER_DIR").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
        format!("{home}/.cache/oncegate/oidc-provider")
    })
}

fn fixture(script: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/oidc/{script}"))
}

/// A provider process; killed when dropped.
pub struct Provider {
    child: tokio::process::Child,
    pub issuer: String,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

impl Provider {
    /// The real `oidc-provider` with its test client and users.
    pub async fn real() -> Self {
        Self::start("provider.mjs", &[]).await
    }

    /// The real provider, appending each token response it issues to
    /// `log` (one JSON line each).
    pub async fn real_logging_tokens(log: &std::path::Path) -> Self {
        Self::start("provider.mjs", &[("OIDC_TOKEN_LOG", log.to_str().unwrap())]).await
    }

    /// The misbehaving provider in `mode` (see crafted.mjs).
    pub async fn crafted(mode: &str) -> Self {
        Self::start("crafted.mjs", &[("MODE", mode)]).await
    }

    async fn start(script: &str, env: &[(&str, &str)]) -> Self {
        let dir = install_dir();
        let mut cmd = tokio::process::Command::new("node");
        cmd.arg(fixture(script))
            .env("ONCEGATE_OIDC_PROVIDER_DIR", &dir)
            .current_dir(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot start node ({e}); run scripts/ensure-oidc-provider")
        });
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await;
        let Ok(Ok(Some(line))) = first else {
            let _ = child.start_kill();
            panic!("{script} did not start; run scripts/ensure-oidc-provider");
        };
        // Keep reading: a provider writing to a closed pipe dies (EPIPE).
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let issuer = serde_json::from_str::<serde_json::Value>(&line).unwrap()["issuer"]
            .as_str()
            .unwrap()
            .to_owned();
        Self { child, issuer }
    }

    /// `[approvals.oidc]` for this provider.
    pub fn config(&self) -> OidcConfig {
        config_for(&self.issuer)
    }
}

/// `[approvals.oidc]` for a provider at `issuer`.
pub fn config_for(issuer: &str) -> OidcConfig {
    toml::from_str(&format!(
        "issuer = \"{issuer}\"\nclient_id = \"oncegate\"\nclient_secret = \"{CLIENT_SECRET}\"\n\
         display_name = \"Test IdP\"\nscopes = [\"openid\", \"profile\", \"roles\"]\n\
         roles_claim = \"roles\"\n"
    ))
    .unwrap()
}

/// One answer along the way: status, `Location`, body.
#[derive(Debug, Clone)]
pub struct Hop {
    pub url: String,
    pub status: u16,
    pub location: Option<String>,
    pub body: String,
}

/// A browser's part of a sign-in, over plain HTTP.
pub struct Flow {
    http: reqwest::Client,
    /// Cookies by origin (`http://127.0.0.1:<port>`), then by name.
    pub jar: HashMap<String, HashMap<String, String>>,
    pub app: String,
}

fn origin(url: &str) -> String {
    url::Url::parse(url).unwrap().origin().ascii_serialization()
}

impl Flow {
    pub fn new(app: &str) -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        Self {
            http,
            jar: HashMap::new(),
            app: app.to_owned(),
        }
    }

    /// The app's cookie `name`, if set.
    pub fn app_cookie(&self, name: &str) -> Option<String> {
        self.jar.get(&origin(&self.app))?.get(name).cloned()
    }

    /// `GET url` with this origin's cookies; keeps what it sets.
    pub async fn get(&mut self, url: &str) -> Hop {
        let at = origin(url);
        let cookies = self.jar.get(&at).map(|c| {
            c.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("; ")
        });
        let mut req = self.http.get(url);
        if let Some(c) = cookies.filter(|c| !c.is_empty()) {
            req = req.header("cookie", c);
        }
        let resp = req.send().await.unwrap();
        self.keep(&at, &resp);
        let status = resp.status().as_u16();
        let location = resp.headers().get("location").map(|l| {
            url::Url::parse(url)
                .unwrap()
                .join(l.to_str().unwrap())
                .unwrap()
                .to_string()
        });
        let body = resp.text().await.unwrap_or_default();
        Hop {
            url: url.to_owned(),
            status,
            location,
            body,
        }
    }

    fn keep(&mut self, at: &str, resp: &reqwest::Response) {
        let jar = self.jar.entry(at.to_owned()).or_default();
        for set in resp.headers().get_all("set-cookie") {
            let text = set.to_str().unwrap();
            let (pair, attributes) = text.split_once(';').unwrap_or((text, ""));
            let (name, value) = pair.split_once('=').unwrap();
            if value.is_empty()
                || attributes.contains("Max-Age=0")
                || attributes.contains("expires=Thu, 01 Jan 1970")
            {
                jar.remove(name.trim());
            } else {
                jar.insert(name.trim().to_owned(), value.to_owned());
            }
        }
    }

    /// Starts a sign-in at the app: the provider's authorization URL
    /// (with `login_hint` added, so the provider signs that user in
    /// without its form).
    pub async fn start(&mut self, login_hint: &str) -> Hop {
        let app = self.app.clone();
        let hop = self
            .get(&format!("{app}/auth/oidc/start?next=%2Fapprovals"))
            .await;
        if let Some(location) = &hop.location {
            let mut url = url::Url::parse(location).unwrap();
            url.query_pairs_mut().append_pair("login_hint", login_hint);
            return Hop {
                location: Some(url.to_string()),
                ..hop
            };
        }
        hop
    }

    /// Follows redirects from `url` at the provider until one leads back
    /// to the app: that callback URL (not yet visited).
    pub async fn follow_to_callback(&mut self, url: &str) -> String {
        let mut next = url.to_owned();
        for _ in 0..12 {
            if next.starts_with(&self.app) {
                return next;
            }
            let hop = self.get(&next).await;
            next = hop.location.unwrap_or_else(|| {
                panic!(
                    "the provider stopped at {}: {} {}",
                    hop.url, hop.status, hop.body
                )
            });
        }
        panic!("too many redirects");
    }

    /// A whole sign-in as `user`: the callback's answer and its URL.
    pub async fn sign_in(&mut self, user: &str) -> (Hop, String) {
        let start = self.start(user).await;
        assert_eq!(start.status, 303, "the sign-in starts: {}", start.body);
        let callback = self
            .follow_to_callback(start.location.as_deref().unwrap())
            .await;
        (self.get(&callback).await, callback)
    }
}
