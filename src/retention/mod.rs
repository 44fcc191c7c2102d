//! Retention (DESIGN.md §8): old terminal runs archived to JSONL and
//! slimmed to tombstones, old tombstones deleted with an audit checkpoint,
//! resolved dead letters archived and deleted at their own deadline, and
//! finished runs' raw model output erased after `output_days`.
//!
//! - [`rules`]: the `[retention]` section, the windows per namespace and
//!   the selections they make, and what a sweep handles and reports.
//! - [`archive`]: the archive files, one redacted line per run.
//! - [`sweeper`]: one sweep, run by `serve` every `retention.interval_secs`
//!   and by `oncegate retention run`.

pub mod archive;
pub mod port;
pub mod rules;
pub mod sweeper;

pub use rules::{
    RetentionConfig, RetentionOverride, RunMaterial, RunStamp, Selection, SweepReport, DAY_MS,
};
pub use sweeper::{sweep, SweepError};
