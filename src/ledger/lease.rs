//! The owner's lease: who holds a run and at which fencing version.
//!
//! A workflow engine threads one opaque string, not four fields. The string
//! is `l1_` followed by base64url (no padding) of 28 bytes: the 16-byte
//! random [`LeaseOwner`], the 8-byte big-endian [`FencingVersion`], and the
//! first 4 bytes of SHA-256 over those 24 bytes. The checksum turns a
//! truncated or hand-edited lease into a clear 400 instead of a confusing
//! 409; ownership itself is proved by the compare-and-set in the store,
//! since the owner part is 128 random bits nobody else can guess.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::ids::InvalidId;

/// The random identity of one claim's owner, stored as 32 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseOwner([u8; 16]);

impl LeaseOwner {
    /// A fresh owner from the OS random number generator.
    pub fn generate() -> Self {
        let mut bytes = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        Self(bytes)
    }

    /// Parses the stored hex form.
    ///
    /// # Errors
    /// [`InvalidId`] unless the value is 32 hex digits.
    pub fn from_hex(value: &str) -> Result<Self, InvalidId> {
        let mut bytes = [0u8; 16];
        hex::decode_to_slice(value, &mut bytes).map_err(|_| InvalidId {
            field: "lease_owner",
            problem: "must be 32 hex digits".into(),
        })?;
        Ok(Self(bytes))
    }

    /// The stored hex form.
    pub fn to_hex(self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Debug for LeaseOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The owner is half of a bearer credential: show only a prefix.
        write!(f, "LeaseOwner({}…)", &self.to_hex()[..6])
    }
}

/// The fencing token: starts at 1, incremented by every claim and move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct FencingVersion(i64);

impl FencingVersion {
    /// The version of a newly claimed run.
    pub const FIRST: Self = Self(1);

    /// Wraps a stored version.
    ///
    /// # Errors
    /// [`InvalidId`] when the value is below 1.
    pub fn new(value: i64) -> Result<Self, InvalidId> {
        if value < 1 {
            return Err(InvalidId {
                field: "version",
                problem: format!("must be at least 1, got {value}"),
            });
        }
        Ok(Self(value))
    }

    /// The version as stored.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for FencingVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A lease duration a caller asked for, within the configured bounds:
/// at least [`LeaseMs::MIN`] and at most the configured maximum; the
/// configured default when the caller named none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LeaseMs(i64);

impl LeaseMs {
    /// The shortest lease anybody may hold, in milliseconds.
    pub const MIN: i64 = 100;

    /// The requested duration, or `default` when none was asked for.
    ///
    /// # Errors
    /// [`InvalidId`] (field `lease_ms`) outside `MIN..=max`.
    pub fn within(requested: Option<i64>, default: i64, max: i64) -> Result<Self, InvalidId> {
        let ms = requested.unwrap_or(default);
        if !(Self::MIN..=max).contains(&ms) {
            return Err(InvalidId {
                field: "lease_ms",
                problem: format!("must be between {} and {max} milliseconds", Self::MIN),
            });
        }
        Ok(Self(ms))
    }

    /// The duration in milliseconds.
    pub fn get(self) -> i64 {
        self.0
    }
}

/// An owner at a version: what every owner call presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// Who holds the run.
    pub owner: LeaseOwner,
    /// The version the owner last saw.
    pub version: FencingVersion,
}

const PREFIX: &str = "l1_";
const RAW_LEN: usize = 28;

fn checksum(body: &[u8]) -> [u8; 4] {
    let digest = Sha256::digest(body);
    [digest[0], digest[1], digest[2], digest[3]]
}

impl Lease {
    /// The opaque string handed to the owner.
    pub fn encode(&self) -> String {
        let mut raw = Vec::with_capacity(RAW_LEN);
        raw.extend_from_slice(&self.owner.0);
        raw.extend_from_slice(&self.version.0.to_be_bytes());
        let sum = checksum(&raw);
        raw.extend_from_slice(&sum);
        format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(raw))
    }

    /// Parses a lease string.
    ///
    /// # Errors
    /// [`InvalidId`] when the string is not one this server issued: wrong
    /// prefix, wrong length, bad encoding or a checksum mismatch.
    pub fn decode(value: &str) -> Result<Self, InvalidId> {
        let bad = |problem: &str| InvalidId {
            field: "lease",
            problem: problem.into(),
        };
        let body = value
            .strip_prefix(PREFIX)
            .ok_or_else(|| bad("is not a lease issued by oncegate (it must start with \"l1_\")"))?;
        let raw = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| bad("is not valid base64url"))?;
        if raw.len() != RAW_LEN {
            return Err(bad("has the wrong length (truncated or padded?)"));
        }
        if checksum(&raw[..24]) != raw[24..] {
            return Err(bad("fails its checksum (edited or corrupted)"));
        }
        let mut owner = [0u8; 16];
        owner.copy_from_slice(&raw[..16]);
        let mut version = [0u8; 8];
        version.copy_from_slice(&raw[16..24]);
        Ok(Self {
            owner: LeaseOwner(owner),
            version: FencingVersion::new(i64::from_be_bytes(version))
                .map_err(|_| bad("holds an impossible version"))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Lease {
        Lease {
            owner: LeaseOwner::generate(),
            version: FencingVersion::new(42).unwrap(),
        }
    }

    #[test]
    fn round_trips() {
        let lease = sample();
        assert_eq!(Lease::decode(&lease.encode()).unwrap(), lease);
    }

    #[test]
    fn refuses_truncated_edited_and_foreign_strings() {
        let text = sample().encode();
        assert!(Lease::decode(&text[..text.len() - 1]).is_err());
        let mut edited = text.clone().into_bytes();
        let last = edited.len() - 3;
        edited[last] = if edited[last] == b'A' { b'B' } else { b'A' };
        let edited = String::from_utf8(edited).unwrap();
        assert!(Lease::decode(&edited)
            .unwrap_err()
            .problem
            .contains("checksum"));
        assert!(Lease::decode("garbage").is_err());
        assert!(Lease::decode("l1_!!!").is_err());
    }

    #[test]
    fn owner_debug_hides_most_of_the_secret() {
        let owner = LeaseOwner::generate();
        let shown = format!("{owner:?}");
        assert!(!shown.contains(&owner.to_hex()));
        assert_eq!(LeaseOwner::from_hex(&owner.to_hex()).unwrap(), owner);
    }
}
