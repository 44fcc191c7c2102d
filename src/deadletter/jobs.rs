//! Bulk replay jobs: an explicit selection frozen into items when the job is
//! created, worked item by item under a rate limit by one runner at a time.
//!
//! A job is `running` (a runner may lease it), `stopped` (an operator halted
//! it between items, or it waits for a second operator to start it; `resume`
//! makes it running again) or `completed`. Each
//! item records its own outcome in the transaction that replays it, so a
//! stopped or crashed job reports exactly which items ran.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::fix::Fix;
use crate::clock::Millis;

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Items are being worked (or wait for a runner).
    Running,
    /// Halted between items by an operator.
    Stopped,
    /// Every item was worked.
    Completed,
}

/// Where an item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ItemState {
    /// Not worked yet.
    Pending,
    /// Replayed: its run moved out of `dead_lettered`.
    Replayed,
    /// Refused (already resolved, run not dead-lettered, needs approval…).
    Refused,
}

macro_rules! named {
    ($ty:ty { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// The stored name.
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $name),+ }
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($name => Ok(Self::$variant),)+
                    other => Err(format!("unknown {} {other:?}", stringify!($ty))),
                }
            }
        }
    };
}

named!(JobState { Running => "running", Stopped => "stopped", Completed => "completed" });
named!(ItemState { Pending => "pending", Replayed => "replayed", Refused => "refused" });

/// A change of a job's or an item's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobMove {
    /// An operator halts a running job between items.
    Stop,
    /// An operator lets a stopped job run again.
    Resume,
    /// Its runner finished the last item.
    Complete,
}

impl JobMove {
    /// The move's rule.
    pub fn rule(self) -> crate::lifecycle::Rule<JobState> {
        use JobState::{Completed, Running, Stopped};
        let (from, to): (&'static [JobState], &'static [JobState]) = match self {
            Self::Stop => (&[Running], &[Stopped]),
            Self::Resume => (&[Stopped], &[Running]),
            Self::Complete => (&[Running], &[Completed]),
        };
        crate::lifecycle::Rule { from, to }
    }

    /// An item is worked once: `pending` to `replayed` or `refused`.
    pub fn item() -> crate::lifecycle::Rule<ItemState> {
        crate::lifecycle::Rule {
            from: &[ItemState::Pending],
            to: &[ItemState::Replayed, ItemState::Refused],
        }
    }
}

impl crate::lifecycle::Stored for JobState {
    fn stored(self) -> &'static str {
        self.as_str()
    }
}

impl crate::lifecycle::Stored for ItemState {
    fn stored(self) -> &'static str {
        self.as_str()
    }
}

/// A job to create: the frozen selection and its dry-run summary.
#[derive(Debug, Clone)]
pub struct NewReplayJob {
    /// Stable id (UUID v7).
    pub id: String,
    /// The operator.
    pub created_by: String,
    /// Why (recorded with every replay).
    pub reason: String,
    /// Items per second.
    pub rate_per_sec: i64,
    /// How the selection was given (`{"ids": …}` or `{"filter": …}`).
    pub selection: Value,
    /// The dry-run summary at creation.
    pub summary: Value,
    /// The dead letters, in the order they will be worked.
    pub dead_letter_ids: Vec<String>,
    /// It replays an operation listed in `dead_letters.four_eyes`: it is
    /// created stopped, and only another operator may start it.
    pub four_eyes: bool,
    /// Replay after a fix: the correction each item's replay sends.
    pub fix: Option<Fix>,
}

/// Counts of a job's items.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Progress {
    /// Items in the job.
    pub total: i64,
    /// Replayed.
    pub replayed: i64,
    /// Refused.
    pub refused: i64,
    /// Not worked yet.
    pub pending: i64,
}

/// A job as stored, with its progress.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayJob {
    /// Stable id.
    pub id: String,
    /// Where it is.
    pub state: JobState,
    /// The operator who created it.
    pub created_by: String,
    /// Why.
    pub reason: String,
    /// Items per second.
    pub rate_per_sec: i64,
    /// How the selection was given.
    pub selection: Value,
    /// The dry-run summary at creation.
    pub summary: Value,
    /// Item counts.
    pub progress: Progress,
    /// The runner working it, while leased.
    pub lease_owner: Option<String>,
    /// When that lease ends.
    pub lease_expires_at: Option<Millis>,
    /// Who changed its state last (creator, stopper, resumer).
    pub changed_by: String,
    /// When it was created.
    pub created_at: Millis,
    /// When it last changed.
    pub updated_at: Millis,
    /// When its last item was worked.
    pub finished_at: Option<Millis>,
    /// It waits for, or was started by, a second operator.
    pub four_eyes: bool,
    /// The second operator who started a four-eyes job.
    pub started_by: Option<String>,
    /// Replay after a fix: the correction each item's replay sends.
    pub fix: Option<Fix>,
}

/// Where a job's fix is kept: beside the recorded selection, in the same
/// JSON column (no schema change), under this key.
const FIX_KEY: &str = "fix";

/// The selection column's value: the recorded selection with the job's
/// fix beside it.
pub fn stored_selection(selection: &Value, fix: Option<&Fix>) -> Value {
    let mut stored = selection.clone();
    if let (Some(fix), Some(map)) = (fix, stored.as_object_mut()) {
        map.insert(FIX_KEY.into(), fix.to_record());
    }
    stored
}

/// The selection column's value read back: the recorded selection and
/// the job's fix.
///
/// # Errors
/// Why the stored fix cannot be read.
pub fn split_selection(mut stored: Value) -> Result<(Value, Option<Fix>), String> {
    let fix = match stored.as_object_mut().and_then(|m| m.remove(FIX_KEY)) {
        Some(record) => Some(Fix::from_record(&record)?),
        None => None,
    };
    Ok((stored, fix))
}

/// One item of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct JobItem {
    /// The job.
    pub job_id: String,
    /// Position, from 1.
    pub seq: i64,
    /// The dead letter it replays.
    pub dead_letter_id: String,
    /// Where it is.
    pub state: ItemState,
    /// The run's new state when replayed, or why it was refused.
    pub outcome: Option<String>,
    /// When it was worked.
    pub finished_at: Option<Millis>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip() {
        for s in [JobState::Running, JobState::Stopped, JobState::Completed] {
            assert_eq!(s.as_str().parse::<JobState>().unwrap(), s);
        }
        for s in [ItemState::Pending, ItemState::Replayed, ItemState::Refused] {
            assert_eq!(s.as_str().parse::<ItemState>().unwrap(), s);
        }
        assert!("done".parse::<JobState>().is_err());
    }
}
