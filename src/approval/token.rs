//! Approval and session secrets: 256 bits from the OS CSPRNG, shown once,
//! stored only as SHA-256; CSRF tokens derived from the session secret.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A bearer secret of a link or a session cookie. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// 32 fresh random bytes, base64url (43 characters).
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        Self(URL_SAFE_NO_PAD.encode(bytes))
    }

    /// A secret derived from 32 bytes the caller computed (a keyed hash).
    pub fn derived(bytes: [u8; 32]) -> Self {
        Self(URL_SAFE_NO_PAD.encode(bytes))
    }

    /// Accepts only what [`Secret::generate`] makes, so junk never reaches
    /// a query.
    pub fn parse(text: &str) -> Option<Self> {
        let ok = text.len() == 43
            && URL_SAFE_NO_PAD
                .decode(text)
                .is_ok_and(|bytes| bytes.len() == 32);
        ok.then(|| Self(text.to_owned()))
    }

    /// The text to put in a link or cookie, once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `sha256:<hex>`: the only form stored.
    pub fn digest(&self) -> String {
        format!("sha256:{}", hex::encode(Sha256::digest(self.0.as_bytes())))
    }

    /// The CSRF token for a form about `purpose` (a challenge id, or a
    /// console action), bound to this session secret.
    pub fn csrf(&self, purpose: &str) -> String {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(self.0.as_bytes()).expect("HMAC takes any key length");
        mac.update(b"oncegate-csrf\n");
        mac.update(purpose.as_bytes());
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    }

    /// Whether `presented` is this session's CSRF token for `purpose`, in
    /// constant time.
    pub fn csrf_matches(&self, purpose: &str, presented: &str) -> bool {
        let expected = self.csrf(purpose);
        expected.len() == presented.len()
            && bool::from(expected.as_bytes().ct_eq(presented.as_bytes()))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_round_trip_and_hide() {
        let s = Secret::generate();
        assert_eq!(s.expose().len(), 43);
        assert_eq!(Secret::parse(s.expose()), Some(s.clone()));
        assert!(Secret::parse("short").is_none());
        assert!(Secret::parse(&"!".repeat(43)).is_none());
        assert_eq!(format!("{s:?}"), "Secret(***)");
        assert!(s.digest().starts_with("sha256:") && !s.digest().contains(s.expose()));
    }

    #[test]
    fn csrf_is_bound_to_session_and_purpose() {
        let a = Secret::generate();
        let b = Secret::generate();
        let token = a.csrf("challenge-1");
        assert!(a.csrf_matches("challenge-1", &token));
        assert!(!a.csrf_matches("challenge-2", &token));
        assert!(!b.csrf_matches("challenge-1", &token));
        assert!(!a.csrf_matches("challenge-1", ""));
    }
}
