//! Workflows and people: claim → commit (effects to the key-honouring or
//! the key-ignoring target), claim → complete (no effects), claim → gate
//! (an approver approves it through the API from their own session), and
//! bulk runs that keep the rate-limited target saturated. A call whose
//! answer was lost to a kill is retried: a claim still held waits for its
//! short lease, a move that went through is found past it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::client::{retryable, Api, Rng, Tally};
use super::targets::KeyTarget;

/// A claim's lease: short, so a claim whose answer was lost is soon
/// reclaimed.
const LEASE_MS: i64 = 2_000;
/// How long one run is driven before the workflow gives up on it.
const GIVE_UP: Duration = Duration::from_secs(120);

/// What a run's owner does once it holds the claim.
#[derive(Debug, Clone, Copy)]
pub enum Step {
    /// `POST /v1/runs/commit` with one `crm_upsert` effect to `target`.
    Commit(&'static str),
    /// `POST /v1/runs/complete`, no effects.
    Complete,
    /// `POST /v1/runs/gate` with one `send_reply` effect to `target`.
    Gate(&'static str),
    /// `POST /v1/runs/commit` with this many `bulk_sync` effects to the
    /// rate-limited target.
    Bulk(usize),
}

impl Step {
    fn namespace(self) -> &'static str {
        match self {
            Self::Commit(_) => "crm",
            Self::Complete => "ops",
            Self::Gate(_) => "support",
            Self::Bulk(_) => "bulk",
        }
    }

    /// The request that moves the claimed run on.
    fn request(self, key: &str, lease: &str) -> (&'static str, Value) {
        let ns = self.namespace();
        let effect = |operation: &str, target: &str, kind: &str| {
            json!({ "operation": operation, "effect_type": kind, "target": target,
                "path": "/send", "body": { "id": format!("{ns}:{key}:{kind}"), "text": key } })
        };
        let effects = match self {
            Self::Commit(target) => vec![effect("crm_upsert", target, "upsert")],
            Self::Gate(target) => vec![effect("send_reply", target, "reply")],
            Self::Bulk(n) => (0..n)
                .map(|i| effect("bulk_sync", "limited", &format!("e{i}")))
                .collect(),
            Self::Complete => Vec::new(),
        };
        let mut body = json!({ "namespace": ns, "key": key, "lease": lease });
        let path = match self {
            Self::Commit(_) | Self::Bulk(_) => "/v1/runs/commit",
            Self::Gate(_) => "/v1/runs/gate",
            Self::Complete => {
                body["result"] = json!({ "done": key });
                "/v1/runs/complete"
            }
        };
        if !effects.is_empty() {
            body["effects"] = Value::Array(effects);
        }
        (path, body)
    }
}

/// A run state that means an earlier call of ours already moved it on.
fn moved_on(state: &Value) -> bool {
    matches!(
        state.as_str(),
        Some("approved" | "awaiting_human" | "completed")
    )
}

/// Claims and moves `key` on with `step` until oncegate acknowledges it;
/// true if it did.
pub async fn drive(api: &Api, tally: &Tally, key: &str, step: Step) -> bool {
    let ns = step.namespace();
    let claim = json!({ "namespace": ns, "key": key, "payload": { "k": key },
        "requested_by": "ursula", "lease_ms": LEASE_MS });
    let deadline = Instant::now() + GIVE_UP;
    let acked = || {
        tally.runs.lock().unwrap().push(format!("{ns}|{key}"));
        true
    };
    while Instant::now() < deadline {
        let (status, answer) = api.post(tally, "/v1/claims", &claim).await;
        if status == 200 && answer["claimed"] != true {
            if moved_on(&answer["state"]) {
                return acked();
            }
            if answer["state"] != "processing" {
                tally.violation(format!("{ns}/{key}: claim answered {answer}"));
                return false;
            }
        }
        if status != 200 || answer["claimed"] != true {
            if status != 200 && !retryable(status) {
                tally.violation(format!("{ns}/{key}: claim answered {status} {answer}"));
                return false;
            }
            Tally::bump(&tally.retried);
            tokio::time::sleep(Duration::from_millis(300)).await;
            continue;
        }
        let lease = answer["lease"].as_str().unwrap_or_default();
        let (path, body) = step.request(key, lease);
        let (status, answer) = api.post(tally, path, &body).await;
        match status {
            200 => return acked(),
            409 if moved_on(&answer["state"]) => return acked(),
            s if retryable(s) => Tally::bump(&tally.retried),
            _ => {
                tally.violation(format!("{ns}/{key}: {path} answered {status} {answer}"));
                return false;
            }
        }
    }
    tally.violation(format!("{ns}/{key}: not acknowledged within {GIVE_UP:?}"));
    false
}

/// One workflow: runs of every kind in turn until `stop`.
pub async fn workflow(
    n: usize,
    pause: Duration,
    api: Arc<Api>,
    tally: Arc<Tally>,
    stop: CancellationToken,
) {
    let mut seq = 0u64;
    while !stop.is_cancelled() {
        let step = match seq % 5 {
            0 => Step::Commit("apply"),
            1 => Step::Commit("ignore"),
            2 => Step::Complete,
            3 => Step::Gate("apply"),
            _ => Step::Gate("ignore"),
        };
        drive(&api, &tally, &format!("w{n}_{seq:06}"), step).await;
        seq += 1;
        tokio::time::sleep(pause).await;
    }
}

/// Keeps `backlog` effects queued for the rate-limited target (queued
/// minus applied there) until `stop`, `per_run` effects per run.
pub async fn bulk(
    backlog: u64,
    per_run: usize,
    limited: Arc<KeyTarget>,
    api: Arc<Api>,
    tally: Arc<Tally>,
    stop: CancellationToken,
) {
    let mut seq = 0u64;
    while !stop.is_cancelled() {
        let queued = tally.bulk_effects.load(Ordering::Relaxed);
        if queued.saturating_sub(limited.applied() as u64) >= backlog {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        if drive(&api, &tally, &format!("b_{seq:06}"), Step::Bulk(per_run)).await {
            tally
                .bulk_effects
                .fetch_add(per_run as u64, Ordering::Relaxed);
        }
        seq += 1;
    }
}

/// The approver: approves every pending challenge from their session,
/// sometimes twice at once (a double click), until `done` and none is
/// left (or two minutes after `done`).
pub async fn approver(seed: u64, api: Arc<Api>, tally: Arc<Tally>, done: Arc<AtomicBool>) {
    let mut rng = Rng::new(seed ^ 0xa99);
    while !api.login(&tally).await {
        Tally::bump(&tally.retried);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let mut finished_at: Option<Instant> = None;
    loop {
        let (status, cards) = api.pending(&tally).await;
        let cards = cards.as_array().cloned().unwrap_or_default();
        if status == 200 && cards.is_empty() && done.load(Ordering::SeqCst) {
            return;
        }
        if done.load(Ordering::SeqCst) {
            let since = *finished_at.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_secs(120) {
                tally.violation(format!("{} approvals still pending", cards.len()));
                return;
            }
        }
        if status != 200 && !retryable(status) {
            tally.violation(format!("GET /v1/approvals answered {status}"));
        }
        for card in cards {
            let Some(id) = card["id"].as_str() else {
                continue;
            };
            let statuses: Vec<u16> = if rng.chance(25) {
                let (a, b) = tokio::join!(api.approve(&tally, id), api.approve(&tally, id));
                vec![a, b]
            } else {
                vec![api.approve(&tally, id).await]
            };
            let approved = statuses.iter().filter(|s| **s == 200).count();
            if approved > 1 {
                tally.violation(format!("challenge {id} approved twice: {statuses:?}"));
            }
            if approved == 1 {
                Tally::bump(&tally.approvals);
            }
            if let Some(s) = statuses
                .iter()
                .find(|s| !matches!(s, 0 | 200 | 409 | 502..=504))
            {
                tally.violation(format!("approving {id} answered {s}"));
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
