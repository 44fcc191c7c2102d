//! The background workers of `serve`: the dispatcher, the bulk replay
//! runner, the maintenance jobs and the approval expiry sweeper. Each
//! stops when the shutdown token is cancelled; [`Workers::drain`] waits
//! for all of them before the store closes.

use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::maintenance::spawn_maintenance;
use crate::approval::sweeper::Sweeper;
use crate::deadletter::runner::ReplayRunner;
use crate::outbox::Dispatcher;
use crate::state::AppState;

/// The tasks one `serve` started.
pub(super) struct Workers {
    dispatcher: Option<JoinHandle<()>>,
    replayer: Option<JoinHandle<()>>,
    maintenance: JoinHandle<()>,
    sweeper: JoinHandle<()>,
}

impl Workers {
    /// Starts every worker this instance's configuration enables.
    ///
    /// # Errors
    /// As [`spawn_dispatcher`] and [`spawn_maintenance`].
    pub(super) async fn spawn(state: &AppState, shutdown: &CancellationToken) -> Result<Self> {
        let dispatcher = spawn_dispatcher(state, shutdown.clone()).await?;
        let replayer = spawn_replay_runner(state, shutdown.clone());
        let maintenance = spawn_maintenance(state, shutdown.clone())?;
        let sweeper = tokio::spawn(approval_sweeper(state).run(shutdown.clone()));
        Ok(Self {
            dispatcher,
            replayer,
            maintenance,
            sweeper,
        })
    }

    /// Waits for every worker to stop (cancel the shutdown token first).
    pub(super) async fn drain(self) {
        let _ = self.maintenance.await;
        if let Some(dispatcher) = self.dispatcher {
            // The dispatcher finishes its current step (sends in flight are
            // recorded) before the pools close.
            let _ = dispatcher.await;
        }
        if let Some(replayer) = self.replayer {
            // The replay runner finishes its current item and releases its job.
            let _ = replayer.await;
        }
        let _ = self.sweeper.await;
    }
}

/// Starts the dispatcher inside this process when the config enables it;
/// it stops when `shutdown` is cancelled. Applies
/// `dispatcher.actions_enabled = false` (`ONCEGATE_ACTIONS_ENABLED`) first.
///
/// # Errors
/// The kill switch could not be written, or a target's client not built.
pub async fn spawn_dispatcher(
    state: &AppState,
    shutdown: CancellationToken,
) -> Result<Option<JoinHandle<()>>> {
    let config = &state.config.dispatcher;
    if !config.actions_enabled {
        state
            .store
            .set_actions("*", false, "env:ONCEGATE_ACTIONS_ENABLED")
            .await
            .context("engaging the kill switch")?;
        tracing::warn!("actions are disabled at start: effects will wait until enabled");
    }
    if !config.enabled {
        tracing::info!("the dispatcher is disabled in this instance");
        return Ok(None);
    }
    let dispatcher = Dispatcher::new(
        state.store.clone(),
        &state.config.targets,
        config.clone(),
        state.clock.clone(),
        state.metrics.clone(),
        state.wake.clone(),
        state.kill_switch.clone(),
    )
    .context("building the target clients")?;
    Ok(Some(tokio::spawn(Arc::new(dispatcher).run(shutdown))))
}

/// Starts the bulk replay runner inside this process when
/// `dead_letters.runner_enabled`; it stops when `shutdown` is cancelled,
/// releasing the job it holds so another process resumes it at once.
pub fn spawn_replay_runner(
    state: &AppState,
    shutdown: CancellationToken,
) -> Option<JoinHandle<()>> {
    let config = &state.config.dead_letters;
    if !config.runner_enabled {
        tracing::info!("the replay runner is disabled in this instance");
        return None;
    }
    let runner = Arc::new(ReplayRunner::new(state.replay.clone(), config));
    Some(tokio::spawn(runner.run(shutdown)))
}

/// The approval expiry sweeper of this app (start it with `run`).
pub fn approval_sweeper(state: &AppState) -> Sweeper {
    Sweeper::new(
        state.store.clone(),
        state.store.clone(),
        &state.config.operations,
        &state.config.approvals,
        state.clock.clone(),
        state.wake.clone(),
        state.metrics.clone(),
    )
}
