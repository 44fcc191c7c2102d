//! The run lifecycle: seven states and the only moves between them.
//!
//! [`Move`] names every allowed move of DESIGN.md §2; [`Move::from_states`]
//! is the single table both the domain check ([`RunState::apply`]) and the
//! stores' SQL guards (`WHERE state IN (…)`) are built from, so the rule is
//! written once.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Claimed; its owner is working under a live lease.
    Processing,
    /// Waiting for a person's decision on an approval challenge.
    AwaitingHuman,
    /// Cleared to act: its effects are in the outbox.
    Approved,
    /// Done; duplicates get the stored result.
    Completed,
    /// Failed in a way a later claim with the same payload may retry.
    FailedRetryable,
    /// Finished without success; final.
    FailedTerminal,
    /// Automatic work stopped; an operator decides.
    DeadLettered,
}

impl RunState {
    /// Every state, in lifecycle order.
    pub const ALL: [Self; 7] = [
        Self::Processing,
        Self::AwaitingHuman,
        Self::Approved,
        Self::Completed,
        Self::FailedRetryable,
        Self::FailedTerminal,
        Self::DeadLettered,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Processing => "processing",
            Self::AwaitingHuman => "awaiting_human",
            Self::Approved => "approved",
            Self::Completed => "completed",
            Self::FailedRetryable => "failed_retryable",
            Self::FailedTerminal => "failed_terminal",
            Self::DeadLettered => "dead_lettered",
        }
    }

    /// Applies a move.
    ///
    /// # Errors
    /// [`InvalidTransition`] when the move does not start from this state.
    pub fn apply(self, mv: Move) -> Result<RunState, InvalidTransition> {
        if mv.from_states().contains(&self) {
            Ok(mv.to_state())
        } else {
            Err(InvalidTransition { from: self, mv })
        }
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored state name that is not one of the seven.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown run state {0:?}")]
pub struct UnknownState(pub String);

impl FromStr for RunState {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

/// Every allowed move (DESIGN.md §2). Anything not listed is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Move {
    /// `(none) -> processing`.
    Claim,
    /// `processing -> processing` after lease expiry, or
    /// `failed_retryable -> processing` with the same payload hash.
    Reclaim,
    /// `processing -> processing`: the owner extends its lease.
    Renew,
    /// `processing -> approved`: the owner finishes with effects queued.
    Approve,
    /// `processing -> completed`.
    Complete,
    /// `processing -> failed_retryable`.
    FailRetryable,
    /// `processing -> failed_terminal`.
    FailTerminal,
    /// `processing -> awaiting_human`, only through the gate endpoint.
    Gate,
    /// `awaiting_human -> approved`: an approval was consumed.
    ApprovalConsumed,
    /// `awaiting_human -> failed_terminal`: a person rejected.
    ApprovalRejected,
    /// `awaiting_human -> dead_lettered`: nobody decided in time.
    ApprovalExpired,
    /// `approved -> completed`: the dispatcher finished the last effect.
    EffectsCompleted,
    /// `approved -> dead_lettered`: an effect failed for good.
    EffectsFailed,
    /// `approved -> failed_terminal`: the target answered with a business
    /// rejection (DESIGN.md §4's outcome table; see docs/decisions.md).
    EffectRejected,
    /// `failed_retryable -> dead_lettered`: the reclaim budget is spent.
    ReclaimBudgetExhausted,
    /// `dead_lettered -> approved`: operator replay of an ungated operation.
    ReplayUngated,
    /// `dead_lettered -> awaiting_human`: operator replay of a gated operation.
    ReplayGated,
    /// `dead_lettered -> failed_terminal`: operator resolution with a note.
    Resolve,
    /// `processing -> failed_retryable` without a lease: the workflow's error
    /// handler reported a retryable failure by `execution_ref`.
    ExecutionFailed,
    /// `processing -> dead_lettered` without a lease: the workflow's error
    /// handler reported a failure it does not want retried (see
    /// docs/decisions.md: DESIGN.md §2 lists no move out of `processing`
    /// into `dead_lettered`, §7 asks for it).
    WorkflowError,
    /// `dead_lettered -> failed_retryable`: operator release of a run that
    /// stopped before it queued any effect (a workflow error, a stranded
    /// run, a spent reclaim budget); the workflow's re-run reclaims it
    /// under the same key, with its reclaim budget restarted
    /// (docs/decisions.md).
    ReplayRelease,
    /// `processing -> dead_lettered`: the recovery sweeper found the run's
    /// lease expired more than `stranded_after` ago, and nobody reclaimed it.
    Stranded,
    /// `processing -> dead_lettered` by the lease owner: the Idempotency-Key
    /// proxy sent the request and its outcome is unknown (DESIGN.md §10);
    /// an operator decides.
    OutcomeUnknown,
}

impl Move {
    /// The states this move may start from.
    pub fn from_states(self) -> &'static [RunState] {
        use RunState::*;
        match self {
            Self::Claim => &[],
            Self::Reclaim => &[Processing, FailedRetryable],
            Self::Renew
            | Self::Approve
            | Self::Complete
            | Self::FailRetryable
            | Self::FailTerminal
            | Self::Gate
            | Self::ExecutionFailed
            | Self::WorkflowError
            | Self::Stranded
            | Self::OutcomeUnknown => &[Processing],
            Self::ApprovalConsumed | Self::ApprovalRejected | Self::ApprovalExpired => {
                &[AwaitingHuman]
            }
            Self::EffectsCompleted | Self::EffectsFailed | Self::EffectRejected => &[Approved],
            Self::ReclaimBudgetExhausted => &[FailedRetryable],
            Self::ReplayUngated | Self::ReplayGated | Self::Resolve | Self::ReplayRelease => {
                &[DeadLettered]
            }
        }
    }

    /// The state this move ends in.
    pub fn to_state(self) -> RunState {
        use RunState::*;
        match self {
            Self::Claim | Self::Reclaim | Self::Renew => Processing,
            Self::Approve | Self::ApprovalConsumed | Self::ReplayUngated => Approved,
            Self::Complete | Self::EffectsCompleted => Completed,
            Self::FailRetryable | Self::ExecutionFailed | Self::ReplayRelease => FailedRetryable,
            Self::FailTerminal | Self::ApprovalRejected | Self::Resolve | Self::EffectRejected => {
                FailedTerminal
            }
            Self::Gate | Self::ReplayGated => AwaitingHuman,
            Self::ApprovalExpired
            | Self::EffectsFailed
            | Self::ReclaimBudgetExhausted
            | Self::WorkflowError
            | Self::Stranded
            | Self::OutcomeUnknown => DeadLettered,
        }
    }

    /// The audit event name of the move.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Claim => "claim",
            Self::Reclaim => "reclaim",
            Self::Renew => "renew",
            Self::Approve => "approve",
            Self::Complete => "complete",
            Self::FailRetryable => "fail_retryable",
            Self::FailTerminal => "fail_terminal",
            Self::Gate => "gate",
            Self::ApprovalConsumed => "approval_consumed",
            Self::ApprovalRejected => "approval_rejected",
            Self::ApprovalExpired => "approval_expired",
            Self::EffectsCompleted => "effects_completed",
            Self::EffectsFailed => "effects_failed",
            Self::EffectRejected => "effect_rejected",
            Self::ReclaimBudgetExhausted => "reclaim_budget_exhausted",
            Self::ReplayUngated => "replay",
            Self::ReplayGated => "replay_gated",
            Self::Resolve => "resolve",
            Self::ExecutionFailed => "execution_failed",
            Self::WorkflowError => "workflow_error",
            Self::ReplayRelease => "replay_release",
            Self::Stranded => "stranded",
            Self::OutcomeUnknown => "outcome_unknown",
        }
    }

    /// A SQL list of the start states, e.g. `('processing')`, for guards.
    pub fn sql_guard(self) -> String {
        let names: Vec<String> = self
            .from_states()
            .iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        format!("({})", names.join(", "))
    }
}

/// A move that does not start from the run's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a run in state {from} cannot {}", mv.as_str())]
pub struct InvalidTransition {
    /// The state the run was in.
    pub from: RunState,
    /// The move that was refused.
    pub mv: Move,
}

#[cfg(test)]
mod tests {
    use super::RunState::*;
    use super::*;

    /// DESIGN.md §2, written out literally as (from, to) pairs.
    const ALLOWED: &[(RunState, RunState)] = &[
        (Processing, Processing),
        (FailedRetryable, Processing),
        (Processing, Approved),
        (Processing, Completed),
        (Processing, FailedRetryable),
        (Processing, FailedTerminal),
        (Processing, AwaitingHuman),
        (AwaitingHuman, Approved),
        (AwaitingHuman, FailedTerminal),
        (AwaitingHuman, DeadLettered),
        (Approved, Completed),
        (Approved, DeadLettered),
        // DESIGN.md §4: a business rejection ends the run failed_terminal.
        (Approved, FailedTerminal),
        (FailedRetryable, DeadLettered),
        (DeadLettered, Approved),
        (DeadLettered, AwaitingHuman),
        (DeadLettered, FailedTerminal),
        // DESIGN.md §7: a workflow's error handler fails a run by execution
        // ref; not retryable means an operator decides (docs/decisions.md).
        // DESIGN.md §2: the recovery sweeper dead-letters a stranded run.
        (Processing, DeadLettered),
        // A replayed workflow error goes back to the workflow's re-run
        // under the same key (docs/decisions.md).
        (DeadLettered, FailedRetryable),
    ];

    const MOVES: [Move; 23] = [
        Move::Claim,
        Move::Reclaim,
        Move::Renew,
        Move::Approve,
        Move::Complete,
        Move::FailRetryable,
        Move::FailTerminal,
        Move::Gate,
        Move::ApprovalConsumed,
        Move::ApprovalRejected,
        Move::ApprovalExpired,
        Move::EffectsCompleted,
        Move::EffectsFailed,
        Move::EffectRejected,
        Move::ReclaimBudgetExhausted,
        Move::ReplayUngated,
        Move::ReplayGated,
        Move::Resolve,
        Move::ExecutionFailed,
        Move::WorkflowError,
        Move::ReplayRelease,
        Move::Stranded,
        Move::OutcomeUnknown,
    ];

    #[test]
    fn every_move_is_in_the_design_table_and_every_pair_is_reachable() {
        let mut reached = std::collections::HashSet::new();
        for mv in MOVES {
            for &from in mv.from_states() {
                let to = from.apply(mv).unwrap();
                assert!(ALLOWED.contains(&(from, to)), "{from} -> {to} via {mv:?}");
                reached.insert((from, to));
            }
        }
        for pair in ALLOWED {
            assert!(reached.contains(pair), "{pair:?} has no move");
        }
    }

    #[test]
    fn every_other_move_is_refused() {
        for mv in MOVES {
            for from in RunState::ALL {
                if !mv.from_states().contains(&from) {
                    assert_eq!(from.apply(mv), Err(InvalidTransition { from, mv }));
                }
            }
        }
        for from in [Completed, FailedTerminal] {
            assert!(
                MOVES.iter().all(|mv| from.apply(*mv).is_err()),
                "{from} is final"
            );
        }
    }

    #[test]
    fn names_round_trip_and_guards_list_start_states() {
        for state in RunState::ALL {
            assert_eq!(state.as_str().parse::<RunState>().unwrap(), state);
        }
        assert!("finished".parse::<RunState>().is_err());
        assert_eq!(Move::WorkflowError.sql_guard(), "('processing')");
        assert_eq!(Move::ReplayRelease.sql_guard(), "('dead_lettered')");
        assert_eq!(Move::Stranded.sql_guard(), "('processing')");
        assert_eq!(
            Move::ReclaimBudgetExhausted.sql_guard(),
            "('failed_retryable')"
        );
        assert_eq!(
            Move::Reclaim.sql_guard(),
            "('processing', 'failed_retryable')"
        );
    }
}
