//! The options every load benchmark of the real binary shares (`suite`,
//! `proxy`, `redis`): how long each phase runs and warms up, which
//! `oncegate` binary serves, the PostgreSQL server, and the smoke mode
//! that only checks answers. `checkpoint` takes the last three alone
//! ([`ServerArgs`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

/// How each phase of a benchmark runs.
#[derive(Debug, clap::Args)]
pub struct PhaseArgs {
    /// Measured seconds per phase.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Warm-up seconds before each phase (not measured).
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// The server binary, PostgreSQL, smoke mode.
    #[command(flatten)]
    pub server: ServerArgs,
}

/// What every benchmark of the real binary serves with (the load
/// benchmarks through [`PhaseArgs`], `checkpoint` on its own).
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// The `oncegate` binary (default: beside this one).
    #[arg(long)]
    pub server_bin: Option<PathBuf>,
    /// PostgreSQL server (databases are created and dropped).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pub pg_url: String,
    /// A fraction of a second per phase (or the smallest run), checking
    /// answers only (for CI).
    #[arg(long)]
    pub smoke: bool,
}

impl PhaseArgs {
    /// Shortens every phase to a smoke run's: 0.3 s, no warm-up.
    pub fn shorten(&mut self) {
        self.seconds = 0.3;
        self.warmup = 0.0;
    }

    /// The measured window of a phase.
    pub fn window(&self) -> Duration {
        Duration::from_secs_f64(self.seconds)
    }

    /// The warm-up before a phase.
    pub fn warmup(&self) -> Duration {
        Duration::from_secs_f64(self.warmup)
    }
}

impl ServerArgs {
    /// The `oncegate` binary to serve with.
    ///
    /// # Errors
    /// It does not exist (not built yet).
    pub fn server_bin(&self) -> Result<PathBuf> {
        crate::server::server_bin(self.server_bin.as_deref())
    }
}
