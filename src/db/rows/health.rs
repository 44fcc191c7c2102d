//! `target_health` rows.

use super::corrupt;
use crate::db::exec::{FromRow, Row};
use crate::ledger::storage::Result;
use crate::outbox::health::{HealthState, TargetHealth};

/// A `target_health` row.
#[derive(Debug)]
pub(crate) struct HealthRow(TargetHealth);

impl HealthRow {
    pub(crate) fn into_health(self) -> TargetHealth {
        self.0
    }
}

impl FromRow for HealthRow {
    fn from_row(row: &dyn Row) -> Result<Self> {
        let state: String = row.get("state")?;
        Ok(Self(TargetHealth {
            target: row.get("target")?,
            state: HealthState::parse(&state).map_err(corrupt)?,
            failures: row.get("failures")?,
            pauses: row.get("pauses")?,
            paused_at: row.get("paused_at")?,
            paused_until: row.get("paused_until")?,
            probe_owner: row.get("probe_owner")?,
            probe_expires_at: row.get("probe_expires_at")?,
            paused_ms: row.get("paused_ms")?,
            cause: row.get("cause")?,
            changed_by: row.get("changed_by")?,
            changed_at: row.get("changed_at")?,
        }))
    }
}
