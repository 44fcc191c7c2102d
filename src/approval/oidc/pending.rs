//! A sign-in on its way through the provider: `state`, `nonce`, the PKCE
//! verifier and where to go afterwards, kept in the browser that started
//! it as a short-lived, HttpOnly cookie signed with the server key (so a
//! callback in another browser, or with a state of its own, is refused,
//! and nothing about it is stored or logged). `SameSite=Lax`: the
//! provider's redirect back is a cross-site top-level navigation, which a
//! `Strict` cookie would not come with.

use axum::http::header::COOKIE;
use axum::http::{HeaderMap, HeaderValue};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use crate::approval::server_key::ServerKey;
use crate::clock::Millis;

/// How long a sign-in may take at the provider, in seconds.
pub const PENDING_TTL_SECS: u64 = 600;

/// The cookie's name over plain http, and under https (`__Host-`: only
/// this host, `Secure`, `Path=/`).
const NAME: &str = "og_oidc";
const HOST_NAME: &str = "__Host-og_oidc";

/// One sign-in in flight.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Pending {
    /// The `state` sent to the provider.
    pub state: String,
    /// The `nonce` the ID token must carry.
    pub nonce: String,
    /// The PKCE code verifier.
    pub verifier: String,
    /// The local path to return to.
    pub next: String,
    /// When the cookie stops being accepted.
    pub expires_at: Millis,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("next", &self.next)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

fn name(secure: bool) -> &'static str {
    if secure {
        HOST_NAME
    } else {
        NAME
    }
}

fn mac(key: &ServerKey, payload: &str) -> String {
    URL_SAFE_NO_PAD.encode(key.mac(format!("oidc-pending\n{payload}").as_bytes()))
}

impl Pending {
    /// The `Set-Cookie` value carrying this sign-in.
    pub fn cookie(&self, key: &ServerKey, secure: bool) -> HeaderValue {
        let json = serde_json::to_vec(self).unwrap_or_default();
        let payload = URL_SAFE_NO_PAD.encode(json);
        let signature = mac(key, &payload);
        let flags = if secure { "; Secure" } else { "" };
        HeaderValue::from_str(&format!(
            "{}={payload}.{signature}; HttpOnly; SameSite=Lax; Path=/; Max-Age={PENDING_TTL_SECS}{flags}",
            name(secure)
        ))
        .expect("base64url is a valid header value")
    }

    /// The sign-in the request's cookie carries, when it is well-formed,
    /// signed by `key` and not past `now`.
    pub fn from_headers(
        headers: &HeaderMap,
        key: &ServerKey,
        secure: bool,
        now: Millis,
    ) -> Option<Self> {
        let wanted = name(secure);
        let value = headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(n, _)| *n == wanted)?
            .1;
        let (payload, signature) = value.trim().split_once('.')?;
        let expected = mac(key, payload);
        if !bool::from(expected.as_bytes().ct_eq(signature.as_bytes())) {
            return None;
        }
        let json = URL_SAFE_NO_PAD.decode(payload).ok()?;
        let pending: Self = serde_json::from_slice(&json).ok()?;
        (now < pending.expires_at).then_some(pending)
    }
}

/// The `Set-Cookie` value that ends a sign-in in flight (used or refused).
pub fn clear_cookie(secure: bool) -> HeaderValue {
    let flags = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{}=; HttpOnly; SameSite=Lax; Path=/; Max-Age=0{flags}",
        name(secure)
    ))
    .expect("static header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Pending {
        Pending {
            state: "s".repeat(43),
            nonce: "n".repeat(43),
            verifier: "v".repeat(43),
            next: "/approvals".into(),
            expires_at: 10_000,
        }
    }

    fn headers_with(set_cookie: &HeaderValue) -> HeaderMap {
        let pair = set_cookie.to_str().unwrap().split(';').next().unwrap();
        HeaderMap::from_iter([(COOKIE, HeaderValue::from_str(pair).unwrap())])
    }

    #[test]
    fn a_signed_cookie_round_trips_and_nothing_else_is_accepted() {
        let key = ServerKey::new(b"a server secret of enough length!");
        let cookie = sample().cookie(&key, true);
        let text = cookie.to_str().unwrap();
        assert!(text.starts_with("__Host-og_oidc=") && text.contains("HttpOnly"));
        assert!(text.contains("SameSite=Lax") && text.ends_with("; Secure"));
        let headers = headers_with(&cookie);
        assert_eq!(
            Pending::from_headers(&headers, &key, true, 9_999),
            Some(sample())
        );
        assert_eq!(
            Pending::from_headers(&headers, &key, true, 10_000),
            None,
            "expired"
        );
        let other = ServerKey::new(b"another server secret, as long!!");
        assert_eq!(Pending::from_headers(&headers, &other, true, 0), None);
        assert_eq!(
            Pending::from_headers(&headers, &key, false, 0),
            None,
            "plain-http name"
        );
        // A payload changed in the browser loses its signature.
        let mut forged = sample();
        forged.next = "/ui".into();
        let forged_cookie = forged.cookie(&key, true);
        let forged_payload = forged_cookie.to_str().unwrap().split(['=', '.']).nth(1);
        let original_sig = text.split(';').next().unwrap().split('.').nth(1).unwrap();
        let spliced = format!("__Host-og_oidc={}.{original_sig}", forged_payload.unwrap());
        let spliced = HeaderMap::from_iter([(COOKIE, HeaderValue::from_str(&spliced).unwrap())]);
        assert_eq!(Pending::from_headers(&spliced, &key, true, 0), None);
        assert!(!format!("{:?}", sample()).contains("sss"), "Debug hides it");
    }
}
