//! The simulated store's runs: real [`Run`] rows, moved only through the
//! real move table.
//!
//! This is the in-memory twin of the backends' claim and compare-and-set
//! statements (`src/db/sql/runs.rs`): the same reclaim rule and reclaim
//! budget (the ledger's own [`reclaimable`] and [`Recovery`] with the
//! service's default rules, which the statements spell as SQL), the same
//! owner guard (owner, version and a live lease), the same answers
//! ([`ClaimOutcome::for_existing`]). Each state change goes through
//! [`RunState::apply`], so a move the design forbids stops the simulation.

use crate::clock::Millis;
use crate::ledger::{
    reclaimable, ClaimOutcome, FencingVersion, IdempotencyKey, Lease, LeaseOwner, Move, Namespace,
    PayloadHash, Recovery, Run, RunMetadata, RunState,
};

/// How long an owner's lease lives.
pub(super) const RUN_LEASE_MS: i64 = 30_000;
/// The service's recovery rules with their defaults (`[ledger]`): a
/// failed run is reclaimed at most `max_reclaims` times within
/// `retry_window`, then goes to a person.
pub(super) fn recovery() -> Recovery {
    crate::ledger::LedgerConfig::default().recovery_default()
}

/// What kind of claim a strategy makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ClaimMode {
    /// (d): an insert that wins or not; the row never moves again.
    Once,
    /// (e)–(g): the full claim with leases and reclaims.
    Leased,
}

/// The runs of one simulated store, one slot per event.
#[derive(Debug)]
pub(super) struct SimLedger {
    runs: Vec<Option<Run>>,
    owners: u64,
}

fn identity(event: usize) -> Result<(Namespace, IdempotencyKey, PayloadHash), String> {
    let key = format!("evt_{event}");
    let hash = PayloadHash::of_bytes(format!("{{\"id\":\"{key}\"}}").as_bytes());
    let namespace = Namespace::parse("lab").map_err(|e| e.to_string())?;
    let key = IdempotencyKey::parse(key).map_err(|e| e.to_string())?;
    Ok((namespace, key, hash))
}

/// A freshly claimed run (`Move::Claim`), with a lease unless the
/// strategy has none.
fn new_run(
    namespace: Namespace,
    key: IdempotencyKey,
    payload_hash: PayloadHash,
    lease: Option<Lease>,
    now: Millis,
) -> Run {
    let leased = lease.is_some();
    Run {
        namespace,
        key,
        business_key: None,
        state: Move::Claim.to_state(),
        prev_state: None,
        payload_hash,
        lease,
        lease_expires_at: leased.then_some(now + RUN_LEASE_MS),
        lease_started_at: leased.then_some(now),
        version: FencingVersion::FIRST,
        attempts: 1,
        reclaims: 0,
        budget_started_at: None,
        result: None,
        last_error: None,
        reason: None,
        metadata: RunMetadata::default(),
        claimed_by: "lab".into(),
        created_at: now,
        updated_at: now,
        archived_at: None,
    }
}

/// Applies a move through the real table and bumps the fencing version.
fn apply(run: &mut Run, mv: Move, now: Millis) -> Result<(), String> {
    let next = run.state.apply(mv).map_err(|e| e.to_string())?;
    run.prev_state = Some(run.state);
    run.state = next;
    run.version = FencingVersion::new(run.version.get() + 1).map_err(|e| e.to_string())?;
    run.updated_at = now;
    if next != RunState::Processing {
        run.lease = None;
        run.lease_expires_at = None;
    }
    Ok(())
}

impl SimLedger {
    pub(super) fn new(events: usize) -> Self {
        Self {
            runs: vec![None; events],
            owners: 0,
        }
    }

    fn next_owner(&mut self) -> Result<LeaseOwner, String> {
        self.owners += 1;
        LeaseOwner::from_hex(&format!("{:032x}", self.owners)).map_err(|e| e.to_string())
    }

    /// The atomic claim: one step, no gap between looking and inserting.
    pub(super) fn claim(
        &mut self,
        event: usize,
        now: Millis,
        mode: ClaimMode,
    ) -> Result<ClaimOutcome, String> {
        let (namespace, key, hash) = identity(event)?;
        let owner = self.next_owner()?;
        let leased = mode == ClaimMode::Leased;
        let Some(run) = self.runs[event].as_mut() else {
            let lease = Lease {
                owner,
                version: FencingVersion::FIRST,
            };
            let run = new_run(namespace, key, hash, leased.then_some(lease), now);
            self.runs[event] = Some(run.clone());
            return Ok(ClaimOutcome::Claimed {
                run,
                lease,
                reclaimed_from: None,
            });
        };
        let rules = recovery();
        if leased && run.payload_hash == hash && rules.budget_spent(run, now) {
            // The claim statement's companion: the run goes to a person.
            apply(run, Move::ReclaimBudgetExhausted, now)?;
            return Ok(ClaimOutcome::Exhausted(run.clone()));
        }
        if !(leased && reclaimable(run, &hash, now, &rules)) {
            return Ok(ClaimOutcome::for_existing(run.clone(), &hash));
        }
        let from = run.state;
        apply(run, Move::Reclaim, now)?;
        let lease = Lease {
            owner,
            version: run.version,
        };
        run.lease = Some(lease);
        run.lease_expires_at = Some(now + RUN_LEASE_MS);
        run.lease_started_at = Some(now);
        run.attempts += 1;
        run.reclaims += 1;
        Ok(ClaimOutcome::Claimed {
            run: run.clone(),
            lease,
            reclaimed_from: Some(from),
        })
    }

    /// The ingress accept of (f) and (g): claim and `processing →
    /// approved` with the effect queued, in one transaction.
    pub(super) fn claim_and_approve(
        &mut self,
        event: usize,
        now: Millis,
    ) -> Result<ClaimOutcome, String> {
        let outcome = self.claim(event, now, ClaimMode::Leased)?;
        let ClaimOutcome::Claimed {
            lease,
            reclaimed_from,
            ..
        } = outcome
        else {
            return Ok(outcome);
        };
        let run = self.runs[event]
            .as_mut()
            .ok_or("the claimed run vanished")?;
        apply(run, Move::Approve, now)?;
        Ok(ClaimOutcome::Claimed {
            run: run.clone(),
            lease,
            reclaimed_from,
        })
    }

    /// An owner's compare-and-set: `Ok(false)` when the caller no longer
    /// owns the run (another owner, a newer version, an expired lease).
    pub(super) fn finish(
        &mut self,
        event: usize,
        lease: Lease,
        mv: Move,
        now: Millis,
    ) -> Result<bool, String> {
        let Some(run) = self.runs[event].as_mut() else {
            return Ok(false);
        };
        let live = run.lease == Some(lease) && run.lease_expires_at.is_some_and(|at| at > now);
        if !live {
            return Ok(false);
        }
        apply(run, mv, now)?;
        Ok(true)
    }

    /// The dispatcher's move of an `approved` run; `Ok(false)` when the run
    /// is not `approved` any more (the store's `WHERE state = 'approved'`).
    pub(super) fn settle(&mut self, event: usize, mv: Move, now: Millis) -> Result<bool, String> {
        match self.runs[event].as_mut() {
            Some(run) if run.state == RunState::Approved => apply(run, mv, now).map(|()| true),
            _ => Ok(false),
        }
    }

    /// Whether the run is `approved`, so its effects may be sent.
    pub(super) fn approved(&self, event: usize) -> bool {
        self.state(event) == Some(RunState::Approved)
    }

    /// (d)'s naive recovery: delete the claim so a retry can claim again.
    pub(super) fn release(&mut self, event: usize) {
        self.runs[event] = None;
    }

    /// The run's state, if it exists.
    pub(super) fn state(&self, event: usize) -> Option<RunState> {
        self.runs[event].as_ref().map(|r| r.state)
    }

    /// The run's fencing version (0 before any claim).
    pub(super) fn version(&self, event: usize) -> i64 {
        self.runs[event].as_ref().map_or(0, |r| r.version.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease_of(outcome: &ClaimOutcome) -> Lease {
        match outcome {
            ClaimOutcome::Claimed { lease, .. } => *lease,
            other => panic!("not claimed: {}", other.label()),
        }
    }

    #[test]
    fn a_live_lease_keeps_others_out_and_an_expired_one_is_reclaimed() {
        let mut l = SimLedger::new(1);
        let first = lease_of(&l.claim(0, 0, ClaimMode::Leased).unwrap());
        let second = l.claim(0, RUN_LEASE_MS - 1, ClaimMode::Leased).unwrap();
        assert_eq!(second.label(), "in_flight");
        let third = l.claim(0, RUN_LEASE_MS, ClaimMode::Leased).unwrap();
        assert!(matches!(
            third,
            ClaimOutcome::Claimed {
                reclaimed_from: Some(RunState::Processing),
                ..
            }
        ));
        // The first owner lost the run: its completion is refused.
        assert!(!l
            .finish(0, first, Move::Complete, RUN_LEASE_MS + 1)
            .unwrap());
        let now = RUN_LEASE_MS + 2;
        assert!(l.finish(0, lease_of(&third), Move::Complete, now).unwrap());
        assert_eq!(
            l.claim(0, now, ClaimMode::Leased).unwrap().label(),
            "duplicate"
        );
    }

    #[test]
    fn failed_runs_are_reclaimed_until_the_budget_sends_them_to_a_person() {
        let mut l = SimLedger::new(1);
        // The first claim and `max_reclaims` reclaims.
        for attempt in 0..=recovery().max_reclaims {
            let lease = lease_of(&l.claim(0, attempt, ClaimMode::Leased).unwrap());
            assert!(l.finish(0, lease, Move::FailRetryable, attempt).unwrap());
        }
        let outcome = l.claim(0, 99, ClaimMode::Leased).unwrap();
        assert!(
            matches!(outcome, ClaimOutcome::Exhausted(_)),
            "{}",
            outcome.label()
        );
        assert_eq!(l.state(0), Some(RunState::DeadLettered));
        assert_eq!(
            l.claim(0, 100, ClaimMode::Leased).unwrap().label(),
            "finished"
        );
    }

    #[test]
    fn a_failed_run_past_the_retry_window_goes_to_a_person_at_once() {
        let mut l = SimLedger::new(1);
        let lease = lease_of(&l.claim(0, 0, ClaimMode::Leased).unwrap());
        assert!(l.finish(0, lease, Move::FailRetryable, 1).unwrap());
        let late = recovery().retry_window_ms;
        assert_eq!(
            l.claim(0, late, ClaimMode::Leased).unwrap().label(),
            "finished"
        );
        assert_eq!(l.state(0), Some(RunState::DeadLettered));
    }

    #[test]
    fn a_claim_without_states_never_reopens_until_released() {
        let mut l = SimLedger::new(1);
        lease_of(&l.claim(0, 0, ClaimMode::Once).unwrap());
        assert_eq!(
            l.claim(0, i64::MAX / 2, ClaimMode::Once).unwrap().label(),
            "in_flight"
        );
        l.release(0);
        lease_of(&l.claim(0, 1, ClaimMode::Once).unwrap());
    }

    #[test]
    fn the_real_table_refuses_what_the_design_forbids() {
        let mut l = SimLedger::new(1);
        l.claim_and_approve(0, 0).unwrap();
        assert!(l.approved(0));
        assert!(l.settle(0, Move::EffectsCompleted, 1).unwrap());
        assert!(
            !l.settle(0, Move::EffectsFailed, 2).unwrap(),
            "not approved any more"
        );
        let mut run = l.runs[0].clone().unwrap();
        assert!(
            apply(&mut run, Move::Approve, 3).is_err(),
            "completed is final"
        );
    }
}
