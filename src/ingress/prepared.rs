//! Sources prepared at start: verifier built, locators and templates parsed.

use std::collections::HashMap;

use super::signature::{ConfigProblem, Scheme, Verifier};
use super::source::{KeyTemplate, Locator, SchemeName, SourceConfig};
use crate::outbox::TargetConfig;

/// One source, ready to take deliveries.
#[derive(Debug)]
pub struct PreparedSource {
    /// Its configuration.
    pub config: SourceConfig,
    /// Its signature check.
    pub verifier: Verifier,
    /// Where the event id is.
    pub event_id: Locator,
    /// Where the event type is, if anywhere.
    pub event_type: Option<Locator>,
    /// Its business-key template.
    pub business_key: Option<KeyTemplate>,
    /// Where deliveries are forwarded.
    pub forward_url: String,
}

impl PreparedSource {
    /// Whether reading id, type or business key needs the body as JSON.
    pub fn needs_json(&self) -> bool {
        self.event_id.needs_json()
            || self.event_type.as_ref().is_some_and(Locator::needs_json)
            || self.business_key.is_some()
            || self.config.scheme == SchemeName::Slack
    }
}

/// Every configured source, by name.
#[derive(Debug, Default)]
pub struct Sources(HashMap<String, PreparedSource>);

impl Sources {
    /// Prepares every source of a validated config, each forwarding to
    /// one of `targets`.
    ///
    /// # Errors
    /// A message naming the source whose signature setup is refused.
    pub fn prepare(sources: &[SourceConfig], targets: &[TargetConfig]) -> Result<Self, String> {
        let mut prepared = HashMap::new();
        for (i, source) in sources.iter().enumerate() {
            let at = format!("sources[{i}]");
            let verifier = verifier_for(source).map_err(|e| format!("{at}.secrets: {e}"))?;
            if source.scheme == SchemeName::None {
                tracing::warn!(
                    source = %source.name,
                    "source has signature scheme \"none\": anyone who can reach /hooks/{} can inject events",
                    source.name
                );
            }
            let event_id = source
                .event_id_locator()
                .ok_or_else(|| format!("{at}.event_id: missing"))
                .and_then(|l| Locator::parse(&l).map_err(|e| format!("{at}.event_id: {e}")))?;
            let event_type = source
                .event_type_locator()
                .map(|l| Locator::parse(&l).map_err(|e| format!("{at}.event_type: {e}")))
                .transpose()?;
            let business_key = source
                .business_key
                .as_deref()
                .map(|t| KeyTemplate::parse(t).map_err(|e| format!("{at}.business_key: {e}")))
                .transpose()?;
            let target = targets
                .iter()
                .find(|t| t.name == source.target)
                .ok_or_else(|| format!("{at}.target: unknown target {:?}", source.target))?;
            let forward_url = target
                .join(&source.path)
                .map_err(|e| format!("{at}.path: {e}"))?;
            prepared.insert(
                source.name.clone(),
                PreparedSource {
                    config: source.clone(),
                    verifier,
                    event_id,
                    event_type,
                    business_key,
                    forward_url,
                },
            );
        }
        Ok(Self(prepared))
    }

    /// The source with this name.
    pub fn get(&self, name: &str) -> Option<&PreparedSource> {
        self.0.get(name)
    }
}

fn verifier_for(source: &SourceConfig) -> Result<Verifier, String> {
    let scheme = match source.scheme {
        SchemeName::Stripe => Scheme::Stripe,
        SchemeName::Github => Scheme::GitHub,
        SchemeName::Shopify => Scheme::Shopify,
        SchemeName::Slack => Scheme::Slack,
        SchemeName::StandardWebhooks => Scheme::StandardWebhooks,
        SchemeName::None => Scheme::None,
        SchemeName::Hmac => {
            let hmac = source
                .hmac
                .as_ref()
                .ok_or("scheme hmac needs [sources.hmac]")?;
            Scheme::Hmac {
                header: hmac.header.clone(),
                encoding: hmac.encoding,
                prefix: hmac.prefix.clone(),
            }
        }
    };
    let secrets = source.resolved_secrets()?;
    Verifier::new(scheme, secrets, source.tolerance_secs).map_err(|e: ConfigProblem| e.to_string())
}
