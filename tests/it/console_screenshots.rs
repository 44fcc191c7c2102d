//! Screenshots of every console page for the README, taken in headless
//! Chromium against a real server with data on every page.

use crate::browser::with_browser;
use crate::console::Console;
use crate::harness::Backend;

/// Every page, with data on it, saved as a PNG under
/// `target/screenshots/docs/` (and, with `ONCEGATE_UPDATE_SCREENSHOTS=1`,
/// under `docs/screenshots/`, the README's pictures). Each page must render
/// its heading; nothing here may need a change of state by the browser
/// beyond the forms a person would use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_screenshots_of_every_page() {
    let owned = Console::start(Backend::Sqlite).await;
    let c = &owned;
    for key in ["order-1001", "order-1002"] {
        c.email(key, "/ok").await;
    }
    for key in ["order-1003", "order-1004"] {
        c.email(key, "/bad").await;
    }
    c.gated_reply(
        "ticket-4711",
        "We are sorry: your refund of 42 EUR is on its way.",
    )
    .await;
    let link = c
        .gated_reply("ticket-4712", "Your replacement ships tomorrow.")
        .await;
    let olga = crate::approvals::Browser::login(&c.app, &c.olga).await;
    let path = link.strip_prefix(&c.app.base).unwrap();
    let (_, page) = olga.get(path).await;
    let (status, _) = olga
        .decide(path, "approve", &crate::approvals::csrf_of(&page))
        .await;
    assert_eq!(status, 200);
    for (ns, key, state) in [
        ("crm", "order-1001", "completed"),
        ("crm", "order-1003", "dead_lettered"),
        ("crm", "order-1004", "dead_lettered"),
        ("support", "ticket-4712", "completed"),
    ] {
        c.dispatch_until(ns, key, state).await;
    }
    let (_, dup) = c
        .app
        .claim(serde_json::json!({"namespace": "crm", "key": "order-1001", "payload": {"k": "order-1001"}}))
        .await;
    assert_eq!(dup["claimed"], false, "a duplicate delivery");
    c.app
        .store
        .set_actions("mail", false, "root")
        .await
        .unwrap();
    c.app.state.kill_switch.refresh().await;
    c.email("order-1005", "/ok").await;
    let dead = [
        c.dead_letter_id("order-1003").await,
        c.dead_letter_id("order-1004").await,
    ];
    let challenge = c
        .app
        .db
        .text("SELECT id FROM challenges WHERE run_key = 'ticket-4711'")
        .await;
    let out = crate::browser::screenshot_dir().join("docs");
    let docs = std::env::var("ONCEGATE_UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1");
    with_browser("screenshots", &c.app.base, |b| async move {
        let shoot = |name: &'static str| {
            let b = b.clone();
            let out = out.clone();
            async move {
                let file = out.join(format!("{name}.png"));
                b.screenshot(&file).await;
                if docs {
                    let to = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("docs/screenshots")
                        .join(format!("{name}.png"));
                    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                    std::fs::copy(&file, to).unwrap();
                }
            }
        };
        b.open("/login?next=/ui").await;
        b.wait_for("Sign in to oncegate").await;
        shoot("login").await;
        b.sign_in("/ui", &c.root).await;
        let pages: [(&str, String, &str); 9] = [
            ("dashboard", "/ui".into(), "Gate wait p95"),
            ("runs", "/ui/runs?key=order".into(), "run(s) on this page"),
            (
                "run",
                "/ui/run?namespace=support&key=ticket-4712".into(),
                "Which model drafted?",
            ),
            (
                "approvals",
                "/ui/approvals".into(),
                "1 waiting for a decision",
            ),
            (
                "approval",
                format!("/approvals/{challenge}"),
                "Proposed effects",
            ),
            ("dead-letters", "/ui/dead-letters".into(), "oldest first"),
            (
                "dead-letter",
                format!("/ui/dead-letters/{}", dead[0]),
                "Evidence",
            ),
            (
                "replay-dry-run",
                format!("/ui/replay?ids={}&ids={}", dead[0], dead[1]),
                "Would be replayed",
            ),
            ("actions", "/ui/actions".into(), "Actions (kill switch)"),
        ];
        for (name, path, heading) in pages {
            b.open(&path).await;
            b.wait_for(heading).await;
            shoot(name).await;
        }
        b.open(&format!("/ui/replay?ids={}&ids={}", dead[0], dead[1]))
            .await;
        b.fill("#job-reason", "target fixed after the outage").await;
        b.click_button("Start replaying 2 dead letter(s)").await;
        b.wait_for("Replay job").await;
        shoot("replay-job").await;
        b.open("/ui/actions/confirm?scope=mail&enabled=true").await;
        b.wait_for("Enable actions for target mail?").await;
        shoot("actions-confirm").await;
        b.resize(390, 844).await;
        b.open("/ui/run?namespace=support&key=ticket-4712").await;
        b.wait_for("Did we process it?").await;
        shoot("run-phone").await;
    })
    .await;
    assert_eq!(
        c.app
            .db
            .count("SELECT COUNT(*) FROM replay_jobs WHERE state = 'running'")
            .await,
        1,
        "the job the page started"
    );
    for name in [
        "dashboard",
        "run",
        "approvals",
        "dead-letters",
        "actions",
        "run-phone",
    ] {
        let file = crate::browser::screenshot_dir().join(format!("docs/{name}.png"));
        let png = std::fs::read(&file).unwrap();
        assert!(png.starts_with(b"\x89PNG") && png.len() > 5_000, "{name}");
    }
    owned.app.stop().await;
}
