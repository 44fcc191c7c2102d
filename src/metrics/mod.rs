//! Prometheus metrics, all named `oncegate_*` (docs/metrics.md lists each).
//!
//! - [`registry`]: the [`Metrics`] of one app (its own registry, no global
//!   recorder) and the `[metrics]` section, [`MetricsConfig`].
//! - [`record`]: the typed calls that record counters and histograms.
//! - [`labels`]: the bounds on every label a caller can influence.
//! - `scrape`: the gauges read from the database at scrape time.
//! - `snapshot`: this process's counters read back, for the console.
//! - `targets`: target health (paused, disabled, time paused).

pub mod labels;
pub mod port;
pub mod record;
pub mod registry;
mod scrape;
mod snapshot;
mod targets;

pub use record::{GateDecision, ValidationFailure};
pub use registry::{DeclaredNames, Metrics, MetricsConfig};
