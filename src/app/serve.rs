//! `oncegate serve`: open and migrate the store, bind, build the state,
//! start the workers, serve HTTP until shutdown, then drain the workers
//! and close the store.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::build::{build_state, open_store};
use super::listener::{serve_connections, ConnectionLimits};
use super::workers::Workers;
use crate::clock::{SharedClock, SystemClock};
use crate::config::Config;
use crate::state::AppState;

/// `oncegate serve`.
///
/// # Errors
/// Start-up failed: the database, the migrations, or the listen address.
pub async fn serve(config: Config, shutdown: CancellationToken) -> Result<()> {
    // A crash-point setting with a typo stops here, before anything runs.
    crate::chaos::arm().map_err(anyhow::Error::msg)?;
    // Held until serve returns: one server per SQLite file.
    let _serve_lock = if config.database.url.starts_with("sqlite:") {
        Some(crate::db::sqlite::serve_lock::lock_for_serve(
            &config.database.url,
        )?)
    } else {
        None
    };
    let clock: SharedClock = Arc::new(SystemClock);
    let store = open_store(&config, clock.clone()).await?;
    store.migrate().await.context("applying migrations")?;
    let listen = config.server.listen;
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let mut config = config;
    if config.server.public_base_url.is_none() && listen.ip().is_loopback() {
        // Links must name the port actually bound (listen may say :0).
        config.server.public_base_url = Some(format!("http://{}", listener.local_addr()?));
    }
    let (state, bootstrap) = build_state(config, store.clone(), clock).await?;
    if let Some(token) = bootstrap {
        show_bootstrap_token(&token, &state.config.database.url)?;
    }
    let metrics_listener = match state.config.metrics.listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the metrics listener {addr}"))?,
        ),
        None => None,
    };
    let metrics_address = match &metrics_listener {
        Some(l) => l.local_addr()?.to_string(),
        None => "the main listener".to_owned(),
    };
    tracing::info!(
        address = %listener.local_addr()?,
        database = store.backend_name(),
        metrics = %metrics_address,
        "oncegate listening"
    );
    let workers = Workers::spawn(&state, &shutdown).await?;
    let metrics = metrics_listener.map(|l| {
        let limits = ConnectionLimits::from_config(&state.config.server);
        let app = super::router::metrics_router(state.clone());
        tokio::spawn(serve_connections(l, app, limits, shutdown.clone()))
    });
    let logbook = state.logbook.clone();
    run_server(listener, state, shutdown.clone()).await?;
    shutdown.cancel();
    logbook.flush().await;
    if let Some(metrics) = metrics {
        let _ = metrics.await;
    }
    workers.drain().await;
    store.close().await;
    tracing::info!("oncegate stopped");
    Ok(())
}

/// Shows the first-start admin token, the only time it is ever shown: on
/// a terminal, printed; otherwise (a pipe, a file, journald, a container
/// log) written to a file readable by its owner only, whose path is
/// printed, so the token does not end up in whatever collects stdout.
/// A stdout that cannot be written is ignored (`println!` would panic).
///
/// # Errors
/// The token file cannot be written (the token would be lost).
fn show_bootstrap_token(token: &str, database_url: &str) -> Result<()> {
    use std::io::{IsTerminal, Write};
    let mut out = std::io::stdout();
    if out.is_terminal() {
        let _ = writeln!(
            out,
            "No API token is configured, so oncegate created one admin token.\n\
             It is shown only this once (only its digest is stored):\n\n    {token}\n\n\
             Use it as `Authorization: Bearer <token>`. Configure [[tokens]] \
             (`oncegate token new`) to replace it."
        );
        return Ok(());
    }
    let path = bootstrap_token_path(database_url);
    write_private(&path, &format!("{token}\n"))
        .with_context(|| format!("writing the first-start admin token to {}", path.display()))?;
    let _ = writeln!(
        out,
        "No API token is configured, so oncegate created one admin token.\n\
         stdout is not a terminal, so it is not printed: it is in {} \
         (readable by its owner only; only its digest is stored).\n\
         Use it as `Authorization: Bearer <token>`, then delete the file. \
         Configure [[tokens]] (`oncegate token new`) to replace it.",
        path.display()
    );
    tracing::warn!(path = %path.display(), "the first-start admin token was written to a file");
    Ok(())
}

/// Where the first-start token goes when stdout is not a terminal: beside
/// the SQLite database (the service's state directory), or in the working
/// directory for PostgreSQL; absolute, so the printed path can be used
/// from anywhere.
fn bootstrap_token_path(database_url: &str) -> std::path::PathBuf {
    const NAME: &str = "oncegate-admin-token";
    let sqlite_dir = database_url
        .strip_prefix("sqlite:")
        .and_then(|_| {
            <sqlx::sqlite::SqliteConnectOptions as std::str::FromStr>::from_str(database_url).ok()
        })
        .and_then(|o| o.get_filename().parent().map(std::path::Path::to_owned))
        .filter(|dir| !dir.as_os_str().is_empty());
    let path = sqlite_dir.unwrap_or_default().join(NAME);
    std::path::absolute(&path).unwrap_or(path)
}

/// Writes `text` to `path`, replacing it, readable by its owner only.
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
    let mut file = open.open(path)?;
    // A file that existed keeps its mode through open(): narrow it first.
    #[cfg(unix)]
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

/// Serves the app on `listener` until `shutdown` is cancelled, then lets
/// in-flight requests finish (up to the configured grace period). The
/// connections are served under the `[server]` limits (see
/// [`super::listener`]).
///
/// # Errors
/// None today (a failed accept is logged and retried); the `Result` keeps
/// the callers' shape.
pub async fn run_server(
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
) -> Result<()> {
    let grace = Duration::from_millis(state.config.server.shutdown_grace_ms);
    let limits = ConnectionLimits::from_config(&state.config.server);
    let app = super::router(state);
    let server = serve_connections(listener, app, limits, shutdown.clone());
    tokio::select! {
        () = server => {},
        () = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(grace_ms = grace.as_millis() as u64, "in-flight requests outlived the shutdown grace period");
        }
    }
    Ok(())
}

/// A token cancelled on SIGINT or SIGTERM.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(term) => term,
                    Err(err) => {
                        tracing::error!(error = %err, "cannot listen for SIGTERM");
                        let _ = ctrl_c.await;
                        cancel.cancel();
                        return;
                    }
                };
            tokio::select! {
                _ = ctrl_c => {},
                _ = term.recv() => {},
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        // Cancel first: shutdown must not wait on the log sink.
        cancel.cancel();
        tracing::info!("shutdown signal received; finishing in-flight requests");
    });
    token
}
