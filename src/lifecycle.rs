//! The shape of every move table: which states a move starts from and
//! which it may end in. Runs have theirs in [`crate::ledger::Move`];
//! effects ([`crate::outbox::EffectMove`]), approval challenges
//! ([`crate::approval::ChallengeMove`]) and bulk replay jobs and their
//! items ([`crate::deadletter::JobMove`]) use this one. Each statement
//! that moves a row guards itself with its move's [`Rule::sql_guard`], so
//! the SQL cannot drift from the table.

/// A lifecycle state as stored.
pub trait Stored: Copy + PartialEq + std::fmt::Debug + 'static {
    /// The stored name.
    fn stored(self) -> &'static str;
}

/// One move: the states it starts from and those it may end in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule<S: 'static> {
    /// The states the move starts from.
    pub from: &'static [S],
    /// The states it may end in.
    pub to: &'static [S],
}

/// A move that does not start from the row's state or end where it may.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot move from {from} to {to}")]
pub struct Refused {
    /// The state the row was in.
    pub from: &'static str,
    /// The state asked for.
    pub to: &'static str,
}

impl<S: Stored> Rule<S> {
    /// Checks a move from `from` to `to`.
    ///
    /// # Errors
    /// [`Refused`] when the table does not allow it.
    pub fn check(&self, from: S, to: S) -> Result<S, Refused> {
        if self.from.contains(&from) && self.to.contains(&to) {
            Ok(to)
        } else {
            Err(Refused {
                from: from.stored(),
                to: to.stored(),
            })
        }
    }

    /// The start states as a SQL list, e.g. `('pending', 'unknown')`.
    pub fn sql_guard(&self) -> String {
        let names: Vec<String> = self
            .from
            .iter()
            .map(|s| format!("'{}'", s.stored()))
            .collect();
        format!("({})", names.join(", "))
    }

    /// The one state the move ends in, spelled for SQL (`'sending'`).
    ///
    /// # Panics
    /// When the move may end in several states (a programming error at
    /// statement-building time).
    pub fn sql_target(&self) -> String {
        assert_eq!(self.to.len(), 1, "{:?} ends in several states", self.to);
        format!("'{}'", self.to[0].stored())
    }
}
