//! Headless Chromium for the console tests, driven over WebDriver
//! (Debian's `chromium` and `chromium-driver`, installed by
//! `scripts/ensure-browser`; the `thirtyfour` client over our reqwest).
//!
//! Each test starts its own chromedriver on a free 127.0.0.1 port (killed
//! when the test ends) and one browser session at 1280×800. Every wait
//! polls with a deadline. [`with_browser`] saves a screenshot to
//! `target/screenshots/<test>-failure.png` when the test body panics.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use thirtyfour::prelude::*;
use thirtyfour::ChromiumLikeCapabilities;

use crate::harness::eventually;

/// How long any one wait may take (the machine is shared and small).
pub const WAIT: Duration = Duration::from_secs(30);

fn binary(env: &str, default: &str) -> String {
    std::env::var(env).unwrap_or_else(|_| default.to_owned())
}

/// A browser session against one app.
pub struct Browser {
    driver: WebDriver,
    base: String,
    _chromedriver: tokio::process::Child,
}

impl Drop for Browser {
    /// Ends chromedriver's whole process group, Chromium included, even
    /// when the test died before `quit`.
    fn drop(&mut self) {
        if let Some(pid) = self._chromedriver.id() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Browser {
    async fn start(base: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver_bin = binary("ONCEGATE_CHROMEDRIVER", "/usr/bin/chromedriver");
        let chromedriver = tokio::process::Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            // Its own process group, so a test that dies before `quit`
            // can still end Chromium with it (see `Drop for Browser`).
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {driver_bin} ({e}); run scripts/ensure-browser")
            });
        let server = format!("http://127.0.0.1:{port}");
        let status = format!("{server}/status");
        eventually("chromedriver to answer", WAIT, || async {
            let ok = reqwest::get(&status).await.ok()?.status().is_success();
            ok.then_some(())
        })
        .await;
        let mut caps = DesiredCapabilities::chrome();
        caps.set_binary(&binary("ONCEGATE_CHROMIUM", "/usr/bin/chromium"))
            .unwrap();
        for arg in [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-dev-shm-usage",
            "--window-size=1280,800",
            "--hide-scrollbars",
        ] {
            caps.add_arg(arg).unwrap();
        }
        let driver = WebDriver::new(&server, caps)
            .await
            .expect("a Chromium session");
        Self {
            driver,
            base: base.to_owned(),
            _chromedriver: chromedriver,
        }
    }

    /// Opens a path of the app.
    pub async fn open(&self, path: &str) {
        self.driver
            .goto(format!("{}{path}", self.base))
            .await
            .unwrap();
    }

    /// The path (and query) the browser shows now.
    pub async fn path(&self) -> String {
        let url = self.driver.current_url().await.unwrap();
        match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        }
    }

    /// The whole URL the browser shows now (another site's too).
    pub async fn driver_url(&self) -> String {
        self.driver.current_url().await.unwrap().to_string()
    }

    /// The visible text of the page.
    pub async fn text(&self) -> String {
        match self.driver.find(By::Tag("body")).await {
            Ok(body) => body.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Waits until the page's text holds `needle`; returns the text.
    pub async fn wait_for(&self, needle: &str) -> String {
        eventually(&format!("the page to show {needle:?}"), WAIT, || async {
            let text = self.text().await;
            text.contains(needle).then_some(text)
        })
        .await
    }

    /// The element `css` selects (waiting for it).
    pub async fn find(&self, css: &str) -> WebElement {
        eventually(&format!("an element {css:?}"), WAIT, || async {
            self.driver.find(By::Css(css)).await.ok()
        })
        .await
    }

    /// Types `value` into the field `css` selects.
    pub async fn fill(&self, css: &str, value: &str) {
        let field = self.find(css).await;
        field.clear().await.unwrap();
        field.send_keys(value).await.unwrap();
    }

    /// Clicks what `css` selects.
    pub async fn click(&self, css: &str) {
        self.find(css).await.click().await.unwrap();
    }

    /// Clicks the link whose text is `text`.
    pub async fn click_link(&self, text: &str) {
        let link = eventually(&format!("a link {text:?}"), WAIT, || async {
            self.driver.find(By::LinkText(text)).await.ok()
        })
        .await;
        link.click().await.unwrap();
    }

    /// Clicks the button whose text contains `text`.
    pub async fn click_button(&self, text: &str) {
        let xpath = format!("//button[contains(normalize-space(.), '{text}')]");
        let button = eventually(&format!("a button {text:?}"), WAIT, || async {
            self.driver.find(By::XPath(xpath.as_str())).await.ok()
        })
        .await;
        button.click().await.unwrap();
    }

    /// Signs in at `/login` with `token`, starting from `path`; waits for
    /// the page `path` led to.
    pub async fn sign_in(&self, path: &str, token: &str) {
        self.open(path).await;
        eventually("the sign-in page", WAIT, || async {
            self.path().await.starts_with("/login").then_some(())
        })
        .await;
        self.fill("#token", token).await;
        self.click_button("Sign in").await;
        eventually("to leave the sign-in page", WAIT, || async {
            (!self.path().await.starts_with("/login")).then_some(())
        })
        .await;
    }

    /// Resizes the window (CSS pixels).
    pub async fn resize(&self, width: u32, height: u32) {
        self.driver
            .set_window_rect(0, 0, width, height)
            .await
            .unwrap();
    }

    /// Saves a PNG of the page.
    pub async fn screenshot(&self, path: &Path) {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        let png = self.driver.screenshot_as_png().await.unwrap();
        std::fs::write(path, png).unwrap();
    }

    async fn quit(&self) {
        let _ = self.driver.clone().quit().await;
    }
}

/// `target/screenshots/`.
pub fn screenshot_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots")
}

/// Runs `body` with a browser on `base`; on a panic saves
/// `target/screenshots/<name>-failure.png`, then panics on.
pub async fn with_browser<F, Fut>(name: &str, base: &str, body: F)
where
    F: FnOnce(Arc<Browser>) -> Fut,
    Fut: Future<Output = ()>,
{
    let browser = Arc::new(Browser::start(base).await);
    let outcome = AssertUnwindSafe(body(browser.clone())).catch_unwind().await;
    if outcome.is_err() {
        let file = screenshot_dir().join(format!("{name}-failure.png"));
        // Best effort: the original panic is what matters.
        if let Ok(png) = browser.driver.screenshot_as_png().await {
            let _ = std::fs::create_dir_all(screenshot_dir());
            if std::fs::write(&file, png).is_ok() {
                eprintln!("screenshot of the failure: {}", file.display());
            }
        }
    }
    browser.quit().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
