//! Who is signed in: a trusted single-sign-on header (from a configured
//! proxy) or the session cookie; sign-in with an approver or operator
//! token or through an OpenID provider, and sign-out. Shared by the approval pages and the console.

use std::net::SocketAddr;

use axum::http::{HeaderMap, HeaderValue};

use super::approver::{Approver, AuthMethod};
use super::port::SessionStore;
use super::secs_ms;
use super::server_key::ServerKey;
use super::session::{cookie_secret, set_cookie, ApprovalsConfig, StoredSession};
use super::token::Secret;
use crate::clock::Clock;
use crate::ledger::storage::StoreError;
use crate::tokens::{Authenticator, Principal, Scope};

/// A signed-in person: the session's secret (for CSRF) and its record.
#[derive(Debug, Clone)]
pub struct Person {
    /// The cookie's secret.
    pub secret: Secret,
    /// The stored session.
    pub session: StoredSession,
}

impl Person {
    /// The person as an approver of a challenge.
    pub fn approver(&self) -> Approver {
        Approver {
            subject: self.session.subject.clone(),
            roles: self.session.roles.clone(),
            may_approve: self.session.has(Scope::Approver),
            auth: self.session.auth,
        }
    }
}

/// What resolving people needs.
#[derive(Debug, Clone, Copy)]
pub struct People<'a> {
    /// Where sessions are kept.
    pub store: &'a dyn SessionStore,
    /// Sessions and single sign-on (`[approvals]`).
    pub config: &'a ApprovalsConfig,
    /// Known API tokens (sign-in).
    pub auth: &'a Authenticator,
    /// Session expiry.
    pub clock: &'a dyn Clock,
    /// Whether cookies are marked `Secure` (an https `public_base_url`).
    pub secure: bool,
    /// Derives single-sign-on sessions.
    pub server_key: &'a ServerKey,
}

/// The person behind a request and, when a session was just opened for
/// them (single sign-on), its cookie to set.
pub type Found = (Option<Person>, Option<HeaderValue>);

impl People<'_> {
    /// The person behind a request: a trusted SSO header wins (a new
    /// session is opened and its cookie returned), else the session cookie.
    ///
    /// # Errors
    /// The store failed.
    pub async fn person(
        &self,
        headers: &HeaderMap,
        peer: Option<SocketAddr>,
    ) -> Result<Found, StoreError> {
        if let Some((subject, roles)) = self.config.sso_user(peer, headers) {
            if let Some(existing) = self.session_of(headers).await? {
                if existing.session.auth == AuthMethod::Sso
                    && super::identity::same(&existing.session.subject, &subject)
                {
                    return Ok((Some(existing), None));
                }
            }
            let (person, cookie) = self.sso_session(subject, roles).await?;
            return Ok((Some(person), Some(cookie)));
        }
        Ok((self.session_of(headers).await?, None))
    }

    /// The person of the session cookie alone (never single sign-on).
    ///
    /// # Errors
    /// The store failed.
    pub async fn session_of(&self, headers: &HeaderMap) -> Result<Option<Person>, StoreError> {
        let Some(secret) = cookie_secret(headers, self.secure) else {
            return Ok(None);
        };
        let Some(mut session) = self.store.session(&secret.digest()).await? else {
            return Ok(None);
        };
        if session.auth == AuthMethod::Token {
            // The token that opened the session must still be known, and
            // still sign in: its current scopes and roles apply at once.
            let principal = match session.credential.as_deref() {
                Some(d) => self.auth.by_digest(d).await?.filter(may_sign_in),
                None => None,
            };
            let Some(p) = principal else {
                self.store.delete_session(&session.id_hash).await?;
                return Ok(None);
            };
            session.scopes = scope_names(&p);
            session.roles.clone_from(&p.roles);
        }
        Ok(Some(Person { secret, session }))
    }

    /// Exchanges an approver or operator token for a session; `None` for
    /// an unknown token or one with neither scope.
    ///
    /// # Errors
    /// The store failed.
    pub async fn sign_in(&self, token: &str) -> Result<Option<(Person, HeaderValue)>, StoreError> {
        let credential = crate::tokens::digest(token.trim());
        let Some(p) = self.auth.by_digest(&credential).await?.filter(may_sign_in) else {
            return Ok(None);
        };
        let opened = self
            .open_session(
                (p.subject.clone(), scope_names(&p), p.roles.clone()),
                AuthMethod::Token,
                Some(credential),
            )
            .await?;
        Ok(Some(opened))
    }

    /// Opens a session for a person an OpenID provider vouched for: a
    /// single-sign-on session (it satisfies `approver_auth = "sso"`) with
    /// the scopes of `approvals.sso_scopes` and the token's roles.
    ///
    /// # Errors
    /// The store failed.
    pub async fn sign_in_oidc(
        &self,
        identity: super::oidc::Identity,
    ) -> Result<(Person, HeaderValue), StoreError> {
        let scopes = self
            .config
            .sso_scopes
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect();
        self.open_session(
            (identity.subject, scopes, identity.roles),
            AuthMethod::Sso,
            None,
        )
        .await
    }

    /// Ends `person`'s session.
    ///
    /// # Errors
    /// The store failed.
    pub async fn sign_out(&self, person: &Person) -> Result<(), StoreError> {
        self.store.delete_session(&person.session.id_hash).await
    }

    /// The single-sign-on session of `subject` with `roles` for this
    /// period of `session_ttl_secs`: its secret is keyed from them, so every
    /// request of the period that comes without the cookie (a fresh page
    /// load, a script, a prefetch) finds the same session instead of adding
    /// a row. It lasts at least one full period past the request.
    async fn sso_session(
        &self,
        subject: String,
        roles: Vec<String>,
    ) -> Result<(Person, HeaderValue), StoreError> {
        let ttl = self.config.session_ttl_secs;
        let period_ms = secs_ms(ttl).max(1);
        let period = self.clock.now_ms().div_euclid(period_ms);
        let message = format!(
            "sso-session\n{}\n{}\n{period}",
            super::identity::normalise(&subject),
            roles.join(",")
        );
        let secret = Secret::derived(self.server_key.mac(message.as_bytes()));
        let session = StoredSession {
            id_hash: secret.digest(),
            subject,
            scopes: self
                .config
                .sso_scopes
                .iter()
                .map(|s| s.as_str().to_owned())
                .collect(),
            roles,
            auth: AuthMethod::Sso,
            credential: None,
            expires_at: (period + 2) * period_ms,
        };
        self.store.insert_session(&session).await?;
        let max_age =
            u64::try_from((session.expires_at - self.clock.now_ms()) / 1000).unwrap_or(ttl);
        let cookie = set_cookie(&secret, self.secure, max_age);
        Ok((Person { secret, session }, cookie))
    }

    /// A new session with a fresh secret for `(subject, scopes, roles)`.
    async fn open_session(
        &self,
        (subject, scopes, roles): (String, Vec<String>, Vec<String>),
        auth: AuthMethod,
        credential: Option<String>,
    ) -> Result<(Person, HeaderValue), StoreError> {
        let secret = Secret::generate();
        let ttl = self.config.session_ttl_secs;
        let session = StoredSession {
            id_hash: secret.digest(),
            subject,
            scopes,
            roles,
            auth,
            credential,
            expires_at: self.clock.now_ms() + secs_ms(ttl),
        };
        self.store.insert_session(&session).await?;
        let cookie = set_cookie(&secret, self.secure, ttl);
        Ok((Person { secret, session }, cookie))
    }
}

/// Whether a token's principal may open (and keep) a browser session.
fn may_sign_in(p: &Principal) -> bool {
    p.has(Scope::Approver) || p.has(Scope::Operator)
}

/// The scope names of a principal, as a session stores them.
fn scope_names(p: &Principal) -> Vec<String> {
    let mut names: Vec<String> = p.scopes.iter().map(|s| s.as_str().to_owned()).collect();
    names.sort();
    names
}

/// Whether a sign-in form was posted from another site (login CSRF: a
/// page elsewhere signing the victim in as the attacker). A browser says
/// so in `Sec-Fetch-Site` (anything but `same-origin`, or `none` for a
/// form the person opened themselves) or, failing that, in an `Origin`
/// other than `public_base` (or, without one, than the request's `Host`).
/// A request with neither header is not a browser's and is not refused.
pub fn posted_from_another_site(headers: &HeaderMap, public_base: Option<&str>) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = headers.get("sec-fetch-site") {
        return !matches!(site.to_str(), Ok("same-origin" | "none"));
    }
    let Some(origin) = headers.get("origin") else {
        return false;
    };
    let Ok(origin) = origin.to_str() else {
        return true;
    };
    let ours = match public_base {
        Some(base) => url::Url::parse(base)
            .ok()
            .map(|u| u.origin().ascii_serialization()),
        None => text("host").map(|h| format!("http://{h}")),
    };
    ours.is_none_or(|ours| !origin.eq_ignore_ascii_case(&ours))
}

#[cfg(test)]
mod tests {
    use super::posted_from_another_site;
    use axum::http::{HeaderMap, HeaderValue};

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn a_sign_in_posted_from_another_site_is_told_apart() {
        let base = Some("https://oncegate.example.com");
        for (pairs, base, cross) in [
            (&[("sec-fetch-site", "same-origin")][..], base, false),
            (&[("sec-fetch-site", "none")][..], base, false),
            (&[("sec-fetch-site", "cross-site")][..], base, true),
            (&[("sec-fetch-site", "same-site")][..], base, true),
            (
                &[("origin", "https://oncegate.example.com")][..],
                base,
                false,
            ),
            (&[("origin", "https://evil.example")][..], base, true),
            (&[("origin", "null")][..], base, true),
            (
                &[
                    ("origin", "http://127.0.0.1:8080"),
                    ("host", "127.0.0.1:8080"),
                ][..],
                None,
                false,
            ),
            (
                &[
                    ("origin", "http://evil.example"),
                    ("host", "127.0.0.1:8080"),
                ][..],
                None,
                true,
            ),
            (&[][..], base, false),
        ] {
            assert_eq!(
                posted_from_another_site(&headers(pairs), base),
                cross,
                "{pairs:?}"
            );
        }
    }
}
