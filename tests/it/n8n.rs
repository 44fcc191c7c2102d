//! What the n8n examples rely on (docs/n8n.md), on both backends: a
//! duplicate of a committed run answers with the committed result, and a
//! target's `env:` secret header (the forward secret an n8n Webhook node
//! checks) reaches the target with the variable's value.

use std::io::Write;

use oncegate::config::Config;
use serde_json::json;

use crate::harness::{on_both_backends, Backend, TestApp};
use crate::target::MockTarget;

on_both_backends!(
    a_duplicate_of_an_approved_run_answers_with_its_result,
    env_secret_header_reaches_the_target,
);

/// Targets and operations loaded the way `serve` loads them: from a file,
/// with the environment.
fn load_targets(base: &str, var: &str) -> Config {
    let text = format!(
        "[[targets]]\nname = \"n8n\"\nbase_url = \"{base}/webhook\"\nkind = \"workflow\"\n\
         secret_headers = {{ \"X-Oncegate-Secret\" = \"env:{var}\" }}\n\
         [[targets]]\nname = \"warehouse\"\nbase_url = \"{base}/warehouse\"\n\
         [[operations]]\nname = \"create_shipment\"\ngate = \"none\"\n"
    );
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    let env = [(var.to_owned(), "forward-secret-value".to_owned())];
    Config::load(Some(file.path()), env).unwrap()
}

fn with_loaded(loaded: Config) -> impl FnOnce(&mut Config) {
    move |config: &mut Config| {
        config.targets = loaded.targets;
        config.operations = loaded.operations;
    }
}

async fn a_duplicate_of_an_approved_run_answers_with_its_result(backend: Backend) {
    let mock = MockTarget::start().await;
    let loaded = load_targets(&mock.base_url(), "ONCEGATE_IT_N8N_SECRET_A");
    let app = TestApp::spawn_with(backend, with_loaded(loaded)).await;
    let claim = json!({ "namespace": "orders", "key": "create-shipment:1042:v1", "payload": { "order_id": "1042" } });
    let (_, first) = app.claim(claim.clone()).await;
    let result = json!({ "shipment": "queued", "order_id": "1042" });
    let commit = json!({
        "namespace": "orders", "key": "create-shipment:1042:v1", "lease": first["lease"],
        "result": result,
        "effects": [{ "operation": "create_shipment", "effect_type": "shipment",
                      "target": "warehouse", "path": "/shipments", "body": { "order_id": "1042" } }],
    });
    let (status, committed) = app
        .post("/v1/runs/commit", Some(&app.workflow), &commit)
        .await;
    assert_eq!(status, 200, "{committed}");
    assert_eq!(committed["state"], "approved");

    // The effect has not gone out yet: the run is in flight, but decided.
    let (status, again) = app.claim(claim.clone()).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["claimed"], false);
    assert_eq!(again["duplicate"], false);
    assert_eq!(again["state"], "approved");
    assert_eq!(
        again["result"], result,
        "the committed result, for n8n's duplicate branch"
    );
    assert!(again["retry_after"].as_i64().is_some(), "{again}");

    app.dispatcher().dispatch_once().await.unwrap();
    let (_, done) = app.claim(claim).await;
    assert_eq!(
        (
            done["duplicate"].clone(),
            done["state"].clone(),
            done["result"].clone()
        ),
        (json!(true), json!("completed"), result)
    );
    app.stop().await;
}

async fn env_secret_header_reaches_the_target(backend: Backend) {
    let mock = MockTarget::start().await;
    let loaded = load_targets(&mock.base_url(), "ONCEGATE_IT_N8N_SECRET_B");
    assert!(
        !format!("{loaded:?}").contains("forward-secret-value"),
        "a resolved secret never shows in Debug"
    );
    let app = TestApp::spawn_with(backend, |config| {
        with_loaded(loaded)(config);
        config.sources = vec![toml::from_str(
            "name = \"shop\"\nscheme = \"none\"\ntarget = \"n8n\"\npath = \"/og-orders\"\nevent_id = \"/id\"\n",
        )
        .unwrap()];
    })
    .await;
    assert_eq!(
        app.hook_unsigned("shop", r#"{"id":"evt_1","order_id":"1042"}"#)
            .await,
        200
    );
    app.dispatcher().dispatch_once().await.unwrap();
    let sent = mock.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].path, "/webhook/og-orders");
    assert_eq!(
        sent[0].header("x-oncegate-secret"),
        Some("forward-secret-value")
    );
    app.stop().await;
}
