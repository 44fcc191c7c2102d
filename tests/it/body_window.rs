//! Issue 25 M3, through the real server on both backends: GitHub and
//! Shopify sign only the body (no timestamp, and the delivery id is an
//! unsigned header), so a captured delivery verifies again under any new
//! id. Such a source remembers the bodies it saw for a window, and the
//! same body under another id inside it is a duplicate, never forwarded.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use oncegate::config::Config;
use serde_json::json;
use sha2::Sha256;

use crate::harness::{on_both_backends, Backend, TestApp};
use crate::ingress::deliver;
use crate::target::MockTarget;

const SECRET: &str = "body-only-secret";

on_both_backends!(a_body_replayed_under_new_delivery_ids_is_forwarded_once,);

fn sources(base: String) -> impl FnOnce(&mut Config) {
    move |config: &mut Config| {
        let text = format!(
            "[[targets]]\nname = \"n8n\"\nbase_url = \"{base}\"\nkind = \"workflow\"\n\
             [[sources]]\nname = \"github\"\nscheme = \"github\"\nsecrets = [\"{SECRET}\"]\n\
             target = \"n8n\"\npath = \"/github\"\n\
             [[sources]]\nname = \"shopify\"\nscheme = \"shopify\"\nsecrets = [\"{SECRET}\"]\n\
             target = \"n8n\"\npath = \"/shopify\"\n\
             [[sources]]\nname = \"github-open\"\nscheme = \"github\"\nsecrets = [\"{SECRET}\"]\n\
             target = \"n8n\"\npath = \"/open\"\nbody_window_secs = 0\n"
        );
        let parsed: Config = toml::from_str(&text).unwrap();
        config.targets = parsed.targets;
        config.sources = parsed.sources;
    }
}

fn mac(body: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

/// The signature and id headers of `source` for one delivery.
fn headers(source: &str, body: &[u8], id: &str) -> Vec<(&'static str, String)> {
    match source {
        "shopify" => vec![
            ("x-shopify-hmac-sha256", STANDARD.encode(mac(body))),
            ("x-shopify-webhook-id", id.to_owned()),
            ("x-shopify-topic", "orders/create".to_owned()),
        ],
        _ => vec![
            (
                "x-hub-signature-256",
                format!("sha256={}", hex::encode(mac(body))),
            ),
            ("x-github-delivery", id.to_owned()),
            ("x-github-event", "push".to_owned()),
        ],
    }
}

/// Steps the dispatcher until nothing is due, then returns the forwards
/// the workflow received on `path`.
async fn forwards(app: &TestApp, mock: &MockTarget, path: &str) -> usize {
    let dispatcher = app.dispatcher();
    for _ in 0..50 {
        let step = dispatcher.dispatch_once().await.unwrap();
        if step.leased == 0 {
            break;
        }
    }
    mock.requests().iter().filter(|r| r.path == path).count()
}

async fn a_body_replayed_under_new_delivery_ids_is_forwarded_once(backend: Backend) {
    let mock = MockTarget::start().await;
    let app = TestApp::spawn_with(backend, sources(mock.base_url())).await;
    let body = br#"{"ref":"refs/heads/main","after":"4b825dc"}"#;
    for source in ["github", "shopify"] {
        let mut answers = Vec::new();
        for id in ["d-1", "d-1", "d-2", "d-3"] {
            let (status, answer) = deliver(&app, source, body, &headers(source, body, id)).await;
            assert_eq!(status, 200, "{source} {id}: {answer}");
            answers.push(answer);
        }
        assert_eq!(answers[0], json!({ "received": true }), "{source}");
        for answer in &answers[2..] {
            assert_eq!(
                answer["duplicate_of"],
                json!({ "namespace": source, "key": "d-1" }),
                "{source}: {answer}"
            );
        }
        assert_eq!(
            forwards(&app, &mock, &format!("/{source}")).await,
            1,
            "{source}: one captured body is forwarded once"
        );
    }
    // A source that turned its window off forwards each new id again.
    for id in ["d-1", "d-2"] {
        let (status, answer) =
            deliver(&app, "github-open", body, &headers("github", body, id)).await;
        assert_eq!((status, answer), (200, json!({ "received": true })));
    }
    assert_eq!(forwards(&app, &mock, "/open").await, 2);
    assert_eq!(
        app.db
            .count("SELECT COUNT(*) FROM ingress_bodies WHERE source = 'github-open'")
            .await,
        0,
        "nothing is remembered with the window off"
    );
    app.stop().await;
}
