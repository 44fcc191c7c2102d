//! The run a request works on, recorded into the request's span so every
//! log line of the request names it.

/// Records `namespace`, `key` and (when known) `version` into the current
/// span.
pub fn record_run(namespace: &str, key: &str, version: Option<i64>) {
    let span = tracing::Span::current();
    span.record("namespace", namespace);
    span.record("key", key);
    if let Some(version) = version {
        span.record("version", version);
    }
}
