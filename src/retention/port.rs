//! The retention sweeper's storage port: which terminal runs are due,
//! every row that belongs to one, slimming archived runs to tombstones,
//! and scrubbing verbatim bodies that are no longer needed.

use async_trait::async_trait;

use crate::ledger::storage::Result;
use crate::retention::{RunMaterial, RunStamp, Selection};

/// Storage calls of retention.
#[async_trait]
pub trait RetentionStore: Send + Sync + std::fmt::Debug {
    /// Terminal runs due for archiving (`tombstones`: slimmed runs due for
    /// deletion) under a selection, oldest first. Never an active run.
    ///
    /// # Errors
    /// On database failure.
    async fn retention_candidates(
        &self,
        sel: &Selection,
        tombstones: bool,
    ) -> Result<Vec<RunStamp>>;

    /// Every stored row of a run and of the tables that belong to it.
    ///
    /// # Errors
    /// On database failure.
    async fn run_material(&self, stamp: &RunStamp) -> Result<Option<RunMaterial>>;

    /// Slims archived runs to tombstones by compare-and-set on their
    /// version, deleting the rows the material holds, in one transaction.
    ///
    /// # Errors
    /// On database failure; nothing is slimmed.
    async fn slim_runs(&self, runs: &[RunMaterial], archive_file: &str, now: i64) -> Result<u64>;

    /// Replaces up to `limit` verbatim bodies of finished effects (in
    /// namespaces with redaction rules) by their redacted form.
    ///
    /// # Errors
    /// On database failure.
    async fn scrub_effect_bodies(&self, limit: i64, now: i64) -> Result<u64>;

    /// Up to `limit` resolved dead letters whose retention deadline passed
    /// by `now`, each as its stored row.
    ///
    /// # Errors
    /// On database failure.
    async fn expired_dead_letters(&self, now: i64, limit: i64) -> Result<Vec<serde_json::Value>>;

    /// Deletes these resolved dead letters (still past their deadline at
    /// `now`), recording the archive file in the `oncegate / retention`
    /// chain, in one transaction; returns how many went.
    ///
    /// # Errors
    /// On database failure; nothing is deleted.
    async fn remove_dead_letters(
        &self,
        ids: &[String],
        archive_file: &str,
        now: i64,
    ) -> Result<u64>;

    /// Erases the raw model output of finished runs (`completed`,
    /// `failed_terminal`) recorded before `cutoff`, keeping its validity,
    /// violations and model identity; returns how many.
    ///
    /// # Errors
    /// On database failure.
    async fn expire_outputs(&self, cutoff: i64) -> Result<u64>;

    /// Forgets the webhook bodies whose window closed by `now`; returns
    /// how many.
    ///
    /// # Errors
    /// On database failure.
    async fn forget_ingress_bodies(&self, now: i64) -> Result<u64>;

    /// Deletes up to `limit` deliveries-log entries, then up to `limit`
    /// `duplicate_of` raw events no run took up, received before
    /// `before`; returns how many of each.
    ///
    /// # Errors
    /// On database failure.
    async fn forget_deliveries(&self, before: i64, limit: i64) -> Result<(u64, u64)>;
}
