//! Outbound signing (Standard Webhooks): a target with signing secrets gets
//! `webhook-id`, `webhook-timestamp` and `webhook-signature` on every
//! request, so its receiver (an n8n trigger, a service) can prove that a
//! delivery came from oncegate and refuse one replayed outside its
//! tolerance. Several secrets sign at once while one is rotated: each adds
//! its own `v1,<base64>` entry, and a receiver holding any of them accepts.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretSlice, SecretString};
use sha2::Sha256;

/// The prefix of a Standard Webhooks secret.
pub const WHSEC_PREFIX: &str = "whsec_";

/// The three headers, in the order the specification lists them.
pub const HEADERS: [&str; 3] = ["webhook-id", "webhook-timestamp", "webhook-signature"];

/// The HMAC key a `whsec_<base64>` secret stands for (the prefix may be
/// left off). The reason it is refused otherwise, never the secret itself.
///
/// # Errors
/// Not base64 after the prefix, or an empty key.
pub fn whsec_key(secret: &str) -> Result<SecretSlice<u8>, &'static str> {
    let encoded = secret.strip_prefix(WHSEC_PREFIX).unwrap_or(secret);
    let key = BASE64
        .decode(encoded)
        .map_err(|_| "the part after whsec_ is not base64")?;
    if key.is_empty() {
        return Err("the key is empty");
    }
    Ok(SecretSlice::from(key))
}

/// Checks a target's signing secrets as configured; `(index, why)` for the
/// first one that is not a usable key.
///
/// # Errors
/// A blank secret, or one that is not `whsec_<base64>`.
pub fn check(secrets: &[SecretString]) -> Result<(), (usize, &'static str)> {
    for (i, secret) in secrets.iter().enumerate() {
        let text = secret.expose_secret();
        if text.is_empty() || text.trim() != text {
            return Err((i, "is empty or has leading or trailing whitespace"));
        }
        whsec_key(text).map_err(|why| (i, why))?;
    }
    Ok(())
}

/// The `webhook-signature` value: one `v1,<base64 HMAC-SHA256 of
/// id.timestamp.body>` per secret, separated by spaces.
///
/// # Errors
/// `(index, why)` for a secret that is not a key (configuration loading
/// refuses those first, so only a hand-built target can get here).
pub fn signature(
    secrets: &[SecretString],
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> Result<String, (usize, &'static str)> {
    let mut entries = Vec::with_capacity(secrets.len());
    for (i, secret) in secrets.iter().enumerate() {
        let key = whsec_key(secret.expose_secret()).map_err(|why| (i, why))?;
        let mut mac = Hmac::<Sha256>::new_from_slice(key.expose_secret())
            .expect("HMAC takes a key of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        entries.push(format!("v1,{}", BASE64.encode(mac.finalize().into_bytes())));
    }
    Ok(entries.join(" "))
}

/// The three header values for one request: the id, the timestamp in
/// seconds and the signature.
///
/// # Errors
/// As [`signature`].
pub fn headers(
    secrets: &[SecretString],
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> Result<[(&'static str, String); 3], (usize, &'static str)> {
    let signed = signature(secrets, id, timestamp, body)?;
    Ok([
        (HEADERS[0], id.to_owned()),
        (HEADERS[1], timestamp.to_string()),
        (HEADERS[2], signed),
    ])
}

/// Seconds since the Unix epoch by the operating system's clock: the
/// receiver compares the timestamp with its own wall clock, so an injected
/// test clock must not reach it.
pub fn wall_clock_seconds() -> i64 {
    chrono::Utc::now().timestamp()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(text: &str) -> SecretString {
        SecretString::from(text.to_owned())
    }

    /// The example in the Standard Webhooks specification's README.
    #[test]
    fn the_specification_example_signs_as_published() {
        let secrets = [secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")];
        let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
        let body = br#"{"test": 2432232314}"#;
        let signed = signature(&secrets, id, 1_614_265_330, body).unwrap();
        assert_eq!(signed, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn each_secret_adds_its_own_entry_in_order() {
        let a = format!("whsec_{}", BASE64.encode(b"first key"));
        let b = format!("whsec_{}", BASE64.encode(b"second key"));
        let both = signature(&[secret(&a), secret(&b)], "id", 1, b"x").unwrap();
        let only_a = signature(&[secret(&a)], "id", 1, b"x").unwrap();
        let only_b = signature(&[secret(&b)], "id", 1, b"x").unwrap();
        assert_eq!(both, format!("{only_a} {only_b}"));
        assert_ne!(only_a, only_b);
        // The prefix is optional, as in the ingress verifier.
        let bare = BASE64.encode(b"first key");
        assert_eq!(signature(&[secret(&bare)], "id", 1, b"x").unwrap(), only_a);
    }

    #[test]
    fn unusable_secrets_are_named_by_position_never_shown() {
        let good = secret(&format!("whsec_{}", BASE64.encode(b"k")));
        assert_eq!(check(std::slice::from_ref(&good)), Ok(()));
        let (i, why) = check(&[good.clone(), secret("whsec_not*b64")]).unwrap_err();
        assert_eq!(i, 1);
        assert!(!why.contains("not*b64"), "{why}");
        assert_eq!(check(&[secret(" whsec_a2V5")]).unwrap_err().0, 0);
        assert_eq!(
            check(&[secret("whsec_")]).unwrap_err().1,
            "the key is empty"
        );
        assert!(signature(&[secret("whsec_%%")], "id", 1, b"").is_err());
    }
}
