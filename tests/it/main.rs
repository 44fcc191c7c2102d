//! The integration tests: one binary, real databases, real HTTP.
//!
//! PostgreSQL must listen on 127.0.0.1:5432 (or `ONCEGATE_TEST_PG_URL`);
//! `scripts/test` starts it when it is not running.

mod api;
mod approval_policies;
mod approval_refusals;
mod approvals;
mod conformance;
mod dispatch;
mod dispatch_process;
mod harness;
mod ingress;
mod process;
mod target;
