//! `oncegate actions disable|enable|status`: the kill switch, through a
//! running server (`--url`, `--token`: the change is audited under the
//! token's subject) or, with neither given, in the database directly
//! (audited under the operating-system user), for a host whose server is
//! down.

use anyhow::Result;
use serde_json::{json, Value};

use super::args::ActionsCommand;
use super::remote::{print_table, text, Remote};
use crate::api::SwitchView;
use crate::config::Config;

/// `oncegate actions …`.
///
/// # Errors
/// The server refused (its problem detail is shown), or the database failed.
pub(super) async fn run(
    command: ActionsCommand,
    remote: &Remote,
    json_out: bool,
    config: &Config,
) -> Result<()> {
    let change = match &command {
        ActionsCommand::Disable { target } => Some((false, target.clone())),
        ActionsCommand::Enable { target } => Some((true, target.clone())),
        ActionsCommand::Status => None,
    };
    let switches: Value = if remote.given() {
        let client = remote.client(config)?;
        match &change {
            Some((enabled, target)) => {
                client
                    .post(
                        "/v1/admin/actions",
                        &json!({ "enabled": enabled, "target": target }),
                    )
                    .await?
            }
            None => client.get("/v1/admin/actions", &[]).await?,
        }
    } else {
        direct(change.clone(), config).await?
    };
    if json_out {
        println!("{}", serde_json::to_string_pretty(&switches)?);
        return Ok(());
    }
    if let Some((enabled, target)) = change {
        println!(
            "actions {} for {}",
            if enabled { "enabled" } else { "disabled" },
            target.as_deref().unwrap_or("every target")
        );
    }
    let rows: Vec<Vec<String>> = switches
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|s| {
            vec![
                text(&s["scope"]),
                if s["enabled"] == json!(false) {
                    "DISABLED"
                } else {
                    "enabled"
                }
                .to_owned(),
                text(&s["changed_by"]),
                text(&s["changed_at"]),
            ]
        })
        .collect();
    if rows.is_empty() {
        println!("no switch was ever set: every target is enabled");
    } else {
        print_table(&["SCOPE", "STATE", "CHANGED BY", "CHANGED AT"], &rows);
    }
    Ok(())
}

/// The database form: sets the switch (if asked) and reads every switch,
/// shaped as the API shows them.
async fn direct(change: Option<(bool, Option<String>)>, config: &Config) -> Result<Value> {
    if let Some((_, Some(target))) = &change {
        if config.target(target).is_none() {
            anyhow::bail!("no target is named {target:?} in the configuration");
        }
    }
    let store = super::open(config).await?;
    let result = async {
        if let Some((enabled, target)) = change {
            let scope = target.unwrap_or_else(|| "*".into());
            let actor = format!(
                "cli:{}",
                std::env::var("USER").unwrap_or_else(|_| "unknown".into())
            );
            store.set_actions(&scope, enabled, &actor).await?;
        }
        anyhow::Ok(store.action_switches().await?)
    }
    .await;
    store.close().await;
    let switches: Vec<SwitchView> = result?.into_iter().map(SwitchView::from).collect();
    Ok(serde_json::to_value(switches)?)
}
