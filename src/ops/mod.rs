//! Operations: Prometheus metrics, health and readiness.

pub mod metrics;

pub use metrics::Metrics;
