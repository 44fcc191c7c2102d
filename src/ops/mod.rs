//! Operations: Prometheus metrics, health and readiness, the retention
//! sweeper and archive, and the periodic maintenance jobs of `serve`.

pub mod metrics;

pub use metrics::Metrics;

// Audit integrity and retention (issue 6: audit).
pub mod archive;
pub mod commands;
pub mod maintenance;
pub mod retention;
pub mod sweeper;
