//! The integration tests: one binary, real databases, real HTTP.
//!
//! PostgreSQL must listen on 127.0.0.1:5432 (or `ONCEGATE_TEST_PG_URL`);
//! `scripts/test` starts it when it is not running.

mod api;
mod conformance;
mod dispatch;
mod dispatch_process;
// SQLite group commit (the benchmark issue).
mod group_commit;
mod harness;
mod ingress;
mod process;
mod target;
