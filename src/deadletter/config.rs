//! `[dead_letters]`: ownership routing, retention of resolved records, the
//! bulk replay runner, the declared body transforms, and the operations
//! whose replays need a second operator.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::transform::{self, TransformConfig};

/// `[dead_letters]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DeadLetterConfig {
    /// Who owns a dead letter nobody was assigned to, by namespace.
    pub owners: BTreeMap<String, String>,
    /// Owner of the rest (when absent, unassigned records say so).
    pub default_owner: Option<String>,
    /// Days a resolved record is kept before retention may archive it.
    pub retention_days: i64,
    /// Run the bulk replay runner inside `oncegate serve`.
    pub runner_enabled: bool,
    /// How long a runner's lease on a job lasts without progress, in
    /// milliseconds; a crashed runner's job resumes after it.
    pub job_lease_ms: i64,
    /// How often an idle runner looks for work, in milliseconds.
    pub job_poll_ms: u64,
    /// Highest rate a job may ask for, items per second.
    pub max_rate_per_sec: i64,
    /// Most items one job may hold.
    pub max_job_items: i64,
    /// Named, versioned corrections of an effect's body (RFC 6902 JSON
    /// Patch) a replay may apply.
    pub transforms: Vec<TransformConfig>,
    /// Operations whose replays need two operators: one creates the replay
    /// job, another starts it.
    pub four_eyes: Vec<String>,
}

impl Default for DeadLetterConfig {
    fn default() -> Self {
        Self {
            owners: BTreeMap::new(),
            default_owner: None,
            retention_days: 90,
            runner_enabled: true,
            job_lease_ms: 30_000,
            job_poll_ms: 1_000,
            max_rate_per_sec: 100,
            max_job_items: 5_000,
            transforms: Vec::new(),
            four_eyes: Vec::new(),
        }
    }
}

impl DeadLetterConfig {
    /// The owner of an unassigned record in `namespace`.
    pub fn owner_for(&self, namespace: &str) -> Option<&str> {
        self.owners
            .get(namespace)
            .or(self.default_owner.as_ref())
            .map(String::as_str)
    }

    /// Whether replays of `operation` need a second operator.
    pub fn four_eyes_for(&self, operation: &str) -> bool {
        self.four_eyes.iter().any(|o| o == operation)
    }

    /// How long a resolved record is kept, in milliseconds.
    pub fn retain_ms(&self) -> i64 {
        self.retention_days.saturating_mul(86_400_000)
    }

    /// Checks the fields.
    ///
    /// # Errors
    /// `(field, message)` for the first bad one.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let field = |f: &str| format!("dead_letters.{f}");
        if !(1..=36_500).contains(&self.retention_days) {
            return Err((
                field("retention_days"),
                "must be between 1 and 36500".into(),
            ));
        }
        if self.job_lease_ms < 1_000 {
            return Err((field("job_lease_ms"), "must be at least 1000".into()));
        }
        if self.job_poll_ms == 0 {
            return Err((field("job_poll_ms"), "must be positive".into()));
        }
        if !(1..=10_000).contains(&self.max_rate_per_sec) {
            return Err((
                field("max_rate_per_sec"),
                "must be between 1 and 10000".into(),
            ));
        }
        if !(1..=100_000).contains(&self.max_job_items) {
            return Err((
                field("max_job_items"),
                "must be between 1 and 100000".into(),
            ));
        }
        transform::validate_all(&self.transforms)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_route_by_namespace_then_default() {
        let mut c = DeadLetterConfig::default();
        assert_eq!(c.owner_for("stripe"), None);
        c.default_owner = Some("ops".into());
        c.owners.insert("stripe".into(), "payments".into());
        assert_eq!(c.owner_for("stripe"), Some("payments"));
        assert_eq!(c.owner_for("crm"), Some("ops"));
        assert_eq!(c.retain_ms(), 90 * 86_400_000);
    }

    #[test]
    fn bad_values_name_their_field() {
        let c = DeadLetterConfig {
            max_rate_per_sec: 0,
            ..DeadLetterConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().0, "dead_letters.max_rate_per_sec");
        assert!(DeadLetterConfig::default().validate().is_ok());
    }
}
