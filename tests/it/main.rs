//! The integration tests: one binary, real databases, real HTTP.
//!
//! PostgreSQL must listen on 127.0.0.1:5432 (or `ONCEGATE_TEST_PG_URL`);
//! `scripts/test` starts it when it is not running.

mod api;
mod conformance;
mod dispatch;
mod dispatch_process;
mod harness;
mod ingress;
// Retry Lab (issue 9).
mod lab;
mod process;
mod target;
