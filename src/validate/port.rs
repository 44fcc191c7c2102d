//! The AI-output contract's storage port: each posted model output
//! recorded as the run's next attempt, and the latest one read back.

use async_trait::async_trait;
use serde_json::Value;

use super::Violation;
use crate::clock::Millis;
use crate::ledger::storage::Result;
use crate::ledger::{IdempotencyKey, Moved, Namespace, OwnerCall};

/// A model output to record.
#[derive(Debug, Clone)]
pub struct NewOutput {
    /// The operation whose schema judged it.
    pub operation: String,
    /// The output as posted.
    pub output: Value,
    /// Its violations (empty: valid).
    pub violations: Vec<Violation>,
    /// Model provider class (`hosted`, `self_hosted`, …).
    pub provider_class: String,
    /// Model name.
    pub model: String,
    /// Model revision.
    pub revision: String,
}

/// A recorded model output.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredOutput {
    /// 1 for the first posted output of the run.
    pub attempt: i64,
    /// The operation.
    pub operation: String,
    /// Whether it satisfied the schema.
    pub valid: bool,
    /// The output.
    pub output: Value,
    /// Its violations.
    pub violations: Value,
    /// Model provider class.
    pub provider_class: String,
    /// Model name.
    pub model: String,
    /// Model revision.
    pub revision: String,
    /// When it was posted.
    pub created_at: Millis,
}

/// What recording an output did.
#[derive(Debug, Clone)]
pub struct OutputRecorded {
    /// Which attempt this was.
    pub attempt: i64,
    /// The run afterwards (`failed_terminal` when the repairs ran out).
    pub moved: Moved,
    /// The repair bound was passed and the run failed for good.
    pub exhausted: bool,
}

/// Storage calls of recorded model output.
#[async_trait]
pub trait OutputStore: Send + Sync + std::fmt::Debug {
    /// Records a model output under the owner's lease. An invalid one
    /// when no repair is left (the first output plus `max_repairs`
    /// repairs all failed) moves the run to `failed_terminal` in the same
    /// transaction.
    ///
    /// # Errors
    /// [`StoreError::LostOwnership`](crate::ledger::storage::StoreError::LostOwnership) when the lease is not live and current.
    async fn record_output(
        &self,
        call: &OwnerCall,
        output: &NewOutput,
        max_repairs: u32,
    ) -> Result<OutputRecorded>;

    /// The run's most recent model output.
    ///
    /// # Errors
    /// On database failure.
    async fn latest_output(
        &self,
        namespace: &Namespace,
        key: &IdempotencyKey,
    ) -> Result<Option<StoredOutput>>;
}
