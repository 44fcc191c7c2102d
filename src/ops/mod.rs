//! Operations: Prometheus metrics, their label bounds and scrape-time
//! gauges, health and readiness.

pub mod labels;
pub mod metrics;
pub mod record;
mod scrape;

pub use metrics::{Metrics, MetricsConfig};
pub use record::{GateDecision, ValidationFailure};
