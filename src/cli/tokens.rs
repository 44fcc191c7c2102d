//! `oncegate tokens create|list|revoke`: API tokens made at run time,
//! through a running server (`--url`, `--token` with the admin scope; each
//! change is audited under that token's subject). `create` prints the new
//! token once; the server keeps only its digest.

use anyhow::Result;
use serde_json::{json, Value};

use super::args::TokensCommand;
use super::remote::{print_table, rows_of, text, Remote};
use crate::config::Config;

/// `oncegate tokens …`.
///
/// # Errors
/// No token was given, or the server refused (its problem detail is shown).
pub(super) async fn run(
    command: TokensCommand,
    remote: &Remote,
    json_out: bool,
    config: &Config,
) -> Result<()> {
    let client = remote.client(config)?;
    match command {
        TokensCommand::Create {
            grant,
            namespaces,
            expires_at,
        } => {
            let scopes: Vec<&str> = grant.scopes.iter().map(|s| s.as_str()).collect();
            let body = json!({
                "subject": grant.subject,
                "scopes": scopes,
                "roles": grant.roles,
                "namespaces": (!namespaces.is_empty()).then_some(namespaces),
                "expires_at": expires_at,
            });
            let made = client.post("/v1/admin/tokens", &body).await?;
            if json_out {
                println!("{}", serde_json::to_string_pretty(&made)?);
            } else {
                println!(
                    "token {} for {} (shown once; only its digest is kept):\n{}",
                    text(&made["id"]),
                    text(&made["subject"]),
                    text(&made["token"])
                );
            }
        }
        TokensCommand::List => {
            let list = client.get("/v1/admin/tokens", &[]).await?;
            if json_out {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                print_tokens(&list);
            }
        }
        TokensCommand::Revoke { id } => {
            let path = format!(
                "/v1/admin/tokens/{}/revoke",
                crate::approval::pages::urlencode(&id)
            );
            let revoked = client.post(&path, &json!({})).await?;
            if json_out {
                println!("{}", serde_json::to_string_pretty(&revoked)?);
            } else {
                println!(
                    "token {} ({}) revoked: every instance refuses it within seconds",
                    text(&revoked["id"]),
                    text(&revoked["subject"])
                );
            }
        }
    }
    Ok(())
}

fn print_tokens(list: &Value) {
    let join = |v: &Value| {
        v.as_array().map_or_else(
            || "*".to_owned(),
            |a| a.iter().map(text).collect::<Vec<_>>().join(","),
        )
    };
    let rows = rows_of(list, |t| {
        vec![
            text(&t["id"]),
            text(&t["subject"]),
            join(&t["scopes"]),
            join(&t["namespaces"]),
            text(&t["source"]),
            text(&t["expires_at"]),
            text(&t["state"]),
        ]
    });
    print_table(
        &[
            "ID",
            "SUBJECT",
            "SCOPES",
            "NAMESPACES",
            "SOURCE",
            "EXPIRES",
            "STATE",
        ],
        &rows,
    );
}
