//! The effects' move table: every state change an effect can make, and
//! the only ones the outbox's statements make (each guarded by its
//! move's start states).
//!
//! ```text
//! pending | unknown              -> sending     lease (unknown: reconcile by probe)
//! sending                        -> pending | completed | unknown | failed
//!                                                record a verdict
//! sending                        -> unknown     the lease expired (the dispatcher died)
//! pending                        -> cancelled   cancel while still pending
//! pending | failed | unknown     -> pending     replay (same key, fresh budget)
//! ```

use super::EffectState::{self, Cancelled, Completed, Failed, Pending, Sending, Unknown};
use crate::lifecycle::{Rule, Stored};

/// A change of an effect's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffectMove {
    /// A dispatcher leases a due effect.
    Lease,
    /// A dispatcher records the verdict of its attempt.
    Record,
    /// A dead dispatcher's lease ran out: the effect may have been sent.
    Expire,
    /// An operator or workflow cancels it before it is sent.
    Cancel,
    /// A replay re-queues an unfinished effect under the same key.
    Requeue,
}

impl EffectMove {
    /// The move's rule.
    pub fn rule(self) -> Rule<EffectState> {
        let (from, to): (&'static [EffectState], &'static [EffectState]) = match self {
            Self::Lease => (&[Pending, Unknown], &[Sending]),
            Self::Record => (&[Sending], &[Pending, Completed, Unknown, Failed]),
            Self::Expire => (&[Sending], &[Unknown]),
            Self::Cancel => (&[Pending], &[Cancelled]),
            Self::Requeue => (&[Pending, Failed, Unknown], &[Pending]),
        };
        Rule { from, to }
    }
}

impl Stored for EffectState {
    fn stored(self) -> &'static str {
        self.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_effect_never_moves_again() {
        for mv in [
            EffectMove::Lease,
            EffectMove::Record,
            EffectMove::Expire,
            EffectMove::Cancel,
            EffectMove::Requeue,
        ] {
            for to in EffectState::ALL {
                assert!(
                    mv.rule().check(Completed, to).is_err(),
                    "{mv:?} moved a completed effect"
                );
                assert!(
                    mv.rule().check(Cancelled, to).is_err(),
                    "{mv:?} moved a cancelled effect"
                );
            }
        }
    }

    #[test]
    fn an_expired_lease_never_goes_back_to_pending() {
        assert!(EffectMove::Expire.rule().check(Sending, Pending).is_err());
        assert_eq!(
            EffectMove::Expire.rule().check(Sending, Unknown),
            Ok(Unknown)
        );
        assert_eq!(
            EffectMove::Lease.rule().sql_guard(),
            "('pending', 'unknown')"
        );
    }
}
