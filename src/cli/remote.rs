//! Commands that talk to a running server over its HTTP API: where it is
//! (`--url` / `ONCEGATE_URL`, default `http://` + `server.listen`) and the
//! token to speak with (`--token` / `ONCEGATE_TOKEN`). Such a command is
//! authenticated, audited under the token's subject, goes through the same
//! checks as any other client, and needs none of the service's secrets or
//! its database: it runs from a laptop as well as on the host.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::Value;

use crate::config::Config;

/// `--url` and `--token` of a command that can talk to a server.
#[derive(Debug, Clone, Default, Args)]
pub struct Remote {
    /// Base URL of the running server (default: `http://` + `server.listen`).
    #[arg(long, env = "ONCEGATE_URL", global = true)]
    pub url: Option<String>,
    /// An API token. Prefer `ONCEGATE_TOKEN`: arguments show in process lists.
    #[arg(long, env = "ONCEGATE_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
}

impl Remote {
    /// Whether the command should go through the server: a URL or a token
    /// was given (otherwise a command with a direct-database form uses it).
    pub(super) fn given(&self) -> bool {
        self.url.is_some() || self.token.is_some()
    }

    /// The client these settings name.
    ///
    /// # Errors
    /// No token was given.
    pub(super) fn client(&self, config: &Config) -> Result<Client> {
        Client::new(self.url.as_deref(), self.token.as_deref(), config)
    }
}

/// The server's HTTP API as an operator sees it.
pub(super) struct Client {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Client {
    /// A client of the server at `url` (default: `server.listen`) with `token`.
    ///
    /// # Errors
    /// No token was given.
    pub(super) fn new(url: Option<&str>, token: Option<&str>, config: &Config) -> Result<Self> {
        let token = token
            .map(str::to_owned)
            .context("an API token is required: set ONCEGATE_TOKEN (or --token)")?;
        let base = url.map(str::to_owned).unwrap_or_else(|| {
            let listen = config.server.listen;
            let host = if listen.ip().is_unspecified() {
                "127.0.0.1".to_owned()
            } else {
                listen.ip().to_string()
            };
            format!("http://{host}:{}", listen.port())
        });
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .context("building the HTTP client")?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token,
            http,
        })
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<Value> {
        let resp = req
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| format!("reaching {}", self.base))?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            let detail = body["detail"].as_str().unwrap_or("no detail");
            let kind = body["type"].as_str().unwrap_or("");
            bail!("{status}: {detail} ({kind})");
        }
        Ok(body)
    }

    pub(super) async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value> {
        self.send(self.http.get(format!("{}{path}", self.base)).query(query))
            .await
    }

    pub(super) async fn post(&self, path: &str, body: &Value) -> Result<Value> {
        self.send(self.http.post(format!("{}{path}", self.base)).json(body))
            .await
    }
}

/// A JSON value as a table cell: `-` for null, strings without quotes.
pub(super) fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Each element of a JSON array (none when `list` is not one) as a table row.
pub(super) fn rows_of(list: &Value, row: impl Fn(&Value) -> Vec<String>) -> Vec<Vec<String>> {
    list.as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(row)
        .collect()
}

/// Prints rows as a table: a header, then each row, columns padded to
/// their widest cell.
pub(super) fn print_table(header: &[&str], rows: &[Vec<String>]) {
    print!("{}", table(header, rows));
}

/// The text of [`print_table`].
pub(super) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, cell) in cells.enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            out.push_str(cell);
            if i + 1 < widths.len() {
                out.push_str(&" ".repeat(pad + 2));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(&mut header.iter().copied());
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_columns_to_their_widest_cell() {
        let out = table(
            &["scope", "state"],
            &[
                vec!["*".into(), "enabled".into()],
                vec!["mailer".into(), "DISABLED".into()],
            ],
        );
        assert_eq!(out, "scope   state\n*       enabled\nmailer  DISABLED\n");
    }
}
