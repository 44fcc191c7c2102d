//! The retention archive: JSONL files, one line per run (`runs-*.jsonl`),
//! and one line per resolved dead letter removed at its own retention
//! deadline (`dead-letters-*.jsonl`).
//!
//! A line holds the run row and every row of every table that belongs to
//! it (effects, their attempts, audit events, raw deliveries, dead
//! letters), each column as stored, redacted: effect and delivery bodies
//! through the namespace's rules (withheld when they are not JSON), other
//! JSON-holding columns likewise, and literal values of the request body
//! scrubbed from the evidence. Audit events are kept as stored (they were
//! redacted before their hash was computed), so each line's chain can be
//! verified against the tombstone's head (`oncegate audit verify-archive`).
//!
//! A file is written under a temporary name, fsynced, renamed, and its
//! directory fsynced before any row it holds is slimmed. A run that moved
//! between reading and slimming keeps its rows and is archived again by a
//! later sweep: readers take the last line per (namespace, key).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::rules::RunMaterial;
use crate::audit::Redactor;
use crate::clock::{to_datetime, Millis};

/// The `format` field of every line.
pub const FORMAT: &str = "oncegate-archive/1";

/// Redacts a run's material for the archive (audit events excepted).
pub fn redact(redactor: &Redactor, material: &mut RunMaterial) {
    let ns = material.stamp.namespace.clone();
    if !redactor.applies(&ns) {
        return;
    }
    let secrets: Vec<String> = material
        .rows("effects")
        .iter()
        .filter_map(|r| r.get("body")?.as_str())
        .flat_map(|body| redactor.secrets_in(&ns, Some(body.as_bytes())))
        .collect();
    for (table, rows) in &mut material.tables {
        if table == "audit_events" {
            continue;
        }
        for row in rows.iter_mut() {
            if let Some(Value::String(body)) = row.get("body") {
                let redacted = redactor
                    .body(&ns, body.as_bytes())
                    .map(|b| String::from_utf8_lossy(&b).into_owned());
                if let Some(redacted) = redacted {
                    row.insert("body".into(), Value::String(redacted));
                }
            }
            let mut value = Value::Object(std::mem::take(row));
            redactor.evidence(&ns, &mut value, &secrets);
            if let Value::Object(map) = value {
                *row = map;
            }
        }
    }
}

/// The JSON line of one run.
pub fn line(material: &RunMaterial, archived_at: Millis) -> Value {
    let mut map = Map::new();
    map.insert("format".into(), FORMAT.into());
    map.insert(
        "archived_at".into(),
        to_datetime(archived_at).to_rfc3339().into(),
    );
    map.insert("namespace".into(), material.stamp.namespace.clone().into());
    map.insert("key".into(), material.stamp.key.clone().into());
    for (table, rows) in &material.tables {
        let value = if table == "runs" {
            rows.first().cloned().map_or(Value::Null, Value::Object)
        } else {
            Value::Array(rows.iter().cloned().map(Value::Object).collect())
        };
        let name = if table == "runs" {
            "run"
        } else {
            table.as_str()
        };
        map.insert(name.into(), value);
    }
    Value::Object(map)
}

/// The JSON line of one resolved dead letter removed at its retention
/// deadline: its row as stored, redacted through its namespace's rules.
pub fn dead_letter_line(redactor: &Redactor, row: Value, archived_at: Millis) -> Value {
    let ns = row
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let key = row.get("run_key").cloned().unwrap_or(Value::Null);
    let mut row = row;
    redactor.evidence(&ns, &mut row, &[]);
    serde_json::json!({
        "format": FORMAT,
        "archived_at": to_datetime(archived_at).to_rfc3339(),
        "namespace": ns,
        "key": key,
        "dead_letter": row,
    })
}

/// Writes one batch of run lines durably and returns its path.
///
/// # Errors
/// The directory or file cannot be created, written or synced.
pub fn write_batch(dir: &Path, lines: &[Value], now: Millis) -> std::io::Result<PathBuf> {
    write_named(dir, "runs", lines, now)
}

/// Writes one batch durably as `<kind>-<time>-<id>.jsonl` and returns its path.
///
/// # Errors
/// The directory or file cannot be created, written or synced.
pub fn write_named(
    dir: &Path,
    kind: &str,
    lines: &[Value],
    now: Millis,
) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let stamp = to_datetime(now).format("%Y%m%dT%H%M%S%.3fZ");
    let name = format!("{kind}-{stamp}-{}.jsonl", uuid::Uuid::now_v7().simple());
    let path = dir.join(&name);
    let tmp = dir.join(format!(".{name}.partial"));
    let result = (|| {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        for line in lines {
            serde_json::to_writer(&mut file, line)?;
            file.write_all(b"\n")?;
        }
        let file = file.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|()| path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::RedactionRule;
    use crate::retention::RunStamp;
    use serde_json::json;

    fn row(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn bodies_and_evidence_are_redacted_but_audit_events_kept() {
        let redactor = Redactor::new(&[RedactionRule {
            namespace: "stripe".into(),
            pointers: vec!["/email".into()],
            fields: vec![],
        }]);
        let mut m = RunMaterial {
            stamp: RunStamp {
                namespace: "stripe".into(),
                key: "evt_1".into(),
                version: 3,
                state: "completed".into(),
                updated_at: 0,
            },
            tables: vec![
                (
                    "runs".into(),
                    vec![row(json!({"result": "{\"email\":\"a@b.cd\"}"}))],
                ),
                (
                    "effects".into(),
                    vec![row(json!({"id": "e1", "body": "{\"email\":\"a@b.cd\"}"}))],
                ),
                (
                    "effect_attempts".into(),
                    vec![row(json!({"evidence": "{\"body\":\"<p>a@b.cd</p>\"}"}))],
                ),
                (
                    "audit_events".into(),
                    vec![row(json!({"seq": 1, "detail": "{\"email\":\"a@b.cd\"}"}))],
                ),
            ],
        };
        redact(&redactor, &mut m);
        let text = line(&m, 0).to_string();
        assert_eq!(text.matches("a@b.cd").count(), 1, "{text}");
        assert!(line(&m, 0)["audit_events"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("a@b.cd"));

        let dir = tempfile::tempdir().unwrap();
        let path = write_batch(dir.path(), &[line(&m, 0)], 0).unwrap();
        let written = std::fs::read_to_string(path).unwrap();
        assert_eq!(written.lines().count(), 1);
        assert!(written.contains(FORMAT));
    }
}
