//! `[dispatcher]`: the dispatcher inside `serve`.

use serde::Deserialize;

/// `[dispatcher]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DispatcherConfig {
    /// Run a dispatcher inside `oncegate serve`.
    pub enabled: bool,
    /// Effects leased per step.
    pub batch_size: i64,
    /// How long a lease on a `sending` effect lasts, in milliseconds; must
    /// exceed every target's timeout.
    pub lease_ms: i64,
    /// Longest wait between steps when idle (new effects wake it at once).
    pub idle_poll_ms: u64,
    /// False holds every effect at start (`ONCEGATE_ACTIONS_ENABLED=false`).
    pub actions_enabled: bool,
    /// Most effects leased and not yet recorded at once; 0 (the default)
    /// means the sum of the targets' `concurrency`, so that no leased
    /// effect waits long for a send slot (a lease held while waiting is
    /// one a crash would turn `unknown`).
    pub max_in_flight: usize,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            batch_size: 64,
            lease_ms: 60_000,
            idle_poll_ms: 250,
            actions_enabled: true,
            max_in_flight: 0,
        }
    }
}

impl DispatcherConfig {
    /// Checks the fields that need no other section (the lease against the
    /// targets' timeouts is checked with the targets).
    ///
    /// # Errors
    /// `(field, message)` for the first bad field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        if !(1..=10_000).contains(&self.batch_size) {
            return Err((
                "dispatcher.batch_size".into(),
                "must be between 1 and 10000".into(),
            ));
        }
        Ok(())
    }
}
