//! Text output of `oncegate dlq` (the `--json` flag prints the server's JSON instead).

use serde_json::Value;

use super::dlq::text;

pub(super) fn action_line(done: &Value, json_out: bool, verb: &str) -> Value {
    if json_out {
        return done.clone();
    }
    let dl = &done["dead_letter"];
    let run = &done["run"];
    println!(
        "dead letter {} {verb} ({}); run {}/{} is now {}; effects: {}",
        text(&dl["id"]),
        text(&dl["resolution"]),
        text(&run["namespace"]),
        text(&run["key"]),
        text(&run["state"]),
        done["effects"]
    );
    Value::Null
}

pub(super) fn print_list(page: &Value) {
    let items = page["items"].as_array().cloned().unwrap_or_default();
    println!(
        "{:<36}  {:>8}  {:<17}  {:<16}  {:<14}  ERROR",
        "ID", "AGE", "CLASS", "RUN", "STATE"
    );
    for d in &items {
        let run = format!("{}/{}", text(&d["namespace"]), text(&d["key"]));
        let age = d["age_seconds"].as_i64().unwrap_or(0);
        println!(
            "{:<36}  {:>7}s  {:<17}  {:<16}  {:<14}  {}",
            text(&d["id"]),
            age,
            text(&d["class"]),
            short(&run, 16),
            text(&d["state"]),
            short(&text(&d["error"]), 60)
        );
    }
    println!("{} dead letter(s)", items.len());
    if let Some(cursor) = page["next_cursor"].as_str() {
        println!("more: --cursor {cursor}");
    }
}

pub(super) fn print_show(detail: &Value) {
    let d = &detail["dead_letter"];
    for field in [
        "id",
        "class",
        "component",
        "namespace",
        "key",
        "state",
        "run_state_at_record",
        "error",
        "operation",
        "correlation_id",
        "workflow_version",
        "schema_version",
        "payload_ref",
        "payload_hash",
        "owner",
        "next_action",
        "replay_count",
        "created_at",
        "resolution",
        "resolved_by",
        "resolution_note",
        "retention_deadline",
    ] {
        println!("{field:<20} {}", text(&d[field]));
    }
    println!(
        "\nrequest sent:\n{}",
        serde_json::to_string_pretty(&d["last_request"]).unwrap_or_default()
    );
    println!(
        "\nthe target's answer:\n{}",
        serde_json::to_string_pretty(&d["last_evidence"]).unwrap_or_default()
    );
    println!("\neffects:");
    for e in detail["effects"].as_array().into_iter().flatten() {
        println!(
            "  {} {} -> {} key {} state {} attempts {}",
            text(&e["effect_type"]),
            text(&e["method"]),
            text(&e["target"]),
            text(&e["idempotency_key"]),
            text(&e["state"]),
            e["attempts"]
        );
    }
    println!("\ntimeline:");
    for a in detail["timeline"].as_array().into_iter().flatten() {
        println!(
            "  #{} {} {} -> {} by {}",
            a["seq"],
            text(&a["kind"]),
            text(&a["from_state"]),
            text(&a["to_state"]),
            text(&a["actor"])
        );
    }
}

fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}
