use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::outbox::{EffectSpec, NewEffect};

fn effect(body: &str) -> Effect {
    Effect {
        id: "e1".into(),
        namespace: "crm".into(),
        key: "k".into(),
        new: NewEffect {
            operation: "send_email".into(),
            effect_type: "send_email".into(),
            target: "mock".into(),
            method: "POST".into(),
            url: "http://127.0.0.1:1/x".into(),
            headers: BTreeMap::new(),
            body: Some(body.as_bytes().to_vec()),
            idempotency_key: "crm:k:send_email".into(),
            spec: EffectSpec::default(),
            not_before: None,
            role: crate::outbox::EffectRole::Act,
            schema_version: None,
        },
        state: EffectState::Failed,
        attempts: 1,
        next_attempt_at: 0,
        external_ref: None,
        last_status: Some(422),
        last_class: Some(AttemptClass::Permanent),
        last_error: None,
        first_sent_at: Some(0),
        created_at: 0,
    }
}

fn attempt(class: AttemptClass, status: Option<i64>) -> AttemptView {
    AttemptView {
        attempt: 1,
        dispatcher: "d".into(),
        outcome: AttemptOutcome {
            started_at: 0,
            finished_at: 1,
            class,
            status,
            error: None,
            evidence: Value::Null,
        },
    }
}

fn fix_to(version: u32, operation: &str) -> TransformConfig {
    TransformConfig {
        name: "fix-to".into(),
        version,
        operation: operation.into(),
        effect_type: None,
        description: None,
        patch: vec![json!({ "op": "replace", "path": "/to", "value": "b@example.com" })],
    }
}

#[test]
fn a_transform_patches_the_body_and_a_4xx_keeps_the_key() {
    let e = effect(r#"{"to":"a@example","n":1}"#);
    let refused = [attempt(AttemptClass::Permanent, Some(422))];
    let by_name = Correction::Transform {
        name: "fix-to".into(),
        version: 2,
    };
    let c = plan("dl1", &e, &refused, &by_name, &[fix_to(2, "send_email")]).unwrap();
    let body: Value = serde_json::from_slice(&c.body).unwrap();
    assert_eq!(body, json!({ "to": "b@example.com", "n": 1 }));
    assert_eq!(c.transform.as_deref(), Some("fix-to@2"));
    assert!(c.keeps_key(), "{c:?}");
    assert_ne!(c.hash_before, c.hash_after);
    assert_eq!(c.hash_after, PayloadHash::of_bytes(&c.body).to_string());
    let audit = c.audit();
    assert_eq!(audit["transform"], "fix-to@2");
    assert!(audit.get("body").is_none());
}

#[test]
fn any_answer_but_a_4xx_takes_a_new_key_derived_from_the_record() {
    let e = effect(r#"{"to":"a@example"}"#);
    let whole = Correction::Body(json!({ "to": "c@example.com" }));
    for attempts in [
        vec![attempt(AttemptClass::Transient, Some(503))],
        vec![
            attempt(AttemptClass::Permanent, Some(422)),
            attempt(AttemptClass::Ambiguous, None),
        ],
        vec![attempt(AttemptClass::Rejected, Some(200))],
        vec![attempt(AttemptClass::Permanent, Some(301))],
        vec![],
    ] {
        let c = plan("dl9", &e, &attempts, &whole, &[]).unwrap();
        assert_eq!(c.key_after, "crm:k:send_email:fix:dl9", "{attempts:?}");
        assert!(!c.keeps_key());
    }
}

#[test]
fn refusals_name_what_is_wrong() {
    let e = effect(r#"{"to":"a@example"}"#);
    let refused = [attempt(AttemptClass::Permanent, Some(400))];
    let named = |version| Correction::Transform {
        name: "fix-to".into(),
        version,
    };
    let unknown = plan("d", &e, &refused, &named(3), &[fix_to(2, "send_email")]).unwrap_err();
    assert!(unknown.to_string().contains("fix-to@2"), "{unknown}");
    let other = plan("d", &e, &refused, &named(2), &[fix_to(2, "refund")]).unwrap_err();
    assert!(matches!(other, CorrectionError::Mismatch { .. }), "{other}");
    let mut missing = fix_to(2, "send_email");
    missing.patch = vec![json!({ "op": "replace", "path": "/nope/deeper", "value": 1 })];
    let failed = plan("d", &e, &refused, &named(2), &[missing]).unwrap_err();
    assert!(
        matches!(failed, CorrectionError::PatchFailed { .. }),
        "{failed}"
    );
    let not_json = plan(
        "d",
        &effect("to=a"),
        &refused,
        &named(2),
        &[fix_to(2, "send_email")],
    );
    assert!(matches!(not_json, Err(CorrectionError::BodyNotJson(_))));
    let same = Correction::Body(json!({ "to": "a@example" }));
    assert_eq!(
        plan("d", &e, &refused, &same, &[]),
        Err(CorrectionError::Unchanged)
    );
}

#[test]
fn the_preview_diffs_the_redacted_bodies() {
    let e = effect(r#"{"to":"a@example","secret":"hunter22"}"#);
    let whole = Correction::Body(json!({ "to": "b@example", "secret": "hunter33" }));
    let c = plan("d", &e, &[], &whole, &[]).unwrap();
    let rules = [crate::audit::RedactionRule {
        namespace: "crm".into(),
        pointers: vec![],
        fields: vec!["secret".into()],
    }];
    let p = preview(c, &e, "crm", &Redactor::new(&rules));
    let text = serde_json::to_string(&p).unwrap();
    assert!(!text.contains("hunter"), "{text}");
    assert_eq!(
        p.diff,
        json!([{ "op": "replace", "path": "/to", "value": "b@example" }])
    );
}

#[test]
fn pick_takes_the_named_then_the_failed_then_the_only_open_effect() {
    let mut done = effect("{}");
    done.id = "e0".into();
    done.state = EffectState::Completed;
    let effects = [done, effect("{}")];
    assert_eq!(pick(&effects, None, None).unwrap().id, "e1");
    assert_eq!(pick(&effects, None, Some("e1")).unwrap().id, "e1");
    assert!(
        pick(&effects, Some("e0"), None).is_err(),
        "a completed effect"
    );
    assert!(pick(&effects, Some("other"), None).is_err());
}
