//! The `oncegate` binary: parse the command line, load the configuration,
//! set up logging, and hand over to [`oncegate::cli`].
//!
//! Logs never stand in the way of the service: they are written by a
//! thread of their own from a bounded queue, lines are dropped when the
//! queue is full, and a failed write (a closed pipe, a full disk) is
//! ignored, so a broken log sink cannot block or panic a request, the
//! signal handler or shutdown.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;
use oncegate::cli::{self, Cli};
use oncegate::config::{Config, LogFormat};
use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The service reads its secrets; the tools (migrate, backup, audit
    // verify, the commands that talk to a server) need only the database
    // settings, so an on-call shell or a laptop can run them.
    let load = if cli.command.needs_service_config() {
        Config::load
    } else {
        Config::load_for_tools
    };
    let config = match load(cli.config.as_deref(), std::env::vars()) {
        Ok(config) => config,
        Err(err) => {
            say(format_args!("oncegate: invalid configuration: {err}"));
            return ExitCode::from(2);
        }
    };
    // Held until the end of main: dropping it flushes what is queued (for
    // at most a second, so even a stuck sink cannot hold up the exit).
    let _logs = init_logging(
        cli.log_format.unwrap_or(config.log.format),
        &config.log.level,
    );
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(err) => {
            say(format_args!(
                "oncegate: cannot start the async runtime: {err}"
            ));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::run(cli.command, config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            say(format_args!("oncegate: {err:#}"));
            ExitCode::FAILURE
        }
    }
}

/// Writes one line to stderr; a stderr that cannot be written is ignored
/// (`eprintln!` would panic).
fn say(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Installs the subscriber: stderr through a lossy non-blocking writer,
/// and no "unable to write" report of its own (that report goes to
/// stderr with `eprintln!`, which panics when stderr is closed).
fn init_logging(format: LogFormat, level: &str) -> WorkerGuard {
    let filter = EnvFilter::try_from_env("RUST_LOG").unwrap_or_else(|_| EnvFilter::new(level));
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        // A stuck sink holds at most this many lines (a few MiB), not the
        // default 128,000.
        .buffered_lines_limit(8192)
        .thread_name("oncegate-log")
        .finish(std::io::stderr());
    // Colour codes only for a person at a terminal: a file, a pipe or
    // journald gets plain text.
    let ansi = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(ansi)
        .log_internal_errors(false);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    guard
}
