//! The composition root: everything that builds and runs the service.
//!
//! - building: the configured store ([`open_store`]) and the shared
//!   [`AppState`](crate::state::AppState) around it ([`build_state`]),
//!   with the first-start admin token.
//! - [`router`]: the root router; it only merges the parts' routers and
//!   adds the shared layers.
//! - [`serve`]: bind, build, start the workers, serve until shutdown
//!   ([`shutdown_on_signal`]), drain the workers, close the store.
//! - the workers: the dispatcher ([`spawn_dispatcher`]), the bulk replay
//!   runner ([`spawn_replay_runner`]), the approval expiry sweeper
//!   ([`approval_sweeper`]) and the periodic maintenance jobs
//!   ([`spawn_maintenance`]).
//!
//! Nothing imports this module but the command line ([`crate::cli`]) and
//! the tests: the parts, the API and the console never reach up into it.

mod budget;
mod build;
mod listener;
pub mod maintenance;
mod router;
mod serve;
mod workers;

pub use build::{build_state, open_store};
pub use maintenance::{spawn_maintenance, RECOVERY_JOB};
pub use router::router;
pub use serve::{run_server, serve, shutdown_on_signal};
pub use workers::{approval_sweeper, spawn_dispatcher, spawn_replay_runner};
