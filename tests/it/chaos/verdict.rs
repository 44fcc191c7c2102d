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

type Counts = BTreeMap<&'static str, usize>;

/// What the database and the target hold after a run.
struct Evidence {
    /// Run states by `namespace|key`.
    states: HashMap<String, String>,
    /// Dead letters by `namespace|key`.
    dead_letters: HashMap<String, String>,
    /// Deaths that caught each idempotency key in flight.
    hits: HashMap<String, usize>,
    /// Requests the target received per key.
    sent: HashMap<String, usize>,
    /// Effects the target applied per key.
    applied: HashMap<String, usize>,
}

impl Evidence {
    async fn gather(url: &str, target: &MockTarget, crashes: &[Crash]) -> Self {
        Self {
            states: states(url).await,
            dead_letters: dead_letters(url).await,
            hits: hits(crashes),
            sent: per_key(&target.requests()),
            applied: per_key(&target.effects()),
        }
    }

    /// Asserts the guarantees for one item and adds it to `counts`.
    fn judge(&self, item: &Item, counts: &mut Counts) {
        let key = &item.key;
        let n_sent = self.sent.get(key).copied().unwrap_or(0);
        let n_applied = self.applied.get(key).copied().unwrap_or(0);
        let n_hits = self.hits.get(key).copied().unwrap_or(0);
        let mode = item.mode;
        assert!(n_applied <= 1, "{mode:?}: {key} applied {n_applied} times");
        assert!(
            n_sent <= 1 + n_hits,
            "{mode:?}: {key} sent {n_sent} times, caught in flight by {n_hits} death(s)"
        );
        if mode == Mode::Ignores {
            assert!(
                n_sent <= 1,
                "a target that ignores keys got {key} {n_sent} times"
            );
        }
        *counts.entry("requests").or_default() += n_sent;
        *counts.entry("applied").or_default() += n_applied;
        *counts.entry("keys_caught_in_flight").or_default() += usize::from(n_hits > 0);
        let max = counts.entry("max_requests_per_key").or_default();
        *max = (*max).max(n_sent);
        if !item.acked {
            *counts.entry("not_acknowledged").or_default() += 1;
            return;
        }
        *counts.entry("acknowledged").or_default() += 1;
        let id = format!("{}|{}", item.namespace, item.run_key);
        match (mode, self.states.get(&id).map(String::as_str)) {
            (_, Some("completed")) => {
                assert_eq!(
                    n_applied, 1,
                    "{key} completed but applied {n_applied} times"
                );
                *counts.entry("completed").or_default() += 1;
            }
            (Mode::Ignores, Some("dead_lettered")) => {
                let evidence = self
                    .dead_letters
                    .get(&id)
                    .unwrap_or_else(|| panic!("{id} dead_lettered without a dead letter"));
                assert!(
                    evidence.starts_with("unknown_outcome: "),
                    "{id}: {evidence}"
                );
                // Unknown either because a death cut the send off, or because
                // the target's answer came after the send's timeout (a real
                // ambiguity a loaded machine makes on its own).
                let timed_out = evidence.contains("the answer was lost");
                assert!(
                    n_hits > 0 || timed_out,
                    "{id} is unknown but no death caught it in flight: {evidence}"
                );
                if timed_out && n_hits == 0 {
                    *counts.entry("unknown_after_a_timeout").or_default() += 1;
                }
                *counts.entry("dead_lettered").or_default() += 1;
                // Applied once but unknown to oncegate, or never sent at all:
                // a person decides either way (the target cannot tell).
                let how = match n_applied {
                    1 => "dead_lettered_applied",
                    _ => "dead_lettered_never_sent",
                };
                *counts.entry(how).or_default() += 1;
            }
            (_, other) => panic!(
                "{mode:?}: acknowledged {id} ended {other:?} (applied {n_applied}, sent {n_sent})"
            ),
        }
    }
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
    let evidence = Evidence::gather(url, target, crashes).await;
    let known: HashSet<&str> = items.iter().map(|i| i.key.as_str()).collect();
    let strangers: Vec<&String> = evidence
        .sent
        .keys()
        .filter(|k| !known.contains(k.as_str()))
        .collect();
    assert!(
        strangers.is_empty(),
        "requests for keys nobody sent: {strangers:?}"
    );
    let mut counts = Counts::new();
    for name in [
        "acknowledged",
        "completed",
        "dead_lettered",
        "not_acknowledged",
    ] {
        counts.insert(name, 0);
    }
    for item in &items {
        evidence.judge(item, &mut counts);
    }
    if mode == Mode::Honours {
        let ids: HashSet<String> = items
            .iter()
            .map(|i| format!("{}|{}", i.namespace, i.run_key))
            .collect();
        let dl: Vec<&String> = evidence
            .dead_letters
            .keys()
            .filter(|k| ids.contains(*k))
            .collect();
        assert!(
            dl.is_empty(),
            "dead letters with a target that honours keys: {dl:?}"
        );
    }
    json!(counts)
}
