//! oncegate makes side-effecting workflow automation safe to retry.
//!
//! # The parts
//!
//! - [`ledger`]: runs keyed by `(namespace, key)`: states, leases, fencing
//!   versions, payload hashes, and the only allowed moves between states.
//! - [`db`]: the SQLite (embedded default) and PostgreSQL (many nodes)
//!   backends, which implement every part's storage port once: the atomic
//!   claim and every compare-and-set move are single guarded statements,
//!   transactions plain Rust over a small executor. SQLite's writes are
//!   group-committed ([`db::sqlite::group_commit`]). [`ledger::storage`]
//!   holds the error every port shares.
//! - [`ingress`]: `POST /hooks/{source}`: provider signatures verified on
//!   the raw bytes, then claim, raw event and forward effect in one
//!   transaction.
//! - [`outbox`]: effects (intended external writes) committed with the
//!   move that permits them, and the dispatcher that sends each once with
//!   its idempotency key, classifies the outcome, retries within budget,
//!   reconciles the unknown and obeys the kill switch.
//! - [`approval`]: human gates: the gate endpoint's policies
//!   (`approve_before_act`, `act_with_window`, `approve_by_exception`),
//!   single-use hashed challenges, browser sessions (token or trusted SSO),
//!   the confirmation page and the decision transaction, expiry and
//!   escalation.
//! - [`validate`]: the AI-output contract: JSON Schema per operation,
//!   violations with their paths, bounded repairs.
//! - [`deadletter`]: where automatic work stops: evidence records, the
//!   operator's resolve / replay / replace, bulk replay jobs and their
//!   runner, and the workflow's failure report by execution ref.
//! - [`audit`]: the append-only, per-key hash-chained event log written in
//!   the same transaction as every claim and move; checkpoints over every
//!   chain head, `audit verify`, redaction before storage, and the timeline
//!   that answers "did we process, did we send, who approved, which model".
//! - [`metrics`]: Prometheus metrics: the registry, typed record calls,
//!   bounded labels, the gauges read at scrape time.
//! - [`proxy`]: the Idempotency-Key proxy (`ANY /proxy/{name}/{path}`):
//!   a synchronous call forwarded at most once per key, its answer stored
//!   and replayed, an unknown outcome never resent; each key a ledger run.
//! - [`retention`]: the retention sweeper: old terminal runs archived to
//!   JSONL and slimmed to tombstones, old tombstones deleted.
//! - [`lab`]: the Retry Lab (`oncegate lab`), a seeded simulator that runs
//!   seven delivery strategies under injected faults, strategies (d)–(g)
//!   on the real ledger move table and outbox classifier.
//!
//! Over HTTP:
//!
//! - [`api`]: the versioned JSON API over HTTP (axum), bearer tokens with
//!   scopes, RFC 9457 problem+json errors, the OpenAPI document.
//! - [`ui`]: the operator console at `/ui`, server-rendered HTML over the
//!   same store calls, signed in through the approval pages' session.
//! - [`state`]: [`state::AppState`], what every handler shares.
//! - [`tokens`]: API tokens by digest, and the principal each names.
//!
//! Around them:
//!
//! - [`app`]: the composition root: builds the store and the state, merges
//!   the root router, serves, runs the workers (dispatcher, replay runner,
//!   approval sweeper) and the periodic maintenance jobs.
//! - [`cli`]: the commands the `oncegate` binary runs, one file per group.
//! - [`config`]: the TOML file layered with `ONCEGATE_*` variables; each
//!   section checks itself, and each part is handed only its own sections.
//! - [`canonical`]: RFC 8785 canonical JSON, written directly (audit
//!   entries and claim payloads are hashed over it on every claim).
//! - [`clock`]: injected time, so leases and expiry are tested by hand.
//! - [`criteria`]: how the paged lists (dead letters, deliveries) read
//!   their search text: blanks, page sizes, ages and times, the cursor.
//! - [`chaos`]: named crash points the chaos tests kill the real binary
//!   at (compiled in only with the cargo feature `chaos`).
//!
//! Imports point one way: `cli` runs commands and calls into `app`; `app`
//! builds the state and imports the HTTP layer and the parts; `api` and
//! `ui` take [`state::AppState`] and call the parts; no part imports
//! `app`, `cli` or `ui`, and nothing but `main.rs` imports `cli`.
//!
//! # How a request flows
//!
//! A workflow sends `POST /v1/claims` with a bearer token. The [`api`]
//! layer authenticates the token (its subject becomes the actor), parses the
//! body into domain types (a malformed key, hash or lease is a 400 before
//! anything is written), and calls [`ledger::port::LedgerStore::claim`]. The backend runs
//! one `INSERT … ON CONFLICT DO UPDATE … WHERE <reclaimable> RETURNING`
//! statement and, in the same transaction, appends the audit entry. The
//! answer always carries an explicit `claimed` boolean: the caller either
//! holds an opaque `lease` now, or learns that the key is a duplicate (with
//! the stored result), in flight, finished, held under another key
//! (`duplicate_of`), or in conflict (422). The owner then renews,
//! completes or fails the run by presenting its lease; each move is a
//! compare-and-set on owner, version and a live lease, so an owner that
//! lost the run is told so (409) and must not act.
//!
//! An owner that wants something sent does not send it: it commits its
//! decision (`POST /v1/runs/commit`) and the effects enter the outbox in
//! the same transaction as the run's move to `approved`. The dispatcher
//! leases due effects, sends them outside any transaction, and records each
//! verdict, its evidence and the run's final move by compare-and-set.
//! Webhooks take the same road: the ingress stores the raw event and its
//! forward effect before it acknowledges the provider. A gated operation
//! takes a detour: `POST /v1/runs/gate` stages the effects on an approval
//! challenge, and only the approver's POST moves them into the outbox, in
//! the same transaction that consumes the challenge.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod api;
pub mod app;
pub mod approval;
pub mod audit;
pub mod canonical;
// Crash points for the chaos tests, inert without the `chaos` feature.
pub mod chaos;
pub mod cli;
pub mod clock;
pub mod config;
pub mod criteria;
pub mod db;
pub mod deadletter;
pub mod ingress;
pub mod lab;
pub mod ledger;
pub mod lifecycle;
pub mod metrics;
pub mod outbox;
pub mod proxy;
pub mod retention;
pub mod state;
pub mod tokens;
pub mod ui;
pub mod validate;
