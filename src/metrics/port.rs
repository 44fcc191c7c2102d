//! The metrics' storage port: the gauges read at scrape time and the
//! console dashboard's counts. Every query walks an index, so a scrape
//! stays cheap as the tables grow.

use async_trait::async_trait;

use crate::clock::Millis;
use crate::ledger::storage::Result;

/// Unresolved dead letters of one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenDeadLetters {
    /// The runs' namespace.
    pub namespace: String,
    /// How many are unresolved.
    pub count: i64,
    /// Age of the oldest, in milliseconds.
    pub oldest_age_ms: i64,
}

/// Dead letters recorded in one hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HourCount {
    /// Hours after the window's start (0 is the first hour).
    pub hour: i64,
    /// How many.
    pub count: i64,
}

/// Storage calls behind the gauges and the dashboard (all read-only).
#[async_trait]
pub trait GaugeStore: Send + Sync + std::fmt::Debug {
    /// Runs still in `processing` whose lease expired and that nobody
    /// reclaimed, counted per namespace. "Expired" uses the same clock as
    /// the claim's reclaim check (the database's on PostgreSQL).
    ///
    /// # Errors
    /// On database failure.
    async fn stale_processing(&self) -> Result<Vec<(String, i64)>>;

    /// Unresolved dead letters per namespace, with the oldest one's age.
    ///
    /// # Errors
    /// On database failure.
    async fn open_dead_letters(&self) -> Result<Vec<OpenDeadLetters>>;
    /// Outstanding effects by target and state.
    ///
    /// # Errors
    /// On database failure.
    async fn backlog(&self) -> Result<Vec<(String, String, i64)>>;

    /// Every kill-switch scope ever set: `(scope, enabled)`.
    ///
    /// # Errors
    /// On database failure.
    async fn switch_states(&self) -> Result<Vec<(String, bool)>>;

    /// Every target that ever left `healthy`: `(target, state, total
    /// milliseconds paused or disabled, the current stretch included)`.
    ///
    /// # Errors
    /// On database failure.
    async fn target_health_states(&self) -> Result<Vec<(String, String, i64)>>;

    /// How long people took to decide (approve or reject) the challenges
    /// decided since `since`, in milliseconds, most recent first, at most
    /// `limit` of them.
    ///
    /// # Errors
    /// On database failure.
    async fn gate_waits(&self, since: Millis, limit: i64) -> Result<Vec<i64>>;

    /// Dead letters recorded since `since`, counted per hour (hours with
    /// none are absent).
    ///
    /// # Errors
    /// On database failure.
    async fn dead_letters_by_hour(&self, since: Millis) -> Result<Vec<HourCount>>;

    /// How many approval challenges wait for a decision.
    ///
    /// # Errors
    /// On database failure.
    async fn pending_challenges(&self) -> Result<i64>;
}
