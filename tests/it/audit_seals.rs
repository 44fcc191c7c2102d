//! Issue 25 L7, through the real server on both backends: the move that
//! queues effects seals their immutable fields into its audit entry, so
//! `audit verify` names an effect row edited in the database even when the
//! edit stays inside its target (which the send-time allow-list cannot
//! see), and says nothing while the rows are as queued.

use oncegate::audit::verify;
use serde_json::json;

use crate::deadletters::{claim_commit, dlq_config};
use crate::harness::{on_both_backends, Backend, TestApp};
use crate::target::MockTarget;

on_both_backends!(an_effect_edited_inside_its_target_fails_audit_verify);

async fn an_effect_edited_inside_its_target_fails_audit_verify(backend: Backend) {
    let mock = MockTarget::start().await;
    let app = TestApp::spawn_with(backend, dlq_config(mock.base_url())).await;
    claim_commit(&app, "c1", "/send").await;
    // An intake seals its forward too (the "shop" source signs nothing).
    let hook = app
        .client
        .post(format!("{}/hooks/shop", app.base))
        .json(&json!({ "id": "evt_1" }))
        .send()
        .await
        .unwrap();
    assert_eq!(hook.status(), 200);
    let clean = verify(app.store.as_ref(), None).await.unwrap();
    assert!(clean.ok(), "{:?}", clean.findings);
    assert_eq!(clean.unsealed_effects, 0, "every effect is sealed");

    app.db
        .exec("UPDATE effects SET headers = '{\"x-http-method-override\":\"DELETE\"}' WHERE run_key = 'c1'")
        .await;
    app.db
        .exec("UPDATE effects SET body = NULL WHERE run_key = 'evt_1'")
        .await;
    let report = verify(app.store.as_ref(), None).await.unwrap();
    assert_eq!(report.failures, 2, "{:?}", report.findings);
    let problems: Vec<String> = report.findings.iter().map(ToString::to_string).collect();
    assert!(
        problems.iter().any(|p| p.contains("key=c1")
            && p.contains("mock/send_email")
            && p.contains("method, URL, headers")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("key=evt_1") && p.contains("its body")),
        "{problems:?}"
    );
    app.stop().await;
}
