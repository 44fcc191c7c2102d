//! Retention: terminal runs archived and slimmed to tombstones.

pub mod port;
