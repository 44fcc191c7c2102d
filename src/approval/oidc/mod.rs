//! OpenID Connect sign-in (DESIGN.md §5): the console and the approval
//! pages send a person to the configured provider (authorization code flow
//! with PKCE, `state` and `nonce`), take the code back at
//! [`CALLBACK_PATH`], exchange it, check the ID token (signature against
//! the provider's keys, re-fetched once on an unknown key id; the
//! algorithm allow-list; issuer, audience, expiry and nonce) and open the
//! same session a trusted single-sign-on header opens. `approver_auth =
//! "sso"` accepts it. Nothing of the flow (code, tokens, state, nonce) is
//! stored or logged; the sign-in in flight lives in a signed cookie
//! ([`pending`]).
//!
//! - [`config`]: `[approvals.oidc]`, checked at load.
//! - [`flow`]: discovery, the authorization URL, the callback, logout.
//! - [`claims`]: subject and roles from the configured claims.
//! - [`pending`]: the signed cookie of a sign-in in flight.

use std::sync::Arc;
use std::time::Duration;

use openidconnect::{ClientSecret, RedirectUrl};
use secrecy::ExposeSecret;
use tokio::sync::RwLock;

pub mod claims;
pub mod config;
pub mod flow;
pub mod pending;

pub use claims::Identity;
pub use config::{OidcConfig, CALLBACK_PATH};
pub use pending::Pending;

use crate::clock::SharedClock;
use crate::ledger::storage::StoreError;

/// The provider's discovery document and keys, as this library reads them
/// (with `end_session_endpoint`).
pub type Metadata = openidconnect::ProviderMetadataWithLogout;

/// Why a sign-in did not happen. Each leaves nothing changed; none of
/// their texts holds a code, token, state or nonce.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// The provider did not answer (or answered 5xx).
    #[error("the sign-in provider could not be reached ({0}); nothing changed, try again later")]
    ProviderDown(String),
    /// The discovery document was refused (another issuer, unreadable).
    #[error("the sign-in provider's discovery document was refused: {0}")]
    Discovery(String),
    /// The callback's `state` is missing, or not this browser's sign-in.
    #[error("{0}")]
    State(&'static str),
    /// The provider sent the person back with an error.
    #[error("the sign-in provider did not sign you in: {0}")]
    Refused(String),
    /// The code exchange was refused (a used or expired code).
    #[error("the sign-in provider did not accept the authorization code: {0}")]
    Exchange(String),
    /// The ID token failed a check.
    #[error("the ID token was refused: {0}")]
    IdToken(String),
    /// The ID token lacks or garbles the configured claims.
    #[error("{0}")]
    Claims(String),
    /// The session store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl OidcError {
    /// The slug logged and counted for this refusal.
    pub fn slug(&self) -> &'static str {
        match self {
            Self::ProviderDown(_) => "oidc-provider-down",
            Self::Discovery(_) => "oidc-discovery",
            Self::State(_) => "oidc-state",
            Self::Refused(_) => "oidc-refused",
            Self::Exchange(_) => "oidc-code",
            Self::IdToken(_) => "oidc-id-token",
            Self::Claims(_) => "oidc-claims",
            Self::Store(_) => "oidc-store",
        }
    }
}

/// The configured provider and what is known of it: built at start,
/// discovered at the first sign-in (and again after a failed discovery).
pub struct Oidc {
    config: OidcConfig,
    client_secret: Option<ClientSecret>,
    redirect: RedirectUrl,
    after_logout: String,
    http: reqwest::Client,
    clock: SharedClock,
    provider: RwLock<Option<Arc<Metadata>>>,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc")
            .field("issuer", &self.config.issuer)
            .field("client_id", &self.config.client_id)
            .finish_non_exhaustive()
    }
}

impl Oidc {
    /// The provider of `config`, for a service reached at `public_base`.
    ///
    /// # Errors
    /// The client secret's variable is unset, the callback URL does not
    /// parse, or the HTTP client cannot be built.
    pub fn new(config: &OidcConfig, public_base: &str, clock: SharedClock) -> Result<Self, String> {
        let client_secret = match &config.client_secret {
            Some(text) => Some(ClientSecret::new(
                text.resolve()?.expose_secret().to_owned(),
            )),
            None => None,
        };
        let base = public_base.trim_end_matches('/');
        let redirect = RedirectUrl::new(format!("{base}{CALLBACK_PATH}"))
            .map_err(|e| format!("the OpenID Connect callback URL: {e}"))?;
        // Never follow a redirect: one could lead a discovery or token
        // request anywhere (server-side request forgery).
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_millis(config.timeout_ms))
            .connect_timeout(Duration::from_millis(config.timeout_ms))
            .build()
            .map_err(|e| format!("the OpenID Connect HTTP client: {e}"))?;
        Ok(Self {
            config: config.clone(),
            client_secret,
            redirect,
            after_logout: format!("{base}/login"),
            http,
            clock,
            provider: RwLock::new(None),
        })
    }

    /// The provider's name for the sign-in page.
    pub fn display_name(&self) -> &str {
        &self.config.display_name
    }
}
