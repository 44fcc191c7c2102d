//! Operations: Prometheus metrics, their label bounds and scrape-time
//! gauges, the retention sweeper and archive, and the audit, retention and
//! backup commands.

pub mod labels;
pub mod metrics;
pub mod record;
mod scrape;
// The operator console (issue 7) reads the duplicate counters back.
mod snapshot;

pub use metrics::{Metrics, MetricsConfig};
pub use record::{GateDecision, ValidationFailure};

// Audit integrity and retention (issue 6: audit).
pub mod archive;
pub mod retention;
pub mod sweeper;
