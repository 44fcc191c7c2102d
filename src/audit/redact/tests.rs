//! Tests of the parent module.

use super::*;
use serde_json::json;

fn stripe() -> Redactor {
    Redactor::new(&[RedactionRule {
        namespace: "stripe".into(),
        pointers: vec!["/data/object/customer_email".into(), "/items/*/card".into()],
        fields: vec!["ssn".into()],
    }])
}

#[test]
fn pointers_wildcards_and_fields_are_redacted() {
    let mut doc = json!({
        "data": {"object": {"customer_email": "a@b.c", "amount": 5}},
        "items": [{"card": "4242"}, {"card": {"n": "1"}}],
        "deep": {"ssn": "123-45"},
    });
    assert_eq!(stripe().value("stripe", &mut doc), 4);
    assert_eq!(doc["data"]["object"]["customer_email"], REDACTED);
    assert_eq!(doc["data"]["object"]["amount"], 5);
    assert_eq!(doc["items"][1]["card"], REDACTED);
    assert_eq!(doc["deep"]["ssn"], REDACTED);
    let mut other = json!({"data": {"object": {"customer_email": "a@b.c"}}});
    assert_eq!(stripe().value("github", &mut other), 0);
}

#[test]
fn nested_json_text_is_redacted_or_withheld() {
    let r = stripe();
    let body = r#"{"data":{"object":{"customer_email":"x@y.z"}}}"#;
    let mut evidence = json!({"status": 400, "body": body});
    r.value("stripe", &mut evidence);
    assert!(!evidence.to_string().contains("x@y.z"));
    let mut truncated = json!({"body": "{\"data\":{\"object\":{\"customer_email\":\"x@y"});
    r.value("stripe", &mut truncated);
    assert_eq!(truncated["body"], WITHHELD);
    let mut plain = json!({"body": "upstream timeout"});
    r.value("stripe", &mut plain);
    assert_eq!(plain["body"], "upstream timeout");
}

#[test]
fn bodies_and_echoed_secrets() {
    let r = stripe();
    let body = br#"{"data":{"object":{"customer_email":"who@example.com"}}}"#;
    let stored = r.body("stripe", body).unwrap();
    assert!(!String::from_utf8_lossy(&stored).contains("who@example.com"));
    assert_eq!(r.body("github", body), None);
    let withheld = r.body("stripe", b"a=b&c=d").unwrap();
    assert!(String::from_utf8_lossy(&withheld).contains("withheld"));
    let secrets = r.secrets_in("stripe", Some(body));
    assert_eq!(secrets, vec!["who@example.com".to_owned()]);
    let mut html = json!({"body": "<p>unknown user who@example.com</p>"});
    r.evidence("stripe", &mut html, &secrets);
    assert_eq!(html["body"], "<p>unknown user [redacted]</p>");
}

#[test]
fn star_namespace_applies_everywhere_and_rules_validate() {
    let r = Redactor::new(&[RedactionRule {
        namespace: "*".into(),
        pointers: vec!["/token".into()],
        fields: vec![],
    }]);
    let mut doc = json!({"token": "t"});
    assert_eq!(r.value("anything", &mut doc), 1);
    let bad = RedactionRule {
        namespace: "stripe".into(),
        pointers: vec!["data/x".into()],
        fields: vec![],
    };
    assert_eq!(
        bad.validate("redact[0]").unwrap_err().0,
        "redact[0].pointers[0]"
    );
    let empty = RedactionRule {
        namespace: "stripe".into(),
        pointers: vec![],
        fields: vec![],
    };
    assert!(empty.validate("redact[0]").is_err());
}
