//! `oncegate actions disable|enable|status`: the kill switch.

use anyhow::Result;

use super::args::ActionsCommand;
use crate::config::Config;

/// `oncegate actions …`: writes the switch in the database, audited with
/// the operating-system user as the actor; every instance sees it within
/// a second.
pub(super) async fn run(command: ActionsCommand, config: &Config) -> Result<()> {
    let store = super::open(config).await?;
    let (enabled, target) = match command {
        ActionsCommand::Disable { target } => (false, target),
        ActionsCommand::Enable { target } => (true, target),
        ActionsCommand::Status => {
            for s in store.action_switches().await? {
                println!(
                    "{:<24} {:<8} by {}",
                    s.scope,
                    if s.enabled { "enabled" } else { "DISABLED" },
                    s.changed_by
                );
            }
            store.close().await;
            return Ok(());
        }
    };
    if let Some(target) = &target {
        if config.target(target).is_none() {
            anyhow::bail!("no target is named {target:?} in the configuration");
        }
    }
    let scope = target.unwrap_or_else(|| "*".into());
    let actor = format!(
        "cli:{}",
        std::env::var("USER").unwrap_or_else(|_| "unknown".into())
    );
    store.set_actions(&scope, enabled, &actor).await?;
    store.close().await;
    println!(
        "actions {} for {scope}",
        if enabled { "enabled" } else { "disabled" }
    );
    Ok(())
}
