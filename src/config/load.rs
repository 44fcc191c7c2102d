//! Reading the configuration: the file, the `ONCEGATE_*` overrides, and
//! the `env:` secrets; fully checked for the service, or only the
//! sections a tool reads.

use std::path::Path;

use super::{set_field, Config, ConfigError, ENV_VARS};

impl Config {
    /// Loads the file (if any) and applies `env` overrides, then checks it.
    /// `env` is the process environment: its `ONCEGATE_*` variables override
    /// the file, and `env:NAME` target secret headers are read from it.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file, line or field that is wrong.
    pub fn load(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let (mut config, env) = Self::parse(path, env)?;
        // `env:NAME` target credentials (e.g. the secret header an n8n
        // Webhook node checks) are read once, here.
        for (i, target) in config.targets.iter_mut().enumerate() {
            target.resolve_env_secrets(&format!("targets[{i}]"), |var| env.get(var).cloned())?;
        }
        config.validate()?;
        Ok(config)
    }

    /// Loads the file and the `ONCEGATE_*` overrides for a command that
    /// works on the database directly (migrate, backup, audit verify, …)
    /// or talks to a server: only the sections such a command reads are
    /// checked (database, ledger, redaction, log), and no `env:` secret is
    /// read, so an operator's shell needs none of the service's secrets.
    /// Target secrets stay unresolved: never send with this configuration.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file, line or field that is wrong.
    pub fn load_for_tools(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let (config, _) = Self::parse(path, env)?;
        config.database.validate()?;
        config.ledger.validate()?;
        config.log.validate()?;
        for (i, rule) in config.redact.iter().enumerate() {
            rule.validate(&format!("redact[{i}]"))?;
        }
        Ok(config)
    }

    /// The file with the environment's overrides, read into a `Config`
    /// (not yet checked), and the environment as a map.
    fn parse(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<(Self, std::collections::HashMap<String, String>), ConfigError> {
        let mut table = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                text.parse::<toml::Table>()
                    .map_err(|e| ConfigError::Syntax {
                        path: path.to_owned(),
                        message: e.to_string(),
                    })?
            }
            None => toml::Table::new(),
        };
        let env: std::collections::HashMap<String, String> = env.into_iter().collect();
        for (name, value) in &env {
            if let Some((_, field)) = ENV_VARS.iter().find(|(var, _)| var == name) {
                set_field(&mut table, field, value);
            }
        }
        let mut config: Config = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| {
                let field = e.path().to_string();
                ConfigError::field(field, e.into_inner().message().to_string())
            })?;
        config.server.normalise_public_base();
        Ok((config, env))
    }
}
