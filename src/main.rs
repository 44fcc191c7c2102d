//! The `oncegate` binary: parse the command line, load the configuration,
//! set up logging, and hand over to [`oncegate::cli`].

use std::process::ExitCode;

use clap::Parser;
use oncegate::cli::{self, Cli};
use oncegate::config::{Config, LogFormat};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(cli.config.as_deref(), std::env::vars()) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("oncegate: invalid configuration: {err}");
            return ExitCode::from(2);
        }
    };
    init_logging(
        cli.log_format.unwrap_or(config.log.format),
        &config.log.level,
    );
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("oncegate: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::run(cli.command, config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("oncegate: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_env("RUST_LOG").unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
