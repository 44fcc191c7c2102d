//! The request a dead-lettered effect sent, as an operator reads it
//! (DESIGN.md §7: "a dead letter shows the exact request that was sent").
//!
//! The record stores what oncegate keeps of the request (method, URL, the
//! effect's own headers, its idempotency key, its body, redacted like every
//! other payload-derived copy). The headers the dispatcher adds at send
//! time are added back here from the target's configuration: the
//! idempotency header with its key, oncegate's own headers, and each
//! credential header by name only, its value never shown.

use serde_json::Value;

use crate::outbox::TargetConfig;

/// What stands in for a credential header's value.
pub const SECRET_VALUE: &str = "[secret: from the target's configuration]";

/// The stored request with the headers the dispatcher adds at send time
/// (`x-oncegate-version` and `x-correlation-id` vary per attempt and are
/// named, not valued). A request whose target is no longer configured is
/// shown as stored.
pub fn as_sent(stored: &Value, namespace: &str, key: &str, targets: &[TargetConfig]) -> Value {
    let mut shown = stored.clone();
    let target_name = stored.get("target").and_then(Value::as_str);
    let Some(target) = target_name.and_then(|n| targets.iter().find(|t| t.name == n)) else {
        return shown;
    };
    let idempotency_key = stored.get("idempotency_key").cloned();
    let Some(headers) = shown.get_mut("headers").and_then(Value::as_object_mut) else {
        return shown;
    };
    if let Some(k) = idempotency_key {
        headers.insert(target.idempotency_header.to_ascii_lowercase(), k);
    }
    headers.insert("x-oncegate-namespace".into(), namespace.into());
    headers.insert("x-oncegate-key".into(), key.into());
    headers.insert(
        "x-oncegate-version".into(),
        "[the run's version at the attempt]".into(),
    );
    headers.insert(
        "x-correlation-id".into(),
        "[the run's correlation id]".into(),
    );
    for name in target.secret_headers.keys() {
        headers.insert(name.to_ascii_lowercase(), SECRET_VALUE.into());
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn send_time_headers_are_added_and_credentials_never_valued() {
        let target: TargetConfig = toml::from_str(
            "name = \"crm\"\nbase_url = \"http://127.0.0.1:1/\"\n\
             idempotency_header = \"Idem-Key\"\n\
             secret_headers = { Authorization = \"Bearer s3cret-token\" }\n",
        )
        .unwrap();
        let stored = json!({ "target": "crm", "method": "POST", "url": "http://127.0.0.1:1/x",
            "headers": { "content-type": "application/json" }, "idempotency_key": "crm:k:e",
            "body": { "a": 1 } });
        let shown = as_sent(&stored, "crm", "k", std::slice::from_ref(&target));
        assert_eq!(shown["headers"]["idem-key"], "crm:k:e");
        assert_eq!(shown["headers"]["authorization"], SECRET_VALUE);
        assert_eq!(shown["headers"]["x-oncegate-key"], "k");
        assert!(!shown.to_string().contains("s3cret-token"));
        assert_eq!(shown["body"], stored["body"]);
        assert_eq!(as_sent(&stored, "crm", "k", &[]), stored, "unknown target");
    }
}
