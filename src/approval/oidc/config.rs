//! `[approvals.oidc]`: the OpenID provider people sign in with, checked at
//! load (issuer, client, claims to map, the algorithm allow-list).

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

/// The fixed path the provider sends people back to, under the public base.
pub const CALLBACK_PATH: &str = "/auth/oidc/callback";

/// The signing algorithms an ID token may use when none are configured.
pub const DEFAULT_ALGORITHMS: [&str; 2] = ["RS256", "ES256"];

/// Asymmetric JWS algorithms: the only ones that may be allowed. `none`
/// and the HMAC family (`HS256`…, keyed with the client secret, which the
/// provider's other clients' operators may share) never are.
pub const ASYMMETRIC: [&str; 10] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA",
];

/// A client secret from the file, or `env:NAME` read at start. Its
/// `Debug` never shows it.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct ClientSecretText(SecretString);

impl ClientSecretText {
    /// The secret, with `env:NAME` resolved.
    ///
    /// # Errors
    /// The variable named is not set.
    pub fn resolve(&self) -> Result<SecretString, String> {
        match self.0.expose_secret().strip_prefix("env:") {
            Some(var) => std::env::var(var)
                .map(SecretString::from)
                .map_err(|_| format!("environment variable {var} is not set")),
            None => Ok(self.0.clone()),
        }
    }
}

impl std::fmt::Debug for ClientSecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientSecretText([redacted])")
    }
}

impl PartialEq for ClientSecretText {
    fn eq(&self, other: &Self) -> bool {
        self.0.expose_secret() == other.0.expose_secret()
    }
}

/// `[approvals.oidc]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The issuer (`https://id.example.com/realms/ops`): discovery is read
    /// from `<issuer>/.well-known/openid-configuration`, and its `issuer`
    /// must be this, exactly.
    pub issuer: String,
    /// This service's client id at the provider (the ID token's audience).
    pub client_id: String,
    /// The client secret (`env:NAME` reads a variable at start). Unset: a
    /// public client, protected by PKCE alone.
    #[serde(default)]
    pub client_secret: Option<ClientSecretText>,
    /// The provider's name on the sign-in page ("Sign in with …").
    #[serde(default = "default_display_name")]
    pub display_name: String,
    /// The scopes asked for; `openid` is required.
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
    /// The ID token claim that names the person (the audit's actor).
    #[serde(default = "default_subject_claim")]
    pub subject_claim: String,
    /// The ID token claim with the person's roles: a claim name, or a JSON
    /// pointer into the claims (`/realm_access/roles` for Keycloak). Unset:
    /// no roles.
    #[serde(default)]
    pub roles_claim: Option<String>,
    /// The signing algorithms an ID token may use.
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// Whether signing out also signs out at the provider, when its
    /// discovery names an `end_session_endpoint` (RP-initiated logout).
    #[serde(default = "yes")]
    pub end_session: bool,
    /// How long one call to the provider may take, in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_display_name() -> String {
    "single sign-on".into()
}

fn default_scopes() -> Vec<String> {
    vec!["openid".into(), "profile".into(), "email".into()]
}

fn default_subject_claim() -> String {
    "sub".into()
}

fn default_algorithms() -> Vec<String> {
    DEFAULT_ALGORITHMS.iter().map(|a| (*a).to_owned()).collect()
}

fn yes() -> bool {
    true
}

fn default_timeout_ms() -> u64 {
    5_000
}

impl OidcConfig {
    /// Checks the section.
    ///
    /// # Errors
    /// `(field, message)` for the first bad field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let bad = |f: &str, m: String| Err((format!("approvals.oidc.{f}"), m));
        if let Err(m) = check_issuer(&self.issuer) {
            return bad("issuer", m);
        }
        if self.client_id.trim().is_empty() {
            return bad("client_id", "must not be empty".into());
        }
        if let Some(secret) = &self.client_secret {
            if let Err(m) = secret.resolve() {
                return bad("client_secret", m);
            }
        }
        if !self.scopes.iter().any(|s| s == "openid") {
            return bad("scopes", "must include \"openid\"".into());
        }
        if self.subject_claim.trim().is_empty() {
            return bad("subject_claim", "must name a claim (e.g. \"sub\")".into());
        }
        if self.algorithms.is_empty() {
            return bad("algorithms", "list at least one (e.g. \"RS256\")".into());
        }
        if let Some(alg) = self
            .algorithms
            .iter()
            .find(|a| !ASYMMETRIC.contains(&a.as_str()))
        {
            return bad(
                "algorithms",
                format!(
                    "{alg:?} is not allowed: only asymmetric algorithms ({}); never none or HS*",
                    ASYMMETRIC.join(", ")
                ),
            );
        }
        if !(100..=60_000).contains(&self.timeout_ms) {
            return bad("timeout_ms", "must be between 100 and 60000".into());
        }
        Ok(())
    }
}

/// Whether `url` is https, or plain http to a loopback host (development).
pub fn https_or_loopback(url: &url::Url) -> bool {
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    url.scheme() == "https" || (url.scheme() == "http" && loopback)
}

/// An issuer is an https URL (plain http only on loopback), without a
/// query or fragment.
fn check_issuer(issuer: &str) -> Result<(), String> {
    let url = url::Url::parse(issuer).map_err(|e| format!("not a URL: {e}"))?;
    if !https_or_loopback(&url) {
        return Err("must be https (plain http only for a provider on loopback)".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("must have no query or fragment".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> OidcConfig {
        toml::from_str(text).unwrap()
    }

    const MINIMAL: &str = "issuer = \"https://id.example.com\"\nclient_id = \"oncegate\"\n";

    #[test]
    fn defaults_are_the_safe_ones() {
        let c = parse(MINIMAL);
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.algorithms, ["RS256", "ES256"]);
        assert_eq!(c.subject_claim, "sub");
        assert!(c.scopes.contains(&"openid".to_owned()) && c.end_session);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, field) in [
            ("algorithms = [\"none\"]\n", "algorithms"),
            ("algorithms = [\"HS256\"]\n", "algorithms"),
            ("algorithms = []\n", "algorithms"),
            ("scopes = [\"profile\"]\n", "scopes"),
            ("subject_claim = \" \"\n", "subject_claim"),
            ("timeout_ms = 5\n", "timeout_ms"),
            (
                "client_secret = \"env:ONCEGATE_TEST_SURELY_UNSET\"\n",
                "client_secret",
            ),
        ] {
            let c = parse(&format!("{MINIMAL}{extra}"));
            let err = c.validate().unwrap_err();
            assert_eq!(err.0, format!("approvals.oidc.{field}"), "{extra}: {err:?}");
        }
        for issuer in [
            "http://id.example.com",
            "not a url",
            "https://id.example.com/?x=1",
        ] {
            let c = parse(&format!("issuer = \"{issuer}\"\nclient_id = \"x\"\n"));
            assert_eq!(c.validate().unwrap_err().0, "approvals.oidc.issuer");
        }
        let local = parse("issuer = \"http://127.0.0.1:9000\"\nclient_id = \"x\"\n");
        assert_eq!(local.validate(), Ok(()));
    }

    #[test]
    fn the_secret_never_shows() {
        let c = parse(&format!("{MINIMAL}client_secret = \"hunter2-hunter2\"\n"));
        assert!(!format!("{c:?}").contains("hunter2"));
        let resolved = c.client_secret.unwrap().resolve().unwrap();
        assert_eq!(resolved.expose_secret(), "hunter2-hunter2");
    }
}
