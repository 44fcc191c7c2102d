//! The sign-in itself: discovery (its issuer must be the configured one),
//! the authorization URL (code flow, PKCE S256, `state`, `nonce`), the
//! callback (state checked in constant time against this browser's
//! [`Pending`], code exchanged with the PKCE verifier, ID token checked,
//! keys re-fetched once when the token names an unknown key id) and the
//! provider's logout URL.

use std::sync::Arc;

use openidconnect::core::{
    CoreAuthenticationFlow, CoreClient, CoreIdToken, CoreJwsSigningAlgorithm, CoreTokenResponse,
};
use openidconnect::{
    AccessTokenHash, AuthorizationCode, ClaimsVerificationError, ClientId, CsrfToken,
    DiscoveryError, EndpointMaybeSet, EndpointNotSet, EndpointSet, IssuerUrl, JsonWebKeySet,
    LogoutRequest, Nonce, OAuth2TokenResponse, PkceCodeChallenge, PkceCodeVerifier,
    PostLogoutRedirectUrl, RequestTokenError, Scope, SignatureVerificationError, TokenResponse,
};
use subtle::ConstantTimeEq;

use super::claims::{self, Identity};
use super::pending::{Pending, PENDING_TTL_SECS};
use super::{Metadata, Oidc, OidcError};
use crate::clock::to_datetime;

/// The client, with the endpoints discovery gives.
type Client = CoreClient<
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// What the provider sends back to the callback.
#[derive(Debug, Default, serde::Deserialize)]
pub struct Callback {
    /// The authorization code.
    pub code: Option<String>,
    /// The state the sign-in was sent with.
    pub state: Option<String>,
    /// An error code, when the provider did not sign the person in.
    pub error: Option<String>,
    /// The issuer of the answer (RFC 9207), when the provider sends it.
    pub iss: Option<String>,
}

impl Oidc {
    /// The provider's metadata: discovered once, kept, discovered again
    /// after a failure.
    async fn provider(&self) -> Result<Arc<Metadata>, OidcError> {
        if let Some(known) = self.provider.read().await.clone() {
            return Ok(known);
        }
        let issuer = IssuerUrl::new(self.config.issuer.clone())
            .map_err(|e| OidcError::Discovery(format!("the issuer URL: {e}")))?;
        let metadata = Metadata::discover_async(issuer, &self.http)
            .await
            .map_err(discovery_error)?;
        let metadata = Arc::new(metadata);
        *self.provider.write().await = Some(metadata.clone());
        Ok(metadata)
    }

    fn client(&self, metadata: &Metadata) -> Client {
        CoreClient::from_provider_metadata(
            metadata.clone(),
            ClientId::new(self.config.client_id.clone()),
            self.client_secret.clone(),
        )
        .set_redirect_uri(self.redirect.clone())
    }

    /// Starts a sign-in that returns to `next`: the provider's
    /// authorization URL and the sign-in to keep in the browser.
    ///
    /// # Errors
    /// [`OidcError::ProviderDown`] or [`OidcError::Discovery`].
    pub async fn begin(&self, next: &str) -> Result<(url::Url, Pending), OidcError> {
        let metadata = self.provider().await?;
        let client = self.client(&metadata);
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client.authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        );
        for scope in self.config.scopes.iter().filter(|s| *s != "openid") {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
        let expires_at = self.clock.now_ms() + 1000 * PENDING_TTL_SECS as i64;
        let pending = Pending {
            state: state.secret().clone(),
            nonce: nonce.secret().clone(),
            verifier: verifier.secret().clone(),
            next: next.to_owned(),
            expires_at,
        };
        Ok((url, pending))
    }

    /// Ends a sign-in: the person the provider vouches for.
    ///
    /// # Errors
    /// [`OidcError::State`] for a callback without this browser's sign-in
    /// or with another state; the provider's refusal; a refused code
    /// exchange (a replayed code); an ID token that fails a check; claims
    /// that do not name a person.
    pub async fn finish(
        &self,
        callback: Callback,
        pending: Option<Pending>,
    ) -> Result<Identity, OidcError> {
        let pending = pending.ok_or(OidcError::State(
            "no sign-in was started in this browser, or it took more than ten minutes: start again",
        ))?;
        let state = callback.state.as_deref().unwrap_or_default();
        if state.is_empty() || !bool::from(state.as_bytes().ct_eq(pending.state.as_bytes())) {
            return Err(OidcError::State(
                "the sign-in's state is missing or is not this browser's: start again",
            ));
        }
        // RFC 9207: an answer from another provider (mix-up) is refused.
        if callback
            .iss
            .as_ref()
            .is_some_and(|iss| *iss != self.config.issuer)
        {
            return Err(OidcError::Refused("the answer names another issuer".into()));
        }
        if let Some(error) = callback.error {
            return Err(OidcError::Refused(printable(&error)));
        }
        let code = callback
            .code
            .filter(|c| !c.is_empty())
            .ok_or(OidcError::State("the provider sent no authorization code"))?;
        let metadata = self.provider().await?;
        let response = self.exchange(&metadata, code, pending.verifier).await?;
        let id_token = response
            .id_token()
            .ok_or_else(|| OidcError::IdToken("the provider sent none".into()))?;
        let nonce = Nonce::new(pending.nonce);
        self.verify(metadata, id_token, &nonce, &response).await?;
        let claims = claims::payload(&id_token.to_string())?;
        claims::identity(
            &claims,
            &self.config.subject_claim,
            self.config.roles_claim.as_deref(),
        )
    }

    async fn exchange(
        &self,
        metadata: &Metadata,
        code: String,
        verifier: String,
    ) -> Result<CoreTokenResponse, OidcError> {
        let client = self.client(metadata);
        let request = client
            .exchange_code(AuthorizationCode::new(code))
            .map_err(|_| OidcError::Discovery("it names no token endpoint".into()))?;
        request
            .set_pkce_verifier(PkceCodeVerifier::new(verifier))
            .request_async(&self.http)
            .await
            .map_err(|e| match e {
                RequestTokenError::ServerResponse(r) => {
                    OidcError::Exchange(printable(r.error().as_ref()))
                }
                RequestTokenError::Request(_) => {
                    OidcError::ProviderDown("the token endpoint did not answer".into())
                }
                RequestTokenError::Parse(..) | RequestTokenError::Other(_) => {
                    OidcError::Exchange("its answer could not be read".into())
                }
            })
    }

    /// Checks the ID token; on an unknown key id, fetches the provider's
    /// keys again (they rotated) and checks once more.
    async fn verify(
        &self,
        metadata: Arc<Metadata>,
        id_token: &CoreIdToken,
        nonce: &Nonce,
        response: &CoreTokenResponse,
    ) -> Result<(), OidcError> {
        match self.check(&metadata, id_token, nonce, response) {
            Err(Some(ClaimsVerificationError::SignatureVerification(
                SignatureVerificationError::NoMatchingKey,
            ))) => {
                let fresh = self.refresh_keys(&metadata).await?;
                self.check(&fresh, id_token, nonce, response)
                    .map_err(id_token_error)
            }
            other => other.map_err(id_token_error),
        }
    }

    fn check(
        &self,
        metadata: &Metadata,
        id_token: &CoreIdToken,
        nonce: &Nonce,
        response: &CoreTokenResponse,
    ) -> Result<(), Option<ClaimsVerificationError>> {
        let client = self.client(metadata);
        let clock = self.clock.clone();
        let verifier = client
            .id_token_verifier()
            .set_allowed_algs(self.algorithms())
            .set_time_fn(move || to_datetime(clock.now_ms()));
        let claims = id_token.claims(&verifier, nonce).map_err(Some)?;
        // The access token is the one this ID token was issued with.
        if let Some(expected) = claims.access_token_hash() {
            let alg = id_token.signing_alg().map_err(|_| None)?;
            let key = id_token.signing_key(&verifier).map_err(|_| None)?;
            let actual =
                AccessTokenHash::from_token(response.access_token(), alg, key).map_err(|_| None)?;
            if actual != *expected {
                return Err(None);
            }
        }
        Ok(())
    }

    async fn refresh_keys(&self, metadata: &Metadata) -> Result<Arc<Metadata>, OidcError> {
        tracing::info!(
            issuer = %self.config.issuer,
            "ID token signed with an unknown key id: fetching the provider's keys again"
        );
        let keys = JsonWebKeySet::fetch_async(metadata.jwks_uri(), &self.http)
            .await
            .map_err(|_| OidcError::ProviderDown("its signing keys could not be fetched".into()))?;
        let fresh = Arc::new(metadata.clone().set_jwks(keys));
        *self.provider.write().await = Some(fresh.clone());
        Ok(fresh)
    }

    fn algorithms(&self) -> Vec<CoreJwsSigningAlgorithm> {
        self.config
            .algorithms
            .iter()
            .filter_map(|a| serde_json::from_value(serde_json::Value::String(a.clone())).ok())
            .collect()
    }

    /// Where to send a person who signs out, to sign out at the provider
    /// too: its `end_session_endpoint` (when discovery named one and
    /// `end_session` is on), back to the sign-in page afterwards. `None`
    /// when there is none or the provider is not known yet.
    pub async fn logout_url(&self) -> Option<url::Url> {
        if !self.config.end_session {
            return None;
        }
        let metadata = self.provider.read().await.clone()?;
        let endpoint = metadata
            .additional_metadata()
            .end_session_endpoint
            .clone()?;
        let back = PostLogoutRedirectUrl::new(self.after_logout.clone()).ok()?;
        Some(
            LogoutRequest::from(endpoint)
                .set_client_id(ClientId::new(self.config.client_id.clone()))
                .set_post_logout_redirect_uri(back)
                .http_get_url(),
        )
    }
}

/// Text from the provider, cut to a short line of visible ASCII.
fn printable(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .take(100)
        .collect()
}

fn discovery_error<E: std::error::Error + 'static>(e: DiscoveryError<E>) -> OidcError {
    match e {
        DiscoveryError::Request(_) => OidcError::ProviderDown("no answer to discovery".into()),
        DiscoveryError::Response(status, ..) if status.is_server_error() => {
            OidcError::ProviderDown(format!("discovery answered {status}"))
        }
        DiscoveryError::Response(status, ..) => {
            OidcError::Discovery(format!("it answered {status}"))
        }
        DiscoveryError::Validation(reason) => OidcError::Discovery(printable(&reason)),
        DiscoveryError::Parse(_) | DiscoveryError::UrlParse(_) => {
            OidcError::Discovery("it could not be read".into())
        }
        DiscoveryError::Other(reason) => OidcError::Discovery(printable(&reason)),
        _ => OidcError::Discovery("it could not be read".into()),
    }
}

/// What failed, in words that hold no part of the token.
fn id_token_error(e: Option<ClaimsVerificationError>) -> OidcError {
    use ClaimsVerificationError as C;
    let reason = match e {
        None => "its access token hash does not match the access token",
        Some(C::Expired(_)) => "it has expired (or was issued in the future)",
        Some(C::InvalidAudience(_)) => "it was issued for another client (audience)",
        Some(C::InvalidIssuer(_)) => "another issuer issued it",
        Some(C::InvalidNonce(_)) => "its nonce is not this sign-in's",
        Some(C::InvalidSubject(_)) => "it names no subject",
        Some(C::SignatureVerification(s)) => match s {
            SignatureVerificationError::DisallowedAlg(_)
            | SignatureVerificationError::UnsupportedAlg(_) => {
                "its signing algorithm is not allowed (approvals.oidc.algorithms)"
            }
            SignatureVerificationError::NoSignature => "it is not signed",
            SignatureVerificationError::NoMatchingKey => {
                "no key of the provider's matches its key id"
            }
            _ => "its signature does not verify",
        },
        Some(_) => "it is malformed or unsupported",
    };
    OidcError::IdToken(reason.into())
}
