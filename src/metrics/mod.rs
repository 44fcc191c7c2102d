//! Metrics: the storage the scrape-time gauges read.

pub mod port;
