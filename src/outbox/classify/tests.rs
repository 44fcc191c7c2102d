//! Tests of the parent module.

use super::*;
use crate::outbox::RejectRule;
use axum::http::HeaderValue;
use serde_json::json;

fn target(honours: bool, kind: &str) -> TargetConfig {
    toml::from_str(&format!(
        "name = \"t\"\nbase_url = \"http://127.0.0.1:1\"\nkind = \"{kind}\"\nhonours_idempotency_keys = {honours}\n"
    ))
    .unwrap()
}

fn answered(code: u16, retry_after: Option<&str>, body: &str) -> Attempted {
    let mut headers = HeaderMap::new();
    if let Some(v) = retry_after {
        headers.insert("retry-after", HeaderValue::from_str(v).unwrap());
    }
    headers.insert("x-id", HeaderValue::from_static("ext_1"));
    Attempted::Answered {
        status: StatusCode::from_u16(code).unwrap(),
        headers,
        body: body.as_bytes().to_vec(),
    }
}

/// Every row of the DESIGN.md §4 table, under an honouring and a
/// non-honouring target: (case, honouring class, non-honouring class).
#[test]
fn every_status_lands_in_exactly_its_route() {
    let spec = EffectSpec {
        reject: Some(RejectRule {
            pointer: "/status".into(),
            equals: json!("declined"),
        }),
        ..EffectSpec::default()
    };
    let cases: Vec<(&str, Attempted, &str, &str)> = vec![
        (
            "connect refused",
            Attempted::NotSent("refused".into()),
            "transient",
            "transient",
        ),
        (
            "timeout after send",
            Attempted::LostAfterSend("timeout".into()),
            "ambiguous",
            "ambiguous",
        ),
        ("200", answered(200, None, "{}"), "success", "success"),
        ("201", answered(201, None, "{}"), "success", "success"),
        (
            "2xx rejection",
            answered(200, None, r#"{"status":"declined"}"#),
            "rejected",
            "rejected",
        ),
        ("301", answered(301, None, ""), "permanent", "permanent"),
        ("400", answered(400, None, ""), "permanent", "permanent"),
        ("401", answered(401, None, ""), "permanent", "permanent"),
        ("403", answered(403, None, ""), "permanent", "permanent"),
        ("404", answered(404, None, ""), "permanent", "permanent"),
        ("408", answered(408, None, ""), "retry_safe", "ambiguous"),
        ("409", answered(409, None, ""), "retry_safe", "ambiguous"),
        ("410", answered(410, None, ""), "permanent", "permanent"),
        ("413", answered(413, None, ""), "permanent", "permanent"),
        ("422", answered(422, None, ""), "permanent", "permanent"),
        ("429", answered(429, None, ""), "transient", "transient"),
        (
            "429 + Retry-After",
            answered(429, Some("7"), ""),
            "transient",
            "transient",
        ),
        ("500", answered(500, None, ""), "retry_safe", "ambiguous"),
        ("502", answered(502, None, ""), "retry_safe", "ambiguous"),
        ("503", answered(503, None, ""), "retry_safe", "ambiguous"),
        (
            "503 + Retry-After",
            answered(503, Some("3"), ""),
            "transient",
            "transient",
        ),
        ("504", answered(504, None, ""), "retry_safe", "ambiguous"),
    ];
    for (case, attempted, honouring, other) in cases {
        assert_eq!(
            classify(&target(true, "http"), &spec, &attempted)
                .class()
                .as_str(),
            honouring,
            "{case} (honours keys)"
        );
        assert_eq!(
            classify(&target(false, "http"), &spec, &attempted)
                .class()
                .as_str(),
            other,
            "{case} (ignores keys)"
        );
    }
}

#[test]
fn workflow_targets_treat_restart_statuses_as_transient() {
    let spec = EffectSpec::default();
    for code in [404, 502, 503] {
        let outcome = classify(&target(true, "workflow"), &spec, &answered(code, None, ""));
        assert_eq!(outcome.class().as_str(), "transient", "{code}");
    }
    let mut t = target(true, "workflow");
    t.status_classes.insert("404".into(), "permanent".into());
    assert_eq!(
        classify(&t, &spec, &answered(404, None, ""))
            .class()
            .as_str(),
        "permanent",
        "overridable"
    );
}

#[test]
fn success_reads_the_external_id_and_retry_after_is_kept() {
    let spec = EffectSpec {
        external_id: Some(ExternalIdAt::Header("x-id".into())),
        ..EffectSpec::default()
    };
    assert_eq!(
        classify(&target(false, "http"), &spec, &answered(201, None, "{}")),
        Outcome::Success {
            external_ref: Some("ext_1".into())
        }
    );
    let spec = EffectSpec {
        external_id: Some(ExternalIdAt::Pointer("/id".into())),
        ..EffectSpec::default()
    };
    assert_eq!(
        classify(
            &target(false, "http"),
            &spec,
            &answered(200, None, r#"{"id":42}"#)
        ),
        Outcome::Success {
            external_ref: Some("42".into())
        }
    );
    assert_eq!(
        classify(&target(false, "http"), &spec, &answered(429, Some("7"), "")),
        Outcome::Transient {
            retry_after: Some(Duration::from_secs(7))
        }
    );
}
