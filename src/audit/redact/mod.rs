//! Redaction: configured fields are replaced by `"[redacted]"` before any
//! payload-derived JSON is stored as evidence or audit (DESIGN.md §8).
//!
//! Rules are per namespace (`[[redact]]` in the config; namespace `"*"`
//! applies everywhere). A rule names JSON pointers (RFC 6901, where a `*`
//! segment matches every member or element) and field names (matched at any
//! depth). Both apply to every JSON document oncegate keeps for a run: a run
//! result, an audit detail, a stored delivery, a dead letter's evidence, and
//! JSON nested inside a string (a target's response body kept as evidence).
//! Text that cannot be parsed as JSON is withheld when it looks like JSON
//! (a truncated body), and literal values taken from the request body are
//! scrubbed from free text, so an echoing target leaks nothing.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What replaces a redacted value.
pub const REDACTED: &str = "[redacted]";

/// What replaces JSON-looking text that could not be parsed (and so could
/// not be redacted field by field).
pub const WITHHELD: &str = "[redacted: unparseable JSON text withheld]";

/// Shortest literal value scrubbed from free text (shorter ones, like
/// `true` or `42`, would blank unrelated text).
const MIN_SCRUB_LEN: usize = 4;

/// `[[redact]]`: fields of one namespace's payloads never stored verbatim.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RedactionRule {
    /// The namespace (a source name or a workflow namespace), or `"*"`.
    pub namespace: String,
    /// JSON pointers into each stored document (`/data/object/email`,
    /// `/items/*/card`).
    #[serde(default)]
    pub pointers: Vec<String>,
    /// Member names redacted wherever they appear (`customer_email`).
    #[serde(default)]
    pub fields: Vec<String>,
}

impl RedactionRule {
    /// Checks the rule; the error names the field at `at`.
    ///
    /// # Errors
    /// `(field, message)` for an empty rule, a bad namespace or pointer.
    pub fn validate(&self, at: &str) -> Result<(), (String, String)> {
        let err = |f: &str, m: String| Err((format!("{at}.{f}"), m));
        if self.namespace != "*" && crate::ledger::Namespace::parse(self.namespace.clone()).is_err()
        {
            return err("namespace", "must be a namespace or \"*\"".into());
        }
        if self.pointers.is_empty() && self.fields.is_empty() {
            return err("pointers", "give at least one pointer or field".into());
        }
        for (i, p) in self.pointers.iter().enumerate() {
            if !p.starts_with('/') {
                return err(
                    &format!("pointers[{i}]"),
                    format!("{p:?} is not a JSON pointer (it must start with '/')"),
                );
            }
        }
        for (i, f) in self.fields.iter().enumerate() {
            if f.is_empty() {
                return err(&format!("fields[{i}]"), "must not be empty".into());
            }
        }
        Ok(())
    }
}

/// The compiled rules of one namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Rules {
    pointers: Vec<Vec<String>>,
    fields: Vec<String>,
}

impl Rules {
    fn extend(&mut self, rule: &RedactionRule) {
        self.pointers
            .extend(rule.pointers.iter().map(|p| parse_pointer(p)));
        self.fields.extend(rule.fields.iter().cloned());
    }
}

/// Splits an RFC 6901 pointer into unescaped segments.
fn parse_pointer(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// Every configured rule, by namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Redactor {
    by_namespace: HashMap<String, Rules>,
}

impl Redactor {
    /// No rules: nothing is redacted.
    pub fn none() -> Self {
        Self::default()
    }

    /// Compiles validated rules; `"*"` rules join every namespace's.
    pub fn new(rules: &[RedactionRule]) -> Self {
        let mut by_namespace: HashMap<String, Rules> = HashMap::new();
        for rule in rules {
            by_namespace
                .entry(rule.namespace.clone())
                .or_default()
                .extend(rule);
        }
        Self { by_namespace }
    }

    /// Whether any rule applies to `namespace` (cheap; the hot path asks).
    pub fn applies(&self, namespace: &str) -> bool {
        self.by_namespace.contains_key(namespace) || self.by_namespace.contains_key("*")
    }

    /// The namespaces with their own rules, and whether a `"*"` rule exists.
    pub fn namespaces(&self) -> (Vec<String>, bool) {
        let any = self.by_namespace.contains_key("*");
        let mut names: Vec<String> = self
            .by_namespace
            .keys()
            .filter(|k| *k != "*")
            .cloned()
            .collect();
        names.sort();
        (names, any)
    }

    fn rules_for(&self, namespace: &str) -> Vec<&Rules> {
        [namespace, "*"]
            .iter()
            .filter_map(|ns| self.by_namespace.get(*ns))
            .collect()
    }

    /// Redacts a JSON document in place (and JSON nested in its strings);
    /// returns how many values were replaced.
    pub fn value(&self, namespace: &str, value: &mut Value) -> usize {
        let rules = self.rules_for(namespace);
        if rules.is_empty() {
            return 0;
        }
        redact_document(&rules, value)
    }

    /// A stored copy of a body: `None` when no rule applies (keep it as
    /// is); otherwise its redacted JSON, or a placeholder when it is not JSON.
    pub fn body(&self, namespace: &str, body: &[u8]) -> Option<Vec<u8>> {
        if !self.applies(namespace) {
            return None;
        }
        let redacted = match serde_json::from_slice::<Value>(body) {
            Ok(mut json) => {
                self.value(namespace, &mut json);
                json
            }
            Err(_) => serde_json::json!({
                "redacted": "the body is not JSON, so it is withheld",
                "bytes": body.len(),
            }),
        };
        Some(redacted.to_string().into_bytes())
    }

    /// The values a body holds at the redacted places (to scrub them from
    /// free text such as a target's echo); empty when no rule applies.
    pub fn secrets_in(&self, namespace: &str, body: Option<&[u8]>) -> Vec<String> {
        let rules = self.rules_for(namespace);
        let Some(json) = body.and_then(|b| serde_json::from_slice::<Value>(b).ok()) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for r in &rules {
            for pointer in &r.pointers {
                collect_at(&json, pointer, &mut found);
            }
            collect_fields(&json, &r.fields, &mut found);
        }
        found.retain(|s| s.len() >= MIN_SCRUB_LEN);
        found.sort();
        found.dedup();
        found
    }

    /// Evidence (an attempt's or a dead letter's): the document is
    /// redacted, and every literal `secrets` value is scrubbed from its text.
    pub fn evidence(&self, namespace: &str, value: &mut Value, secrets: &[String]) {
        if !self.applies(namespace) {
            return;
        }
        self.value(namespace, value);
        scrub_strings(value, secrets);
    }
}

fn redact_document(rules: &[&Rules], value: &mut Value) -> usize {
    let mut n = 0;
    for r in rules {
        for pointer in &r.pointers {
            n += redact_at(value, pointer);
        }
        n += redact_fields(value, &r.fields);
    }
    n + redact_nested(rules, value)
}

/// Redacts JSON documents held as strings (a response body kept as text).
fn redact_nested(rules: &[&Rules], value: &mut Value) -> usize {
    match value {
        Value::String(text) => {
            if !looks_like_json(text) {
                return 0;
            }
            match serde_json::from_str::<Value>(text) {
                Ok(mut inner) => {
                    let n = redact_document(rules, &mut inner);
                    if n > 0 {
                        *text = inner.to_string();
                    }
                    n
                }
                Err(_) => {
                    *text = WITHHELD.into();
                    1
                }
            }
        }
        Value::Array(items) => items.iter_mut().map(|v| redact_nested(rules, v)).sum(),
        Value::Object(map) => map.values_mut().map(|v| redact_nested(rules, v)).sum(),
        _ => 0,
    }
}

/// Whether text starts like a JSON object or array (`{"…`, `[1…`), and
/// not like prose in brackets (`[redacted]`, `[INFO] …`).
fn looks_like_json(text: &str) -> bool {
    let mut chars = text.trim_start().chars();
    let first = chars.next();
    let next = chars.find(|c| !c.is_whitespace());
    match (first, next) {
        (Some('{'), Some(c)) => c == '"' || c == '}',
        (Some('['), Some(c)) => matches!(c, '{' | '[' | '"' | ']' | '-' | '0'..='9'),
        _ => false,
    }
}

fn redact_at(value: &mut Value, path: &[String]) -> usize {
    let Some((first, rest)) = path.split_first() else {
        if *value == Value::String(REDACTED.into()) {
            return 0;
        }
        *value = Value::String(REDACTED.into());
        return 1;
    };
    match value {
        Value::Object(map) if first == "*" => map.values_mut().map(|v| redact_at(v, rest)).sum(),
        Value::Object(map) => map.get_mut(first).map_or(0, |v| redact_at(v, rest)),
        Value::Array(items) if first == "*" => items.iter_mut().map(|v| redact_at(v, rest)).sum(),
        Value::Array(items) => first
            .parse::<usize>()
            .ok()
            .and_then(|i| items.get_mut(i))
            .map_or(0, |v| redact_at(v, rest)),
        _ => 0,
    }
}

fn redact_fields(value: &mut Value, fields: &[String]) -> usize {
    if fields.is_empty() {
        return 0;
    }
    match value {
        Value::Object(map) => map
            .iter_mut()
            .map(|(k, v)| {
                if fields.iter().any(|f| f == k) {
                    redact_at(v, &[])
                } else {
                    redact_fields(v, fields)
                }
            })
            .sum(),
        Value::Array(items) => items.iter_mut().map(|v| redact_fields(v, fields)).sum(),
        _ => 0,
    }
}

/// Every scalar at or under `path`, as text.
fn collect_at(value: &Value, path: &[String], out: &mut Vec<String>) {
    let Some((first, rest)) = path.split_first() else {
        collect_scalars(value, out);
        return;
    };
    match value {
        Value::Object(map) if first == "*" => map.values().for_each(|v| collect_at(v, rest, out)),
        Value::Object(map) => {
            if let Some(v) = map.get(first) {
                collect_at(v, rest, out);
            }
        }
        Value::Array(items) if first == "*" => items.iter().for_each(|v| collect_at(v, rest, out)),
        Value::Array(items) => {
            if let Some(v) = first.parse::<usize>().ok().and_then(|i| items.get(i)) {
                collect_at(v, rest, out);
            }
        }
        _ => {}
    }
}

fn collect_fields(value: &Value, fields: &[String], out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if fields.iter().any(|f| f == k) {
                    collect_scalars(v, out);
                } else {
                    collect_fields(v, fields, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_fields(v, fields, out)),
        _ => {}
    }
}

fn collect_scalars(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Array(items) => items.iter().for_each(|v| collect_scalars(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect_scalars(v, out)),
        Value::Bool(_) | Value::Null => {}
    }
}

/// Replaces every occurrence of each secret in every string of `value`.
fn scrub_strings(value: &mut Value, secrets: &[String]) {
    if secrets.is_empty() {
        return;
    }
    match value {
        Value::String(text) => {
            for secret in secrets {
                if text.contains(secret.as_str()) {
                    *text = text.replace(secret.as_str(), REDACTED);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| scrub_strings(v, secrets)),
        Value::Object(map) => map.values_mut().for_each(|v| scrub_strings(v, secrets)),
        _ => {}
    }
}

#[cfg(test)]
mod tests;
