//! The integration tests: one binary, real databases, real HTTP.
//!
//! PostgreSQL must listen on 127.0.0.1:5432 (or `ONCEGATE_TEST_PG_URL`);
//! `scripts/test` starts it when it is not running.

mod api;
mod approval_browser;
mod approval_policies;
mod approval_refusals;
mod approval_secrecy;
mod approvals;
mod audit; // issue 6: audit
mod backup; // issue 6: audit
mod conformance;
// Dead letters and replay (issue 6, branch dlq).
mod deadletter_actions;
mod deadletter_cli;
mod deadletter_jobs;
mod deadletter_rerun;
mod deadletters;
mod dispatch;
mod dispatch_process;
// SQLite group commit (the benchmark issue).
mod group_commit;
mod harness;
mod ingress;
// Retry Lab (issue 9).
mod lab;
// n8n integration (examples/n8n, docs/n8n.md)
mod n8n;
mod process;
mod redaction; // issue 6: audit
mod retention; // issue 6: audit
mod target;
// The operator console (issue 7, branch console).
mod browser;
mod console;
mod console_browser;
mod console_screenshots;
mod console_search;
// ops: metrics and logs
mod logs;
mod metrics;
// Chaos tests (issue 9): the real binary killed at crash points and a
// PostgreSQL crash under load (need `--features chaos`; scripts/test sets
// it), and databases that refuse writes (every build).
#[cfg(feature = "chaos")]
mod chaos;
mod unavailable;
