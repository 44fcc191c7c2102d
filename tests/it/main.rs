//! The integration tests: one binary, real databases, real HTTP.
//!
//! PostgreSQL must listen on 127.0.0.1:5432 (or `ONCEGATE_TEST_PG_URL`);
//! `scripts/test` starts it when it is not running.

mod api;
mod approval_browser;
mod approval_findings;
mod approval_policies;
mod approval_refusals;
mod approval_secrecy;
mod approvals;
mod audit;
mod audit_checkpoints;
mod audit_seals;
mod backup;
mod body_window;
mod claim_batches;
mod cluster_limits;
mod completions;
mod conformance;
mod deadletter_actions;
mod deadletter_cli;
mod deadletter_fix;
mod deadletter_four_eyes;
mod deadletter_jobs;
mod deadletter_rerun;
mod deadletters;
mod deliveries;
mod dispatch;
mod dispatch_process;
// What leaves the process (issue 25).
mod egress;
// SQLite group commit.
mod group_commit;
mod harness;
mod ingress;
mod killswitch;
// The Retry Lab.
mod lab;
// n8n integration (examples/n8n, docs/n8n.md)
mod n8n;
mod namespaces;
// OpenID Connect sign-in (issue 22): a real provider and a crafted one.
mod oidc_browser;
mod oidc_crafted;
mod oidc_flow;
mod oidc_secrecy;
mod oidc_support;
mod output_retention;
mod page_headers;
// PostgreSQL's plans without statistics.
mod plans;
// Running on a real host: the CLI over the API, start-up checks (issue 24).
mod operable;
mod process;
// TLS in front: Debian's nginx with deploy/nginx/oncegate.conf (docs/tls.md).
mod tls_proxy;
// The Idempotency-Key proxy (issue 21).
mod proxy;
mod recovery;
mod redaction;
// The Redis tier (issue 20): its harness and its must-hold tests.
mod redis_support;
mod redis_tier;
mod retention;
mod run_scoping;
// The listener under hostile clients and a broken log sink (issue 25).
mod serve_limits;
mod sessions;
// Outbound signing, checked by the official Standard Webhooks verifier.
mod signing;
mod target;
mod target_health;
mod tokens;
// The operator console.
mod browser;
mod console;
mod console_browser;
mod console_screenshots;
mod console_search;
// Metrics and logs.
mod logs;
mod metrics;
mod metrics_scrape;
// Chaos tests: the real binary killed at crash points and a
// PostgreSQL crash under load (need `--features chaos`; scripts/test sets
// it), and databases that refuse writes (every build).
#[cfg(feature = "chaos")]
mod chaos;
mod unavailable;
