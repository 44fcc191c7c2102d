//! Outbound signing (DESIGN.md §4), on both backends: what reaches a
//! target with signing secrets is checked by the official Standard Webhooks
//! verifier (the npm registry's `standardwebhooks`, installed by
//! `scripts/ensure-verifier`), never by oncegate's own code: an effect, an
//! ingress forward and a proxy forward, each secret of a rotation alone,
//! and the failures a receiver must see (another secret, a changed body).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use oncegate::config::{Config, Scope};
use serde_json::{json, Value};

use crate::harness::{on_both_backends, token, Backend, TestApp};
use crate::target::{MockTarget, Recorded};

on_both_backends!(
    an_effect_verifies_with_each_secret_of_a_rotation,
    an_ingress_forward_and_a_proxy_forward_are_signed,
);

/// The secret being rotated out and the one replacing it.
fn old_secret() -> String {
    format!(
        "whsec_{}",
        BASE64.encode(b"the old signing key, 32 bytes!!!")
    )
}
fn new_secret() -> String {
    format!(
        "whsec_{}",
        BASE64.encode(b"the new signing key, 32 bytes!!!")
    )
}

/// The folder `scripts/ensure-verifier` installs the verifier into.
fn verifier_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/ensure-verifier");
        let out = Command::new(script)
            .stderr(Stdio::inherit())
            .output()
            .expect("scripts/ensure-verifier runs (needs node and npm)");
        assert!(out.status.success(), "scripts/ensure-verifier failed");
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

/// What the official verifier says of `request` under `secret`.
fn verify(secret: &str, request: &Recorded, body: &[u8]) -> Value {
    let headers: serde_json::Map<String, Value> =
        ["webhook-id", "webhook-timestamp", "webhook-signature"]
            .iter()
            .filter_map(|n| Some(((*n).to_owned(), json!(request.header(n)?))))
            .collect();
    let input = json!({ "secret": secret, "headers": headers, "body_base64": BASE64.encode(body) });
    let dir = verifier_dir();
    let mut child = Command::new("node")
        .arg("verify.js")
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("node runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).expect("the verifier prints JSON")
}

fn assert_verified(secret: &str, request: &Recorded) {
    let said = verify(secret, request, &request.body);
    assert_eq!(said["verified"], true, "{said} for {request:?}");
}

async fn an_effect_verifies_with_each_secret_of_a_rotation(backend: Backend) {
    let mock = MockTarget::start().await;
    let base = mock.base_url();
    let (old, new) = (old_secret(), new_secret());
    let app = TestApp::spawn_with(backend, |config: &mut Config| {
        let parsed: Config = toml::from_str(&format!(
            "[[targets]]\nname = \"signed\"\nbase_url = \"{base}/signed\"\n\
             signing_secrets = [\"{old}\", \"{new}\"]\n\
             [[targets]]\nname = \"plain\"\nbase_url = \"{base}/plain\"\n\
             [[operations]]\nname = \"notify\"\ngate = \"none\"\n"
        ))
        .unwrap();
        config.targets = parsed.targets;
        config.operations = parsed.operations;
    })
    .await;
    let (_, claim) = app
        .claim(json!({ "namespace": "crm", "key": "notify:7:v1", "payload": { "n": 7 } }))
        .await;
    let effect = |target: &str| {
        json!({ "operation": "notify", "effect_type": format!("notify_{target}"), "target": target,
                "path": "/hook", "body": { "order": 7, "note": "ünïcode ✓" } })
    };
    let commit = json!({ "namespace": "crm", "key": "notify:7:v1", "lease": claim["lease"],
                         "result": { "ok": true }, "effects": [effect("signed"), effect("plain")] });
    let (status, body) = app
        .post("/v1/runs/commit", Some(&app.workflow), &commit)
        .await;
    assert_eq!(status, 200, "{body}");
    let dispatcher = app.dispatcher();
    dispatcher.dispatch_once().await.unwrap();
    let sent = mock.requests();
    assert_eq!(sent.len(), 2, "{sent:?}");
    let signed = sent.iter().find(|r| r.path == "/signed/hook").unwrap();
    let plain = sent.iter().find(|r| r.path == "/plain/hook").unwrap();

    // webhook-id is the effect's idempotency key, stable across attempts.
    assert_eq!(
        signed.header("webhook-id"),
        Some("crm:notify:7:v1:notify_signed")
    );
    assert_eq!(
        signed.header("webhook-id"),
        signed.header("idempotency-key")
    );
    assert_eq!(
        signed
            .header("webhook-signature")
            .unwrap()
            .split(' ')
            .count(),
        2,
        "one entry per secret"
    );
    // Either secret alone verifies: the receiver can switch at any time.
    assert_verified(&old, signed);
    assert_verified(&new, signed);
    // Another secret, or a body changed on the way, is refused.
    let stranger = format!("whsec_{}", BASE64.encode(b"somebody else's key"));
    assert_eq!(verify(&stranger, signed, &signed.body)["verified"], false);
    let mut changed = signed.body.clone();
    changed.push(b' ');
    assert_eq!(verify(&new, signed, &changed)["verified"], false);
    // A target without secrets gets no signature headers at all.
    for name in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
        assert_eq!(plain.header(name), None, "{name}");
    }
    assert_eq!(verify(&new, plain, &plain.body)["verified"], false);
    app.stop().await;
}

async fn an_ingress_forward_and_a_proxy_forward_are_signed(backend: Backend) {
    let mock = MockTarget::start().await;
    let base = mock.base_url();
    let secret = new_secret();
    let (proxy_token, entry) = token("n8n", &[Scope::Proxy]);
    let app = TestApp::spawn_with(backend, |config: &mut Config| {
        let parsed: Config = toml::from_str(&format!(
            "[[targets]]\nname = \"n8n\"\nbase_url = \"{base}/webhook\"\nkind = \"workflow\"\n\
             signing_secrets = [\"{secret}\"]\n\
             [[targets]]\nname = \"crm\"\nbase_url = \"{base}/api\"\nsigning_secrets = [\"{secret}\"]\n\
             [[sources]]\nname = \"shop\"\nscheme = \"none\"\ntarget = \"n8n\"\npath = \"/og-orders\"\n\
             event_id = \"/id\"\n\
             [[proxies]]\nname = \"crm\"\ntarget = \"crm\"\n"
        ))
        .unwrap();
        config.targets = parsed.targets;
        config.sources = parsed.sources;
        config.proxies = parsed.proxies;
        config.tokens.push(entry);
    })
    .await;
    assert_eq!(
        app.hook_unsigned("shop", r#"{"id":"evt_9","order_id":"1042"}"#)
            .await,
        200
    );
    app.dispatcher().dispatch_once().await.unwrap();
    let (status, answer) = crate::harness::answer(
        app.client
            .post(format!("{}/proxy/crm/leads", app.base))
            .bearer_auth(&proxy_token)
            .header("Idempotency-Key", "\"lead-1\"")
            .header("content-type", "application/json")
            .body(r#"{"lead":1}"#),
    )
    .await;
    assert_eq!(status, 200, "{answer}");

    let sent = mock.requests();
    let forward = sent
        .iter()
        .find(|r| r.path == "/webhook/og-orders")
        .unwrap();
    assert_eq!(forward.body, br#"{"id":"evt_9","order_id":"1042"}"#);
    assert_verified(&secret, forward);
    let said = verify(&secret, forward, &forward.body);
    assert_eq!(said["payload"]["order_id"], "1042", "{said}");
    let lead = sent.iter().find(|r| r.path == "/api/leads").unwrap();
    assert_verified(&secret, lead);
    assert_eq!(lead.header("webhook-id"), lead.header("idempotency-key"));
    app.stop().await;
}
