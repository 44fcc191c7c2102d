//! The counts after a chaos run settles, at the real HTTP targets and in
//! the database, and the guarantees they must show.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{json, Value};

use super::db;
use super::supervisor::Crash;
use crate::target::MockTarget;

/// Whether a target deduplicates by idempotency key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Honours,
    Ignores,
}

/// One business event whose effect was driven through oncegate.
#[derive(Debug, Clone)]
pub struct Item {
    pub namespace: String,
    pub run_key: String,
    /// The idempotency key its effect carries downstream.
    pub key: String,
    pub mode: Mode,
    /// Oncegate acknowledged it (a 2xx to the provider or the approver).
    pub acked: bool,
}

fn per_key(requests: &[crate::target::Recorded]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for r in requests {
        if let Some(key) = &r.idempotency_key {
            *counts.entry(key.clone()).or_default() += 1;
        }
    }
    counts
}

/// How often each key was caught in flight by a death.
fn hits(crashes: &[Crash]) -> HashMap<String, usize> {
    let mut hits = HashMap::new();
    for crash in crashes {
        for key in crash.in_flight.iter().collect::<HashSet<_>>() {
            *hits.entry(key.clone()).or_default() += 1;
        }
    }
    hits
}

/// The state of every run, by `namespace|key`.
async fn states(url: &str) -> HashMap<String, String> {
    db::pairs(url, "SELECT namespace || '|' || run_key, state FROM runs")
        .await
        .into_iter()
        .collect()
}

/// Dead letters with evidence (class and error), by `namespace|key`.
async fn dead_letters(url: &str) -> HashMap<String, String> {
    db::pairs(
        url,
        "SELECT namespace || '|' || run_key, class || ': ' || COALESCE(error, detail) FROM dead_letters",
    )
    .await
    .into_iter()
    .collect()
}

/// Asserts the guarantees for `items` of one `mode` at `target`, and
/// returns the counts.
pub async fn check(
    url: &str,
    items: &[Item],
    mode: Mode,
    target: &MockTarget,
    crashes: &[Crash],
) -> Value {
    let items: Vec<&Item> = items.iter().filter(|i| i.mode == mode).collect();
    let (states, dls, hits) = (states(url).await, dead_letters(url).await, hits(crashes));
    let requests = target.requests();
    let (sent, applied) = (per_key(&requests), per_key(&target.effects()));
    let known: HashSet<&str> = items.iter().map(|i| i.key.as_str()).collect();
    let strangers: Vec<&String> = sent
        .keys()
        .filter(|k| !known.contains(k.as_str()))
        .collect();
    assert!(
        strangers.is_empty(),
        "requests for keys nobody sent: {strangers:?}"
    );
    let mut counts = BTreeMap::<&str, usize>::new();
    for item in &items {
        let id = format!("{}|{}", item.namespace, item.run_key);
        let (n_sent, n_applied) = (
            sent.get(&item.key).copied().unwrap_or(0),
            applied.get(&item.key).copied().unwrap_or(0),
        );
        let n_hits = hits.get(&item.key).copied().unwrap_or(0);
        let state = states.get(&id).map(String::as_str);
        assert!(
            n_applied <= 1,
            "{mode:?}: {} applied {n_applied} times",
            item.key
        );
        assert!(
            n_sent <= 1 + n_hits,
            "{mode:?}: {} sent {n_sent} times, caught in flight by {n_hits} death(s)",
            item.key
        );
        if mode == Mode::Ignores {
            assert!(
                n_sent <= 1,
                "a target that ignores keys got {} {n_sent} times",
                item.key
            );
        }
        *counts.entry("requests").or_default() += n_sent;
        *counts.entry("applied").or_default() += n_applied;
        *counts.entry("keys_caught_in_flight").or_default() += usize::from(n_hits > 0);
        let max = counts.entry("max_requests_per_key").or_default();
        *max = (*max).max(n_sent);
        if !item.acked {
            *counts.entry("not_acknowledged").or_default() += 1;
            continue;
        }
        *counts.entry("acknowledged").or_default() += 1;
        match (mode, state) {
            (_, Some("completed")) => {
                assert_eq!(
                    n_applied, 1,
                    "{} completed but applied {n_applied} times",
                    item.key
                );
                *counts.entry("completed").or_default() += 1;
            }
            (Mode::Ignores, Some("dead_lettered")) => {
                let evidence = dls
                    .get(&id)
                    .unwrap_or_else(|| panic!("{id} dead_lettered without a dead letter"));
                assert!(
                    evidence.starts_with("unknown_outcome: "),
                    "{id}: {evidence}"
                );
                assert!(
                    n_hits > 0,
                    "{id} is unknown but no death caught it in flight"
                );
                *counts.entry("dead_lettered").or_default() += 1;
                // Applied once but unknown to oncegate, or never sent at all:
                // a person decides either way (the target cannot tell).
                let how = if n_applied == 1 {
                    "dead_lettered_applied"
                } else {
                    "dead_lettered_never_sent"
                };
                *counts.entry(how).or_default() += 1;
            }
            (_, other) => panic!(
                "{mode:?}: acknowledged {id} ended {other:?} (applied {n_applied}, sent {n_sent})"
            ),
        }
    }
    if mode == Mode::Honours {
        let ids: HashSet<String> = items
            .iter()
            .map(|i| format!("{}|{}", i.namespace, i.run_key))
            .collect();
        let dl: Vec<&String> = dls.keys().filter(|k| ids.contains(*k)).collect();
        assert!(
            dl.is_empty(),
            "dead letters with a target that honours keys: {dl:?}"
        );
    }
    for key in [
        "acknowledged",
        "completed",
        "dead_lettered",
        "not_acknowledged",
        "requests",
        "applied",
    ] {
        counts.entry(key).or_default();
    }
    json!(counts)
}
