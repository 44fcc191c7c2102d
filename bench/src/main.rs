//! `oncegate-bench`: rerunnable benchmarks of oncegate on this machine.
//!
//! - `suite`: the claim path of the real release binary (`oncegate serve`
//!   as a child process on 127.0.0.1) under a keep-alive load generator:
//!   the no-op floor, new keys, duplicates, signed webhooks, raw pgbench,
//!   the duplicate storm, growth and peak memory, with the target ratios.
//!   `--smoke` runs a few seconds of it and checks answers only (CI).
//! - `checkpoint`: the first audit checkpoint over a seeded ledger whose
//!   chains were never checkpointed: its time and the server's peak memory.
//! - `dispatch`: outbox throughput and commit-to-send latency, in process.
//! - `proxy`: the Idempotency-Key proxy against a local upstream (straight,
//!   new keys, replays) beside the no-op floor, in one run.
//! - `redis`: the Redis tier's claims (new keys, duplicates, a one-key
//!   storm) beside `redis-benchmark` running `SET NX PX` at the same
//!   client counts and beside the SQL tier, in one run.
//! - `soak`: three `oncegate serve` on one PostgreSQL behind nginx, a
//!   mixed load while instances are SIGKILLed in turn, then the counts
//!   (`scripts/soak`, docs/reliability.md).
//!
//! `scripts/bench` builds the release binaries and runs the suite.

use anyhow::Result;
use clap::Parser;

mod checkpoint;
mod db;
mod dispatch;
mod growth;
mod load;
mod pgbench;
mod phases;
mod proxy;
mod redis;
mod server;
mod soak;
mod suite;
mod targets;
mod workloads;

#[derive(Debug, Parser)]
#[command(name = "oncegate-bench", about = "Rerunnable oncegate benchmarks")]
struct Cli {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Debug, clap::Subcommand)]
enum Bench {
    /// The claim path of the real binary, side by side with its floor and
    /// raw pgbench (see BENCHMARKS.md).
    Suite(suite::SuiteArgs),
    /// The first audit checkpoint over a seeded, never-checkpointed
    /// ledger: its time and the server's peak memory.
    Checkpoint(checkpoint::CheckpointArgs),
    /// Outbox dispatch throughput and commit-to-send latency.
    Dispatch(dispatch::DispatchArgs),
    /// The Idempotency-Key proxy: a local upstream straight and through
    /// the proxy (new keys, replays), beside the no-op floor.
    Proxy(proxy::ProxyArgs),
    /// The Redis tier: claims beside `redis-benchmark` SET NX PX and the
    /// SQL tier.
    Redis(redis::RedisArgs),
    /// Three instances on one PostgreSQL behind nginx under a mixed load,
    /// one SIGKILLed and restarted in turn, then the counts at the targets
    /// and in the database (docs/reliability.md).
    Soak(soak::SoakArgs),
}

#[tokio::main]
async fn main() -> Result<()> {
    match Cli::parse().bench {
        Bench::Suite(args) => suite::run(args).await,
        Bench::Checkpoint(args) => checkpoint::run(args).await,
        Bench::Dispatch(args) => dispatch::run(args).await,
        Bench::Proxy(args) => proxy::run(args).await,
        Bench::Redis(args) => redis::run(args).await,
        Bench::Soak(args) => soak::run(args).await,
    }
}
