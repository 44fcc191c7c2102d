//! The server secret and what it keys: `approve_by_exception`'s human
//! sample, and the sessions of single sign-on.
//!
//! An eligible run goes to a person when its point in `[0, 1)` falls under
//! the operation's `sample_rate`. The point is an HMAC-SHA256 of the run's
//! namespace and key under the server secret, so it is the same for every
//! try of one run (a retried gate decides alike, on any instance) and a
//! workflow, which knows the namespace and key but not the secret, cannot
//! tell which of its runs a person will see. A single-sign-on session's
//! cookie is derived the same way from the person and the period, so a
//! browser (or script) that does not send the cookie back gets the same
//! session again instead of a new row per page. The secret comes from the
//! variable `server.secret_env` names or, without one, is generated at the
//! first start and kept in the database
//! ([`crate::approval::port::ApprovalStore::server_secret`]).

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

/// The stored name of the server secret.
pub const SERVER_SECRET: &str = "server";

/// The shortest secret accepted from the environment, in bytes.
pub const MIN_SECRET_LEN: usize = 32;

/// The server secret, as a key.
#[derive(Clone)]
pub struct ServerKey(Vec<u8>);

impl std::fmt::Debug for ServerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerKey([redacted])")
    }
}

impl ServerKey {
    /// A key from a secret's bytes.
    pub fn new(secret: &[u8]) -> Self {
        Self(secret.to_vec())
    }

    /// A fresh secret for the first start: 32 bytes of the OS CSPRNG, hex.
    pub fn generate_secret() -> String {
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        hex::encode(bytes)
    }

    /// HMAC-SHA256 of `message` under the secret.
    pub fn mac(&self, message: &[u8]) -> [u8; 32] {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.0) else {
            // HMAC takes a key of any length; this is unreachable.
            return [0; 32];
        };
        mac.update(message);
        mac.finalize().into_bytes().into()
    }

    /// The run's uniform point in `[0, 1)` of the human sample. Namespaces
    /// and keys are visible ASCII, so the line feed between them is
    /// unambiguous.
    pub fn point(&self, namespace: &str, key: &str) -> f64 {
        let digest = self.mac(format!("sample:{namespace}\n{key}").as_bytes());
        let mut top = [0u8; 8];
        top.copy_from_slice(&digest[..8]);
        (u64::from_be_bytes(top) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_point_depends_on_the_secret_and_stays_put_for_one_run() {
        let a = ServerKey::new(b"first secret");
        let b = ServerKey::new(b"other secret");
        assert_eq!(a.point("ns", "k1"), a.point("ns", "k1"));
        let differ = (0..64)
            .filter(|i| {
                let key = format!("k{i}");
                (a.point("ns", &key) < 0.5) != (b.point("ns", &key) < 0.5)
            })
            .count();
        assert!(differ > 10, "another secret samples other runs: {differ}");
        let under = (0..4000)
            .filter(|i| a.point("ns", &format!("k{i}")) < 0.25)
            .count();
        assert!((850..1150).contains(&under), "{under}");
        assert_eq!(format!("{a:?}"), "ServerKey([redacted])");
        assert_eq!(ServerKey::generate_secret().len(), 64);
    }
}
