//! The operator console in headless Chromium against a real server
//! (SQLite): each test acts as a person would, through pages and forms
//! only, then checks the page and the database. Also the approval
//! browser test: an approval link from `/v1/runs/gate`, the card, the decision, and
//! the target receiving the effect exactly once.

use std::time::Duration;

use crate::browser::with_browser;
use crate::console::Console;
use crate::harness::{eventually, Backend};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_signs_in_and_out() {
    let owned = Console::start(Backend::Sqlite).await;
    let c = &owned;
    with_browser("signs_in_and_out", &c.app.base, |b| async move {
        b.open("/ui/dead-letters").await;
        assert!(
            b.path().await.starts_with("/login?next="),
            "{}",
            b.path().await
        );
        b.fill("#token", "og_not-a-token").await;
        b.click_button("Sign in").await;
        b.wait_for("not an approver or operator token").await;
        b.sign_in("/ui/dead-letters", &c.olga).await;
        assert_eq!(
            b.path().await,
            "/ui/dead-letters",
            "back where the person was going"
        );
        b.wait_for("Signed in as olga").await;
        assert_eq!(
            c.app
                .db
                .count("SELECT COUNT(*) FROM sessions WHERE subject = 'olga'")
                .await,
            1
        );
        b.click_button("Sign out").await;
        b.wait_for("Sign in to oncegate").await;
        assert_eq!(
            c.app
                .db
                .count("SELECT COUNT(*) FROM sessions WHERE subject = 'olga'")
                .await,
            0,
            "the session is gone from the database"
        );
        b.open("/ui").await;
        b.wait_for("Sign in to oncegate").await;
    })
    .await;
    owned.app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_finds_a_run_by_key_and_reads_its_timeline() {
    let owned = Console::start(Backend::Sqlite).await;
    let c = &owned;
    c.email("order-1001", "/ok").await;
    c.email("order-2002", "/ok").await;
    c.dispatch_until("crm", "order-1001", "completed").await;
    with_browser("finds_a_run", &c.app.base, |b| async move {
        b.sign_in("/ui", &c.olga).await;
        b.click_link("Runs").await;
        b.fill("#f-key", "order-100").await;
        b.click_button("Search").await;
        // The unfiltered list says "run(s) on this page" too: wait for the
        // search's own page before reading it.
        eventually(
            "the search's results page",
            Duration::from_secs(10),
            || async { b.path().await.contains("key=order-100").then_some(()) },
        )
        .await;
        let results = b.wait_for("run(s) on this page").await;
        assert!(results.contains("crm / order-1001"));
        assert!(
            !results.contains("order-2002"),
            "only keys starting with the text"
        );
        b.click_link("crm / order-1001").await;
        let page = b.wait_for("Did we process it?").await;
        assert!(page.contains("Yes. State now: completed"), "{page}");
        assert!(page.contains("All 1 effect(s) completed"), "{page}");
        assert!(page.contains("no approval was asked"), "{page}");
        assert!(page.contains("No model output"), "{page}");
        assert!(page.contains("The hash chain verifies"), "{page}");
        for event in ["claim", "approve", "effects_completed"] {
            assert!(page.contains(event), "the timeline shows {event}");
        }
        let effects = c
            .app
            .db
            .count(
                "SELECT COUNT(*) FROM effects WHERE run_key = 'order-1001' AND state = 'completed'",
            )
            .await;
        assert_eq!(effects, 1, "the page tells what the database holds");
        assert_eq!(c.mock.effect_count_for_key("crm:order-1001:send_email"), 1);
    })
    .await;
    owned.app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_clears_the_approval_queue_from_the_inbox() {
    let owned = Console::start(Backend::Sqlite).await;
    let c = &owned;
    c.gated_reply("t-100", "We refunded your order.").await;
    c.gated_reply("t-200", "Please send the receipt.").await;
    with_browser("clears_the_queue", &c.app.base, |b| async move {
        b.sign_in("/ui/approvals", &c.olga).await;
        let inbox = b.wait_for("2 waiting for a decision").await;
        assert!(inbox.contains("Refund reply for ticket t-100"));
        assert!(inbox.contains("gpt-4o-mini"), "the card names the model");
        for (key, decision) in [("t-100", "Approve"), ("t-200", "Reject")] {
            b.open("/ui/approvals").await;
            b.click(&format!("article:has(a[href*='key={key}']) a.button"))
                .await;
            let page = b.wait_for("Model output (untrusted text)").await;
            assert!(page.contains(&format!("support / {key}")), "{page}");
            b.fill("#reason", "checked the ticket").await;
            b.click_button(decision).await;
            b.wait_for("Decision recorded").await;
        }
        b.open("/ui/approvals").await;
        b.wait_for("The queue is empty").await;
        let db = &c.app.db;
        assert_eq!(
            db.count("SELECT COUNT(*) FROM challenges WHERE state = 'pending'")
                .await,
            0
        );
        assert_eq!(
            db.text("SELECT decided_by FROM challenges WHERE run_key = 't-100'")
                .await,
            "olga"
        );
        assert_eq!(c.state("support", "t-100").await, "approved");
        assert_eq!(c.state("support", "t-200").await, "failed_terminal");
        assert_eq!(
            db.count("SELECT COUNT(*) FROM effects WHERE run_key = 't-100'")
                .await,
            1
        );
        assert_eq!(
            db.count("SELECT COUNT(*) FROM effects WHERE run_key = 't-200'")
                .await,
            0,
            "a rejection enqueues nothing"
        );
    })
    .await;
    owned.app.stop().await;
}

/// Log in, open the approval link, see the card, approve; the
/// target receives the effect once after the dispatcher runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_approves_from_the_link_and_the_target_gets_it_once() {
    let owned = Console::start(Backend::Sqlite).await;
    let c = &owned;
    let link = c.gated_reply("t-link", "Your refund is on its way.").await;
    let path = link.strip_prefix(&c.app.base).unwrap().to_owned();
    let approver = c.app.approver.clone();
    with_browser("approves_from_the_link", &c.app.base, |b| async move {
        b.open(&path).await;
        b.wait_for("Nothing was done").await;
        b.click_link("Sign in").await;
        b.fill("#token", &approver).await;
        b.click_button("Sign in").await;
        let card = b.wait_for("Approve send_reply?").await;
        assert_eq!(b.path().await, path, "back on the link after signing in");
        for shown in [
            "support / t-link",
            "https://crm.example/tickets/t-link",
            "Your refund is on its way.",
            "gpt-4o-mini",
            "support:t-link:reply",
            "ursula",
        ] {
            assert!(card.contains(shown), "the card shows {shown:?}");
        }
        b.click_button("Approve").await;
        b.wait_for("Decision recorded: approve").await;
    })
    .await;
    assert_eq!(c.state("support", "t-link").await, "approved");
    c.dispatch_until("support", "t-link", "completed").await;
    let dispatcher = c.app.dispatcher();
    for _ in 0..3 {
        dispatcher.dispatch_once().await.unwrap();
    }
    assert_eq!(c.mock.effect_count_for_key("support:t-link:reply"), 1);
    assert_eq!(
        c.app
            .db
            .text("SELECT decided_by FROM challenges WHERE run_key = 't-link'")
            .await,
        "alice"
    );
    owned.app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_replays_a_dead_letter() {
    let owned = Console::start(Backend::Sqlite).await;
    let c = &owned;
    c.mock.on_path_seq(
        "/flaky",
        vec![
            crate::target::Behaviour::no_commit(422),
            crate::target::Behaviour::status(200),
        ],
    );
    c.email("order-3003", "/flaky").await;
    c.dispatch_until("crm", "order-3003", "dead_lettered").await;
    let id = c.dead_letter_id("order-3003").await;
    let id = &id;
    with_browser("replays_a_dead_letter", &c.app.base, |b| async move {
        b.sign_in("/ui", &c.olga).await;
        b.click_link("Dead letters").await;
        let list = b.wait_for("on this page, oldest first").await;
        assert!(
            list.contains("crm / order-3003") && list.contains("permanent"),
            "{list}"
        );
        b.click(&format!("a[href='/ui/dead-letters/{id}']")).await;
        let record = b.wait_for("Evidence").await;
        assert!(
            record.contains("422"),
            "the target's answer is evidence: {record}"
        );
        b.fill("#replay-reason", "the address was fixed upstream")
            .await;
        b.click_button("Replay").await;
        b.wait_for("Replayed. 1 effect(s) are back in the outbox")
            .await;
        assert_eq!(c.state("crm", "order-3003").await, "approved");
        c.dispatch_until("crm", "order-3003", "completed").await;
        b.open("/ui/run?namespace=crm&key=order-3003").await;
        let run = b.wait_for("Did we send?").await;
        assert!(run.contains("All 1 effect(s) completed"), "{run}");
        assert!(
            run.contains("olga — replay"),
            "the replay and its operator: {run}"
        );
    })
    .await;
    let db = &c.app.db;
    assert_eq!(
        db.text(&format!(
            "SELECT resolution FROM dead_letters WHERE id = '{id}'"
        ))
        .await,
        "replayed"
    );
    assert_eq!(
        c.mock.effect_count_for_key("crm:order-3003:send_email"),
        1,
        "the refused attempt committed nothing; the replay sent once"
    );
    owned.app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_kill_switch_holds_then_sends_once() {
    let owned = Console::start(Backend::Sqlite).await;
    let c = &owned;
    with_browser("kill_switch", &c.app.base, |b| async move {
        b.sign_in("/ui/actions", &c.root).await;
        b.wait_for("Actions (kill switch)").await;
        b.click("a[href='/ui/actions/confirm?scope=*&enabled=false']")
            .await;
        b.wait_for("Disable actions for every target (global)?")
            .await;
        b.click_button("Yes, disable actions").await;
        b.wait_for("Actions disabled for every target (global).")
            .await;
        assert_eq!(
            c.app
                .db
                .count("SELECT COUNT(*) FROM action_switches WHERE scope = '*' AND enabled = 0")
                .await,
            1
        );
        c.email("order-4004", "/ok").await;
        let dispatcher = c.app.dispatcher();
        for _ in 0..5 {
            dispatcher.dispatch_once().await.unwrap();
        }
        assert_eq!(
            c.mock.effect_count_for_key("crm:order-4004:send_email"),
            0,
            "held"
        );
        b.open("/ui").await;
        let dash = b.wait_for("Effects held").await;
        assert!(dash.contains("Effects held\n1"), "{dash}");
        b.open("/ui/actions").await;
        b.click("a[href='/ui/actions/confirm?scope=*&enabled=true']")
            .await;
        b.wait_for("1 held effect(s) will be released").await;
        b.click_button("Yes, enable actions").await;
        b.wait_for("Actions enabled for every target (global).")
            .await;
        c.dispatch_until("crm", "order-4004", "completed").await;
        for _ in 0..3 {
            dispatcher.dispatch_once().await.unwrap();
        }
        assert_eq!(
            c.mock.effect_count_for_key("crm:order-4004:send_email"),
            1,
            "sent once"
        );
        let actor = c
            .app
            .db
            .text("SELECT changed_by FROM action_switches WHERE scope = '*'")
            .await;
        assert_eq!(actor, "root");
    })
    .await;
    owned.app.stop().await;
}
