//! The workflow side under SIGKILL: business runs driven through the API
//! while generations die at a crash point.
//!
//! - `after_claim` and `after_effect_insert` (commit flow): claim → commit
//!   with one ungated effect; a claim or commit whose answer died with the
//!   process is retried (a claim still in flight waits for its lease to
//!   expire and reclaims; a commit whose run is already `approved` is done).
//! - `approval_decide` (gate flow): claim → gate → approve; the decision is
//!   posted until answered, sometimes twice at once (a double click). The
//!   crash sits inside the decision transaction, so it must undo the
//!   consume: the retry succeeds and no challenge is "used" unanswered.
//!
//! Runs alternate between a target that honours keys and one that ignores
//! them; each approved run must send its effect once.

use std::time::{Duration, Instant};

use oncegate::config::Scope;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use super::people::People;
use super::points::crash_budget;
use super::supervisor::{CrashPlan, Supervisor};
use super::verdict::{check, Item, Mode};
use super::{db, events, report};
use crate::harness::{token, Backend, TestDb};
use crate::process::write_config_with;
use crate::target::MockTarget;

/// How a run's effect gets permission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// claim → commit (`crm/<key>`, operation `crm_upsert`, gate none).
    Commit,
    /// claim → gate → approve (`support/<key>`, operation `send_reply`).
    Gate,
}

impl Flow {
    fn namespace(self) -> &'static str {
        match self {
            Self::Commit => "crm",
            Self::Gate => "support",
        }
    }
}

/// A claim's lease: short, so a claim whose answer was lost is reclaimed soon.
const LEASE_MS: i64 = 1_000;

fn config(honours: &MockTarget, ignores: &MockTarget, approver_digest: &str) -> String {
    let target = |name: &str, base: String, honours: bool| {
        format!(
            "[[targets]]\nname = \"{name}\"\nbase_url = \"{base}\"\nhonours_idempotency_keys = {honours}\n\
             timeout_ms = 1000\nconnect_timeout_ms = 500\n[targets.retry]\nbase_ms = 20\ncap_ms = 200\n\n"
        )
    };
    format!(
        "[[tokens]]\nsubject = \"bob\"\ndigest = \"{approver_digest}\"\nscopes = [\"approver\"]\n\n\
         [dispatcher]\nlease_ms = 4000\nidle_poll_ms = 50\n\n{}{}\
         [[operations]]\nname = \"crm_upsert\"\ngate = \"none\"\n\n\
         [[operations]]\nname = \"send_reply\"\ncustomer_visible = true\n[operations.approval]\nexpiry_secs = 3600\n",
        target("mail_hon", honours.base_url(), true),
        target("mail_ign", ignores.base_url(), false),
    )
}

/// What one run of the workflow driver holds.
struct Rig {
    sup: Supervisor,
    people: People,
    rng: ChaCha8Rng,
    deadline: Instant,
    /// Requests whose answer died with a process.
    unanswered: usize,
    /// Requests sent twice at once.
    doubled: usize,
}

/// What a claim loop ended with.
enum Claimed {
    Lease(String),
    /// The run already moved on: an earlier call's answer was lost.
    Decided,
}

impl Rig {
    async fn base(&mut self) -> String {
        assert!(
            Instant::now() < self.deadline,
            "the workflow driver ran out of time"
        );
        self.sup.base().await
    }

    fn copies(&mut self) -> usize {
        let copies = if self.rng.gen_bool(0.15) { 2 } else { 1 };
        self.doubled += usize::from(copies == 2);
        copies
    }

    /// Claims until this caller owns the run, waiting out the lease of a
    /// claim whose answer was lost.
    async fn claim(&mut self, flow: Flow, key: &str) -> Claimed {
        loop {
            let (base, copies) = (self.base().await, self.copies());
            let answers = self
                .people
                .claim(&base, flow.namespace(), key, LEASE_MS, copies)
                .await;
            self.unanswered += answers.iter().filter(|(s, _)| *s == 0).count();
            self.sup.reap().await;
            let won: Vec<&Value> = answers
                .iter()
                .filter(|(_, b)| b["claimed"] == true)
                .map(|(_, b)| b)
                .collect();
            assert!(won.len() <= 1, "{key} claimed twice at once: {answers:?}");
            if let Some(win) = won.first() {
                return Claimed::Lease(win["lease"].as_str().unwrap().to_owned());
            }
            for (status, body) in &answers {
                assert!(
                    matches!(status, 0 | 200),
                    "{key}: claim answered {status} {body}"
                );
                if matches!(
                    body["state"].as_str(),
                    Some("approved" | "awaiting_human" | "completed")
                ) {
                    return Claimed::Decided;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Drives `n` runs one after another, alternating the two targets.
    async fn drive(&mut self, flow: Flow, n: usize) -> Vec<Item> {
        let mut items = Vec::new();
        for i in 0..n {
            let key = format!("k{i:05}");
            let (mode, target) = match i % 2 {
                0 => (Mode::Honours, "mail_hon"),
                _ => (Mode::Ignores, "mail_ign"),
            };
            match flow {
                Flow::Commit => self.commit_flow(&key, target).await,
                Flow::Gate => self.gate_flow(&key, target).await,
            }
            let namespace = flow.namespace();
            items.push(Item {
                namespace: namespace.into(),
                key: format!("{namespace}:{key}:reply"),
                run_key: key,
                mode,
                acked: true,
            });
        }
        items
    }

    /// Claim → commit, until the run is `approved` (or further).
    async fn commit_flow(&mut self, key: &str, target: &str) {
        loop {
            let Claimed::Lease(lease) = self.claim(Flow::Commit, key).await else {
                return;
            };
            let base = self.base().await;
            let (status, body) = self.people.commit(&base, key, &lease, target).await;
            self.sup.reap().await;
            match (status, body["state"].as_str()) {
                (200, _) | (409, Some("approved" | "completed")) => return,
                (0, _) => self.unanswered += 1,
                (409, Some("processing")) => {} // the lease expired first: claim again
                _ => panic!("{key}: commit answered {status} {body}"),
            }
        }
    }

    /// Claim → gate → approve, until the decision is answered.
    async fn gate_flow(&mut self, key: &str, target: &str) {
        let Claimed::Lease(lease) = self.claim(Flow::Gate, key).await else {
            panic!("{key}: only the decision is armed, yet the claim's answer was lost")
        };
        let base = self.base().await;
        let (status, gate) = self.people.gate(&base, key, &lease, target).await;
        assert_eq!(status, 200, "{key}: gate {gate}");
        let challenge = gate["challenge_id"].as_str().unwrap().to_owned();
        loop {
            let (base, copies) = (self.base().await, self.copies());
            let statuses = self.people.approve(&base, &challenge, copies).await;
            self.unanswered += statuses.iter().filter(|s| **s == 0).count();
            self.sup.reap().await;
            assert!(
                statuses.iter().all(|s| matches!(s, 0 | 200 | 409)),
                "{key}: {statuses:?}"
            );
            let approved = statuses.iter().filter(|s| **s == 200).count();
            assert!(approved <= 1, "{key} approved twice: {statuses:?}");
            if approved == 1 {
                return;
            }
            assert!(
                !statuses.contains(&409),
                "{key}: used before any approval was answered: {statuses:?}"
            );
        }
    }
}

async fn workflow_run(backend: Backend, point: &'static str, flow: Flow) {
    let started = Instant::now();
    let (honours, ignores) = (MockTarget::start().await, MockTarget::start().await);
    honours.honour_keys("idempotency-key", true);
    let (approver, entry) = token("bob", &[Scope::Approver]);
    let db = TestDb::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let extra = config(&honours, &ignores, &entry.digest);
    let (config, workflow) = write_config_with(dir.path(), &db.url, &extra);
    let n = 2 * events();
    let budget = crash_budget();
    let seed = 0xa99 ^ n as u64 ^ point.len() as u64;
    let spread = (2 * n / budget) as u64;
    let plan = CrashPlan {
        point: Some(point),
        spread,
        budget,
        seed,
    };
    let mut rig = Rig {
        sup: Supervisor::new(&config, dir.path(), &db.url, plan),
        people: People::new(workflow, approver),
        rng: ChaCha8Rng::seed_from_u64(seed),
        deadline: Instant::now() + Duration::from_secs(300),
        unanswered: 0,
        doubled: 0,
    };
    let base = rig.base().await;
    rig.people.login(&base).await;

    let items = rig.drive(flow, n).await;
    rig.sup.settle(Duration::from_secs(60)).await;
    rig.sup.stop().await;

    let sup = &rig.sup;
    assert!(
        !sup.crashes.is_empty(),
        "no generation ever reached {point}"
    );
    let effects = db::count(
        &db.url,
        "SELECT COUNT(*) FROM effects WHERE effect_type = 'reply'",
    )
    .await;
    assert_eq!(effects, n as i64, "one effect per run");
    if flow == Flow::Gate {
        let consumed = db::count(
            &db.url,
            "SELECT COUNT(*) FROM challenges WHERE state = 'approved'",
        )
        .await;
        assert_eq!(consumed, n as i64, "every challenge consumed once");
    }
    let honoured = check(&db.url, &items, Mode::Honours, &honours, &sup.crashes).await;
    let ignored = check(&db.url, &items, Mode::Ignores, &ignores, &sup.crashes).await;
    report(&json!({
        "point": point,
        "flow": format!("{flow:?}").to_lowercase(),
        "backend": format!("{backend:?}").to_lowercase(),
        "events_per_target": n / 2,
        "unanswered": rig.unanswered,
        "doubled": rig.doubled,
        "crashes": sup.crashes.len(),
        "generations": sup.generations,
        "in_flight_at_death": sup.crashes.iter().map(|c| c.in_flight.len()).sum::<usize>(),
        "honours_keys": honoured,
        "ignores_keys": ignored,
        "seconds": started.elapsed().as_secs_f64().round(),
    }));
}

macro_rules! workflow_points {
    ($($name:ident: $point:literal by $flow:ident;)+) => {
        $(
            mod $name {
                use super::{workflow_run, Flow};
                use crate::harness::Backend;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    workflow_run(Backend::Sqlite, $point, Flow::$flow).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    workflow_run(Backend::Postgres, $point, Flow::$flow).await
                }
            }
        )+
    };
}

workflow_points! {
    after_claim: "after_claim" by Commit;
    after_effect_insert: "after_effect_insert" by Commit;
    approval_decide: "approval_decide" by Gate;
}
