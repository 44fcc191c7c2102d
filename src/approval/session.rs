//! People in the browser: an approver or operator token is exchanged once
//! for a session cookie (HttpOnly, SameSite=Strict, Secure under https);
//! only the cookie's SHA-256 is stored. A trusted single-sign-on header is
//! honoured only on connections from configured proxy addresses.

use std::net::{IpAddr, SocketAddr};

use axum::http::header::COOKIE;
use axum::http::{HeaderMap, HeaderValue};
use serde::Deserialize;

use super::approver::AuthMethod;
use super::token::Secret;
use crate::clock::Millis;
use crate::tokens::Scope;

/// The session cookie's name over plain http (loopback development).
pub const COOKIE_NAME: &str = "og_session";

/// The session cookie's name under https: the `__Host-` prefix makes the
/// browser refuse it unless it is `Secure`, `Path=/` and has no `Domain`,
/// so no other host (or a plain-http page of this one) can set or shadow it.
pub const HOST_COOKIE_NAME: &str = "__Host-og_session";

/// The cookie's name: [`HOST_COOKIE_NAME`] when `secure`.
pub fn cookie_name(secure: bool) -> &'static str {
    if secure {
        HOST_COOKIE_NAME
    } else {
        COOKIE_NAME
    }
}

/// `[approvals]`: sessions, single sign-on (a trusted header, OpenID
/// Connect) and the expiry sweeper.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalsConfig {
    /// How often expired challenges are swept, in milliseconds.
    pub sweep_interval_ms: u64,
    /// How long a browser session lasts, in seconds.
    pub session_ttl_secs: u64,
    /// The header a trusted proxy puts the signed-in user's name in
    /// (e.g. `X-Forwarded-User`). Unset: no single sign-on.
    pub sso_header: Option<String>,
    /// The header with the user's roles, comma-separated.
    pub sso_roles_header: Option<String>,
    /// Scopes a single-sign-on user holds, by trusted header or OpenID
    /// Connect (default: approver).
    pub sso_scopes: Vec<Scope>,
    /// Peer addresses whose SSO headers are believed. Any other peer's are
    /// ignored.
    pub trusted_proxies: Vec<IpAddr>,
    /// `[approvals.oidc]`: sign-in with an OpenID provider. Unset: none.
    pub oidc: Option<super::oidc::OidcConfig>,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        Self {
            sweep_interval_ms: 5_000,
            session_ttl_secs: 12 * 3600,
            sso_header: None,
            sso_roles_header: None,
            sso_scopes: vec![Scope::Approver],
            trusted_proxies: Vec::new(),
            oidc: None,
        }
    }
}

impl ApprovalsConfig {
    /// Checks the section.
    ///
    /// # Errors
    /// `(field, message)` for the first bad field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.sweep_interval_ms < 100 {
            return Err((
                "approvals.sweep_interval_ms".into(),
                "must be at least 100".into(),
            ));
        }
        if self.session_ttl_secs < 60 {
            return Err((
                "approvals.session_ttl_secs".into(),
                "must be at least 60".into(),
            ));
        }
        if self.sso_header.is_some() && self.trusted_proxies.is_empty() {
            return Err((
                "approvals.trusted_proxies".into(),
                "list the proxy addresses allowed to set approvals.sso_header".into(),
            ));
        }
        if let Some(oidc) = &self.oidc {
            oidc.validate()?;
        }
        Ok(())
    }

    /// The single-sign-on user of a request: only when the peer is a
    /// trusted proxy and it set the header. Returns subject and roles.
    pub fn sso_user(
        &self,
        peer: Option<SocketAddr>,
        headers: &HeaderMap,
    ) -> Option<(String, Vec<String>)> {
        let header = self.sso_header.as_deref()?;
        let peer = peer?.ip();
        if !self.trusted_proxies.contains(&peer) {
            return None;
        }
        // One value, one person: behind a proxy that appends instead of
        // replacing, a second value (or a joined `a, b`) may be the client's.
        let subject = only_value(headers, header)?.trim();
        if subject.is_empty() || subject.len() > 255 || subject.contains(',') {
            tracing::warn!(
                header,
                "single sign-on header refused: empty, too long, or several values"
            );
            return None;
        }
        let roles = match self.sso_roles_header.as_deref() {
            Some(h) if headers.contains_key(h) => only_value(headers, h)?
                .split(',')
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        Some((subject.to_owned(), roles))
    }
}

/// The value of `name` when it is sent exactly once, as text.
fn only_value<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?.to_str().ok()?;
    if values.next().is_some() {
        tracing::warn!(
            header = name,
            "single sign-on header sent more than once; refused"
        );
        return None;
    }
    Some(value)
}

/// A signed-in person as stored (by the digest of the cookie).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSession {
    /// `sha256:<hex>` of the cookie.
    pub id_hash: String,
    /// Who.
    pub subject: String,
    /// Scope names.
    pub scopes: Vec<String>,
    /// Roles.
    pub roles: Vec<String>,
    /// How they signed in.
    pub auth: AuthMethod,
    /// For a token session, the digest of the token that opened it: the
    /// session ends when that token is no longer known.
    pub credential: Option<String>,
    /// When it stops working.
    pub expires_at: Millis,
}

impl StoredSession {
    /// Whether the session holds `scope` (admin holds every scope).
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes
            .iter()
            .any(|s| s == scope.as_str() || s == Scope::Admin.as_str())
    }
}

/// The session secret a request's cookie carries, if well-formed; under
/// https (`secure`) only the `__Host-` cookie counts.
pub fn cookie_secret(headers: &HeaderMap, secure: bool) -> Option<Secret> {
    let wanted = cookie_name(secure);
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == wanted)
        .and_then(|(_, value)| Secret::parse(value.trim()))
}

/// The `Set-Cookie` value that opens a session.
pub fn set_cookie(secret: &Secret, secure: bool, max_age_secs: u64) -> HeaderValue {
    let name = cookie_name(secure);
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{name}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age_secs}{secure}",
        secret.expose()
    ))
    .expect("a base64url secret is a valid header value")
}

/// The `Set-Cookie` value that ends a session in the browser.
pub fn clear_cookie(secure: bool) -> HeaderValue {
    let name = cookie_name(secure);
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{name}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{secure}"
    ))
    .expect("static header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_round_trips_with_strict_attributes() {
        let secret = Secret::generate();
        let set = set_cookie(&secret, true, 60);
        let text = set.to_str().unwrap();
        assert!(
            text.contains("HttpOnly")
                && text.contains("SameSite=Strict")
                && text.ends_with("; Secure")
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            COOKIE,
            HeaderValue::from_str(&format!("a=b; {COOKIE_NAME}={}", secret.expose())).unwrap(),
        );
        assert_eq!(cookie_secret(&headers, false), Some(secret.clone()));
        assert_eq!(
            cookie_secret(&headers, true),
            None,
            "https reads only __Host-"
        );
        let host = HeaderMap::from_iter([(
            COOKIE,
            HeaderValue::from_str(&format!("{HOST_COOKIE_NAME}={}", secret.expose())).unwrap(),
        )]);
        assert_eq!(cookie_secret(&host, true), Some(secret.clone()));
        assert!(set_cookie(&secret, true, 60)
            .to_str()
            .unwrap()
            .starts_with("__Host-og_session="));
        assert!(!set_cookie(&Secret::generate(), false, 60)
            .to_str()
            .unwrap()
            .contains("Secure"));
    }

    #[test]
    fn sso_header_only_from_trusted_proxies() {
        let config = ApprovalsConfig {
            sso_header: Some("X-Forwarded-User".into()),
            sso_roles_header: Some("X-Forwarded-Groups".into()),
            trusted_proxies: vec!["10.0.0.1".parse().unwrap()],
            ..ApprovalsConfig::default()
        };
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-user", HeaderValue::from_static("alice"));
        headers.insert(
            "x-forwarded-groups",
            HeaderValue::from_static("finance, ops"),
        );
        let trusted: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let other: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        assert_eq!(
            config.sso_user(Some(trusted), &headers),
            Some(("alice".into(), vec!["finance".into(), "ops".into()]))
        );
        assert_eq!(config.sso_user(Some(other), &headers), None);
        assert_eq!(config.sso_user(None, &headers), None);

        // Behind a proxy that appends: a second value is refused, not
        // the first one taken.
        let mut twice = headers.clone();
        twice.append("x-forwarded-user", HeaderValue::from_static("mallory"));
        assert_eq!(config.sso_user(Some(trusted), &twice), None);
        let mut joined = headers.clone();
        joined.insert(
            "x-forwarded-user",
            HeaderValue::from_static("mallory, alice"),
        );
        assert_eq!(config.sso_user(Some(trusted), &joined), None);
        let mut roles_twice = headers.clone();
        roles_twice.append("x-forwarded-groups", HeaderValue::from_static("admin"));
        assert_eq!(config.sso_user(Some(trusted), &roles_twice), None);
    }
}
