//! `oncegate lab`, the Retry Lab, through the real binary.

use serde_json::Value;

use crate::process::command;

fn lab(args: &[&str]) -> std::process::Output {
    let mut all = vec!["lab"];
    all.extend_from_slice(args);
    command(&all).output().expect("run oncegate lab")
}

#[test]
fn lab_prints_json_and_writes_a_self_contained_page() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("lab.html");
    let page_arg = page.to_str().unwrap();
    let args = [
        "--events", "150", "--seed", "5", "--json", "--html", page_arg,
    ];
    let out = lab(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (report["seed"].as_u64(), report["events"].as_u64()),
        (Some(5), Some(150))
    );
    let cells = report["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 6 * 9);
    let cell = |fault: &str, strategy: &str| {
        cells
            .iter()
            .find(|c| c["fault"] == fault && c["strategy"] == strategy)
            .unwrap()
    };
    assert!(cell("lost-ack", "no-guard")["duplicates"].as_u64().unwrap() > 0);
    assert!(
        cell("crash-before", "atomic-claim")["lost"]
            .as_u64()
            .unwrap()
            > 0
    );
    for c in cells.iter().filter(|c| c["strategy"] == "reconcile") {
        assert_eq!(
            (c["duplicates"].as_u64(), c["lost"].as_u64()),
            (Some(0), Some(0)),
            "{c}"
        );
    }
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!doctype html>"));
    assert_eq!(html.matches("<svg").count(), 6, "one chart per fault");
    assert!(!html.contains("<script") && !html.contains("https://"));
    // The same seed prints the same numbers.
    assert_eq!(lab(&args).stdout, out.stdout);
}

#[test]
fn lab_filters_and_refuses_bad_input_by_name() {
    let out = lab(&[
        "--events",
        "60",
        "--strategy",
        "c,atomic-claim",
        "--fault",
        "crash",
        "--crash-point",
        "before",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("crash before the side effect"));
    assert!(table.contains("(c) lookup, then insert") && table.contains("(d) atomic claim"));
    assert!(!table.contains("(a) no guard") && !table.contains("crash after"));
    let refused = |args: &[&str], needle: &str| {
        let out = lab(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(needle),
            "{args:?}: {stderr}"
        );
    };
    refused(&["--events", "0"], "events must be between 1 and 100000");
    refused(&["--rate", "2"], "rate must be above 0 and at most 1");
    refused(&["--strategy", "z"], "unknown strategy \"z\"");
    refused(&["--fault", "flood"], "unknown fault \"flood\"");
}
