//! Model output's own retention (DESIGN.md §6), on both backends: a
//! finished run's raw output is erased after `retention.output_days`,
//! long before the run is archived, while its validity and model stay; an
//! unfinished run's output is kept.

use oncegate::config::Config;
use oncegate::retention::{sweep, RetentionConfig, DAY_MS};
use serde_json::json;

use crate::harness::{on_both_backends, Backend, TestApp};

on_both_backends!(raw_output_goes_after_its_window_and_only_when_finished);

async fn raw_output_goes_after_its_window_and_only_when_finished(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c: &mut Config| {
        let parsed: Config = toml::from_str(
            "[[operations]]\nname = \"classify\"\ngate = \"none\"\n\
             [operations.output]\n[operations.output.schema]\ntype = \"object\"\n",
        )
        .unwrap();
        c.operations = parsed.operations;
    })
    .await;
    for key in ["done", "open"] {
        let (_, claim) = app
            .claim(json!({ "namespace": "crm", "key": key, "payload": {} }))
            .await;
        let output = json!({ "namespace": "crm", "key": key, "lease": claim["lease"],
            "operation": "classify", "output": { "label": "refund-draft-for-jane" },
            "model": { "provider_class": "hosted", "model": "m", "revision": "r" } });
        let (status, answer) = app
            .post("/v1/runs/output", Some(&app.workflow), &output)
            .await;
        assert_eq!(status, 200, "{answer}");
        if key == "done" {
            let done =
                json!({ "namespace": "crm", "key": key, "lease": claim["lease"], "result": {} });
            let (status, answer) = app
                .post("/v1/runs/complete", Some(&app.workflow), &done)
                .await;
            assert_eq!(status, 200, "{answer}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let config = RetentionConfig {
        archive_dir: dir.path().to_owned(),
        output_days: 7,
        ..RetentionConfig::default()
    };
    let redactor = oncegate::audit::Redactor::none();
    let held = "SELECT COUNT(*) FROM run_outputs WHERE output LIKE '%refund-draft-for-jane%'";
    let now = chrono::Utc::now().timestamp_millis();
    let early = sweep(app.store.as_ref(), &config, &redactor, now + DAY_MS, false)
        .await
        .unwrap();
    assert_eq!(early.outputs_expired, 0);
    assert_eq!(app.db.count(held).await, 2);
    let due = sweep(
        app.store.as_ref(),
        &config,
        &redactor,
        now + 8 * DAY_MS,
        false,
    )
    .await
    .unwrap();
    assert_eq!((due.outputs_expired, due.slimmed), (1, 0), "{due:?}");
    assert_eq!(app.db.count(held).await, 1, "the open run's output stays");
    let kept = app
        .db
        .text(
            "SELECT output || '|' || valid || '|' || model FROM run_outputs WHERE run_key = 'done'",
        )
        .await;
    assert_eq!(kept, "\"[expired]\"|1|m");
    app.stop().await;
}
