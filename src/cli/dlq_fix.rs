//! `oncegate dlq replay`: the same effects under the same keys, or with a
//! correction (`--transform NAME@VERSION` or `--body-file FILE`), and
//! `--dry-run` to see a correction's diff, hashes and key first.

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};

use super::dlq::Client;

/// `oncegate dlq replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// Dead letter id.
    id: String,
    /// Why (required, except for --dry-run).
    #[arg(long)]
    reason: Option<String>,
    /// Correct the body with this declared transform (NAME@VERSION).
    #[arg(long, conflicts_with = "body_file")]
    transform: Option<String>,
    /// Replace the body with this JSON file.
    #[arg(long)]
    body_file: Option<std::path::PathBuf>,
    /// The effect to correct (default: the one whose request failed).
    #[arg(long)]
    effect_id: Option<String>,
    /// Show the correction's diff, hashes and key; change nothing.
    #[arg(long)]
    pub(super) dry_run: bool,
}

/// `name@version` as the API's `{name, version}`.
pub(super) fn transform(text: &str) -> Result<Value> {
    let Some((name, version)) = text.rsplit_once('@') else {
        bail!("--transform takes NAME@VERSION (fix-currency@2), not {text:?}");
    };
    let version: u32 = version
        .parse()
        .with_context(|| format!("--transform {text:?}: the version must be a number"))?;
    Ok(json!({ "name": name, "version": version }))
}

/// Posts the replay (or its dry run) and returns the server's answer.
///
/// # Errors
/// A bad `--transform`, an unreadable or non-JSON `--body-file`, a dry run
/// without a correction, or the server's refusal.
pub(super) async fn replay(client: &Client, fix: ReplayArgs) -> Result<Value> {
    let mut body = Map::new();
    if let Some(t) = &fix.transform {
        body.insert("transform".into(), transform(t)?);
    }
    if let Some(path) = &fix.body_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let value: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        body.insert("body".into(), value);
    }
    if let Some(effect) = fix.effect_id {
        body.insert("effect_id".into(), effect.into());
    }
    if fix.dry_run {
        if body.is_empty() {
            bail!("--dry-run shows a correction: give --transform or --body-file");
        }
        let path = format!("/v1/dead-letters/{}/replay/dry-run", fix.id);
        return client.post(&path, &Value::Object(body)).await;
    }
    let Some(reason) = fix.reason else {
        bail!("--reason is required: say why it is safe to replay");
    };
    body.insert("reason".into(), reason.into());
    let path = format!("/v1/dead-letters/{}/replay", fix.id);
    client.post(&path, &Value::Object(body)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transform_is_name_at_version() {
        assert_eq!(
            transform("fix-to@2").unwrap(),
            json!({ "name": "fix-to", "version": 2 })
        );
        assert!(transform("fix-to").is_err());
        assert!(transform("fix-to@two").is_err());
    }
}
