//! Provider signature schemes, verified on the unmodified raw body.
//!
//! A [`Verifier`] is built once per source from its configuration: the
//! [`Scheme`], the secrets (several while one is being rotated out; any may
//! match) and the timestamp tolerance. [`Verifier::verify`] looks only at
//! headers and the raw bytes, before anything is parsed, so a request that
//! fails here has reserved and stored nothing. Digests are compared in
//! constant time, the current time is passed in, and secrets live in
//! `secrecy` types that never reach `Debug` output or an error.

use std::fmt;

use axum::http::{HeaderMap, HeaderName};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretSlice, SecretString};
use serde::Deserialize;
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Tolerance, in seconds, for schemes that sign a timestamp, unless configured otherwise.
pub const DEFAULT_TOLERANCE_SECS: i64 = 300;

const SHA256_LEN: usize = 32;
const WEBHOOK_HEADERS: [&str; 3] = crate::outbox::signing::HEADERS;
const SVIX_HEADERS: [&str; 3] = ["svix-id", "svix-timestamp", "svix-signature"];

/// How a generic HMAC signature is written in its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// Hexadecimal digits, either case.
    Hex,
    /// Standard base64 with padding.
    Base64,
}

/// How a provider signs its webhooks.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheme {
    /// `Stripe-Signature: t=<unix>,v1=<hex>…` over `<t>.<body>`; v0 entries are ignored.
    Stripe,
    /// `X-Hub-Signature-256: sha256=<hex>` over the body.
    #[serde(rename = "github")]
    GitHub,
    /// `X-Shopify-Hmac-Sha256: <base64>` over the body.
    Shopify,
    /// `X-Slack-Signature: v0=<hex>` over `v0:<X-Slack-Request-Timestamp>:<body>`.
    Slack,
    /// Standard Webhooks / Svix: `v1,<base64>` entries over `<id>.<timestamp>.<body>`,
    /// from `webhook-*` headers, or `svix-*` when no `webhook-*` header is present.
    /// Secrets are `whsec_<base64 key>` (the prefix may be left off).
    StandardWebhooks,
    /// HMAC-SHA256 over the body, in a configured header.
    Hmac {
        /// The header holding the signature.
        header: String,
        /// How the digest is written.
        encoding: Encoding,
        /// Text before the digest, such as `sha256=`.
        #[serde(default)]
        prefix: Option<String>,
    },
    /// No verification at all; the caller warns about it at start-up.
    None,
}

impl Scheme {
    /// The scheme's name as configuration spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Stripe => "stripe",
            Self::GitHub => "github",
            Self::Shopify => "shopify",
            Self::Slack => "slack",
            Self::StandardWebhooks => "standard_webhooks",
            Self::Hmac { .. } => "hmac",
            Self::None => "none",
        }
    }
}

/// Why a source's signature configuration was refused. Never holds secret material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigProblem {
    /// A signing scheme was given no secret.
    #[error("scheme {0} signs its requests, so at least one secret is required")]
    NoSecrets(&'static str),
    /// Scheme `none` was given secrets, which suggests a mistake.
    #[error(
        "scheme none verifies nothing and takes no secrets; remove them or choose a signing scheme"
    )]
    SecretsWithoutScheme,
    /// A secret is empty or has whitespace around it (often a stray newline).
    #[error("secret {0} (counting from 0) is empty or has leading or trailing whitespace")]
    BlankSecret(usize),
    /// A Standard Webhooks secret does not decode to a key.
    #[error("secret {index} (counting from 0) is not a whsec_<base64> secret: {why}")]
    BadWebhookSecret {
        /// Position of the secret in the configured list.
        index: usize,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The hmac scheme was given an empty header name.
    #[error("scheme hmac needs a header name")]
    EmptyHeaderName,
    /// The hmac scheme was given a header name HTTP does not allow.
    #[error("{0:?} is not a valid HTTP header name")]
    BadHeaderName(String),
    /// The hmac scheme was given an empty prefix.
    #[error("the hmac prefix must not be empty; leave it out instead")]
    EmptyPrefix,
    /// The timestamp tolerance is negative.
    #[error("the timestamp tolerance must not be negative (got {0} s)")]
    NegativeTolerance(i64),
}

/// Why a request's signature was refused. Names headers, never secrets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// A header the scheme needs is absent.
    #[error("header {0} is missing")]
    MissingHeader(String),
    /// A header is present but cannot be read as the scheme requires.
    #[error("header {name} is malformed: {why}")]
    MalformedHeader {
        /// The header, in lower case.
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// The signed timestamp is too old or too far in the future.
    #[error(
        "timestamp {timestamp} is outside the {tolerance_secs} s tolerance around now ({now})"
    )]
    TimestampOutsideTolerance {
        /// The timestamp the request carries.
        timestamp: i64,
        /// The current time it was compared with.
        now: i64,
        /// The allowed difference either way, in seconds.
        tolerance_secs: i64,
    },
    /// The signatures are well formed but none matches a configured secret.
    #[error("no signature in the request matches a configured secret")]
    Mismatch,
}

/// What a successful verification established.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verified {
    /// Position of the secret that matched; `None` only for [`Scheme::None`].
    pub secret_index: Option<usize>,
    /// The signed timestamp, for schemes that sign one.
    pub timestamp: Option<i64>,
    /// The signed message id (Standard Webhooks `webhook-id`).
    pub message_id: Option<String>,
}

/// Checks one source's requests against its scheme and secrets.
pub struct Verifier {
    scheme: Scheme,
    keys: Vec<SecretSlice<u8>>,
    tolerance_secs: i64,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("scheme", &self.scheme)
            .field("secrets", &format_args!("{} redacted", self.keys.len()))
            .field("tolerance_secs", &self.tolerance_secs)
            .finish()
    }
}

impl Verifier {
    /// Builds a verifier; `tolerance_secs` applies to schemes that sign a timestamp.
    ///
    /// # Errors
    /// [`ConfigProblem`] for a signing scheme without secrets, secrets for
    /// `none`, a blank secret, a Standard Webhooks secret that is not base64,
    /// an empty or invalid hmac header name, an empty prefix, or a negative
    /// tolerance.
    pub fn new(
        scheme: Scheme,
        secrets: Vec<SecretString>,
        tolerance_secs: i64,
    ) -> Result<Self, ConfigProblem> {
        if tolerance_secs < 0 {
            return Err(ConfigProblem::NegativeTolerance(tolerance_secs));
        }
        let scheme = normalize(scheme)?;
        let keys = secrets
            .iter()
            .enumerate()
            .map(|(index, secret)| key_bytes(&scheme, index, secret.expose_secret()))
            .collect::<Result<Vec<_>, _>>()?;
        match (&scheme, keys.is_empty()) {
            (Scheme::None, false) => Err(ConfigProblem::SecretsWithoutScheme),
            (Scheme::None, true) | (_, false) => Ok(Self {
                scheme,
                keys,
                tolerance_secs,
            }),
            (_, true) => Err(ConfigProblem::NoSecrets(scheme.name())),
        }
    }

    /// The scheme this verifier applies.
    pub fn scheme(&self) -> &Scheme {
        &self.scheme
    }

    /// Verifies a request from its headers and unmodified body at `now_unix_secs`.
    ///
    /// # Errors
    /// [`SignatureError`] when a header is missing or malformed, the signed
    /// timestamp is outside the tolerance, or no signature matches a secret.
    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now_unix_secs: i64,
    ) -> Result<Verified, SignatureError> {
        let signed = match &self.scheme {
            Scheme::None => return Ok(Verified::default()),
            Scheme::Stripe => stripe(headers)?,
            Scheme::GitHub => {
                digest_header(headers, "x-hub-signature-256", "sha256=", Encoding::Hex)?
            }
            Scheme::Shopify => {
                digest_header(headers, "x-shopify-hmac-sha256", "", Encoding::Base64)?
            }
            Scheme::Slack => slack(headers)?,
            Scheme::StandardWebhooks => standard_webhooks(headers)?,
            Scheme::Hmac {
                header,
                encoding,
                prefix,
            } => digest_header(headers, header, prefix.as_deref().unwrap_or(""), *encoding)?,
        };
        if let Some(timestamp) = signed.learned.timestamp {
            self.check_tolerance(timestamp, now_unix_secs)?;
        }
        let index = self.matching_key(&signed, body);
        let index = index.ok_or(SignatureError::Mismatch)?;
        Ok(Verified {
            secret_index: Some(index),
            ..signed.learned
        })
    }

    fn check_tolerance(&self, timestamp: i64, now: i64) -> Result<(), SignatureError> {
        let skew = i128::from(now) - i128::from(timestamp);
        if skew.abs() > i128::from(self.tolerance_secs) {
            return Err(SignatureError::TimestampOutsideTolerance {
                timestamp,
                now,
                tolerance_secs: self.tolerance_secs,
            });
        }
        Ok(())
    }

    /// The position of the first key whose MAC equals one of the candidates.
    fn matching_key(&self, signed: &Signed, body: &[u8]) -> Option<usize> {
        self.keys.iter().position(|key| {
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key.expose_secret())
                .expect("HMAC takes keys of any length");
            mac.update(signed.prefix.as_bytes());
            mac.update(body);
            let tag = mac.finalize().into_bytes();
            signed
                .candidates
                .iter()
                .any(|candidate| bool::from(tag.as_slice().ct_eq(candidate)))
        })
    }
}

/// What a scheme read from the headers: the bytes signed before the body,
/// the digests offered, and what else was signed.
struct Signed {
    prefix: String,
    candidates: Vec<Vec<u8>>,
    learned: Verified,
}

/// Checks the hmac scheme's settings and lower-cases its header name.
fn normalize(mut scheme: Scheme) -> Result<Scheme, ConfigProblem> {
    if let Scheme::Hmac { header, prefix, .. } = &mut scheme {
        if header.is_empty() {
            return Err(ConfigProblem::EmptyHeaderName);
        }
        let name = HeaderName::from_bytes(header.as_bytes())
            .map_err(|_| ConfigProblem::BadHeaderName(header.clone()))?;
        *header = name.as_str().to_owned();
        if prefix.as_deref() == Some("") {
            return Err(ConfigProblem::EmptyPrefix);
        }
    }
    Ok(scheme)
}

/// The HMAC key a configured secret stands for.
fn key_bytes(
    scheme: &Scheme,
    index: usize,
    secret: &str,
) -> Result<SecretSlice<u8>, ConfigProblem> {
    if secret.is_empty() || secret.trim() != secret {
        return Err(ConfigProblem::BlankSecret(index));
    }
    if *scheme != Scheme::StandardWebhooks {
        return Ok(SecretSlice::from(secret.as_bytes().to_vec()));
    }
    crate::outbox::signing::whsec_key(secret)
        .map_err(|why| ConfigProblem::BadWebhookSecret { index, why })
}

fn malformed(name: &str, why: impl Into<String>) -> SignatureError {
    let (name, why) = (name.to_owned(), why.into());
    SignatureError::MalformedHeader { name, why }
}

/// The single value of header `name` (lower case); a repeated header is malformed.
fn header<'h>(headers: &'h HeaderMap, name: &str) -> Result<&'h str, SignatureError> {
    let mut values = headers.get_all(name).iter();
    let missing = || SignatureError::MissingHeader(name.to_owned());
    let value = values.next().ok_or_else(missing)?;
    if values.next().is_some() {
        return Err(malformed(name, "appears more than once"));
    }
    let not_ascii = |_| malformed(name, "holds bytes that are not visible ASCII");
    value.to_str().map_err(not_ascii)
}

/// A Unix time in whole seconds, written as digits only.
fn parse_timestamp(name: &str, text: &str) -> Result<i64, SignatureError> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let number = digits.then(|| text.parse().ok()).flatten();
    number.ok_or_else(|| malformed(name, "the timestamp is not a Unix time in seconds"))
}

/// A SHA-256 digest in `encoding`, or `None` when it is not one.
fn decode_digest(text: &str, encoding: Encoding) -> Option<Vec<u8>> {
    let bytes = match encoding {
        Encoding::Hex => hex::decode(text).ok()?,
        Encoding::Base64 => BASE64.decode(text).ok()?,
    };
    (bytes.len() == SHA256_LEN).then_some(bytes)
}

/// The digests among a header's v1 entries; unreadable entries are skipped
/// as long as a readable one remains.
fn v1_digests<'a>(
    name: &str,
    entries: impl Iterator<Item = &'a str>,
    encoding: Encoding,
) -> Result<Vec<Vec<u8>>, SignatureError> {
    let entries: Vec<&str> = entries.collect();
    if entries.is_empty() {
        return Err(malformed(name, "holds no v1 signature"));
    }
    let found: Vec<_> = entries
        .iter()
        .filter_map(|e| decode_digest(e, encoding))
        .collect();
    if found.is_empty() {
        return Err(malformed(name, "no v1 signature is a SHA-256 digest"));
    }
    Ok(found)
}

/// One digest over the body alone, after a fixed prefix in the header.
fn digest_header(
    headers: &HeaderMap,
    name: &str,
    prefix: &str,
    encoding: Encoding,
) -> Result<Signed, SignatureError> {
    let value = header(headers, name)?;
    let text = value.strip_prefix(prefix);
    let text = text.ok_or_else(|| malformed(name, format!("does not start with {prefix}")))?;
    let digest = decode_digest(text, encoding);
    let digest = digest.ok_or_else(|| malformed(name, "is not a SHA-256 digest as configured"))?;
    Ok(Signed {
        prefix: String::new(),
        candidates: vec![digest],
        learned: Verified::default(),
    })
}

fn stripe(headers: &HeaderMap) -> Result<Signed, SignatureError> {
    let name = "stripe-signature";
    let items: Vec<(&str, &str)> = header(headers, name)?
        .split(',')
        .map(|item| {
            item.split_once('=')
                .ok_or_else(|| malformed(name, "holds an entry without '='"))
        })
        .collect::<Result<_, _>>()?;
    let entries = |key| {
        items
            .iter()
            .filter(move |(k, _)| *k == key)
            .map(|(_, v)| *v)
    };
    let t = match (entries("t").next(), entries("t").nth(1)) {
        (Some(t), None) => t,
        (None, _) => return Err(malformed(name, "holds no t= timestamp")),
        (Some(_), Some(_)) => return Err(malformed(name, "holds more than one t= timestamp")),
    };
    let learned = Verified {
        timestamp: Some(parse_timestamp(name, t)?),
        ..Verified::default()
    };
    let candidates = v1_digests(name, entries("v1"), Encoding::Hex)?;
    Ok(Signed {
        prefix: format!("{t}."),
        candidates,
        learned,
    })
}

fn slack(headers: &HeaderMap) -> Result<Signed, SignatureError> {
    let ts_name = "x-slack-request-timestamp";
    let t = header(headers, ts_name)?;
    let timestamp = parse_timestamp(ts_name, t)?;
    let mut signed = digest_header(headers, "x-slack-signature", "v0=", Encoding::Hex)?;
    signed.prefix = format!("v0:{t}:");
    signed.learned.timestamp = Some(timestamp);
    Ok(signed)
}

fn standard_webhooks(headers: &HeaderMap) -> Result<Signed, SignatureError> {
    let branded = !WEBHOOK_HEADERS.iter().any(|n| headers.contains_key(*n));
    let [id_name, ts_name, sig_name] = if branded {
        SVIX_HEADERS
    } else {
        WEBHOOK_HEADERS
    };
    let id = header(headers, id_name)?;
    let t = header(headers, ts_name)?;
    let learned = Verified {
        secret_index: None,
        timestamp: Some(parse_timestamp(ts_name, t)?),
        message_id: Some(id.to_owned()),
    };
    // Other versions, such as the asymmetric `v1a,`, are not ours to check.
    let entries = header(headers, sig_name)?
        .split(' ')
        .filter_map(|e| e.strip_prefix("v1,"));
    let candidates = v1_digests(sig_name, entries, Encoding::Base64)?;
    Ok(Signed {
        prefix: format!("{id}.{t}."),
        candidates,
        learned,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use ConfigProblem as P;

    const FIXTURES: [&str; 6] = [
        include_str!("../../tests/fixtures/signatures/stripe.json"),
        include_str!("../../tests/fixtures/signatures/github.json"),
        include_str!("../../tests/fixtures/signatures/shopify.json"),
        include_str!("../../tests/fixtures/signatures/slack.json"),
        include_str!("../../tests/fixtures/signatures/standard_webhooks.json"),
        include_str!("../../tests/fixtures/signatures/hmac.json"),
    ];
    const MALFORMED: &str = "malformed_header";
    const OUTSIDE: &str = "timestamp_outside_tolerance";
    const EITHER: &str = "malformed_header mismatch";

    /// One vector from `tests/fixtures/signatures`; `origin` says where it was published.
    #[derive(Deserialize)]
    struct Case {
        name: String,
        origin: String,
        scheme: Scheme,
        secret: String,
        headers: Vec<(String, String)>,
        signature_header: String,
        body: String,
        now: i64,
        tolerance_secs: Option<i64>,
        expect: String,
        timestamp: Option<i64>,
        message_id: Option<String>,
    }

    impl Case {
        fn tolerance(&self) -> i64 {
            self.tolerance_secs.unwrap_or(DEFAULT_TOLERANCE_SECS)
        }

        fn verifier(&self, secrets: &[&str]) -> Verifier {
            let secrets = secrets.iter().map(|s| SecretString::from(*s)).collect();
            Verifier::new(self.scheme.clone(), secrets, self.tolerance()).expect("config")
        }

        /// The outcome's kind, spelled as the fixtures' `expect`.
        fn kind(&self, secrets: &[&str], headers: &HeaderMap, body: &[u8], now: i64) -> &str {
            match self.verifier(secrets).verify(headers, body, now) {
                Ok(_) => "verified",
                Err(SignatureError::MissingHeader(_)) => "missing_header",
                Err(SignatureError::MalformedHeader { .. }) => MALFORMED,
                Err(SignatureError::TimestampOutsideTolerance { .. }) => OUTSIDE,
                Err(SignatureError::Mismatch) => "mismatch",
            }
        }

        /// The headers without `dropped`; the signature `edit`ed and given `copies` times.
        fn headers_with(
            &self,
            dropped: &str,
            copies: usize,
            edit: fn(&str) -> String,
        ) -> HeaderMap {
            let mut map = HeaderMap::new();
            for (name, value) in self.headers.iter().filter(|(n, _)| n != dropped) {
                let is_sig = *name == self.signature_header;
                let (value, copies) = if is_sig {
                    (edit(value), copies)
                } else {
                    (value.clone(), 1)
                };
                let name = HeaderName::from_bytes(name.as_bytes()).expect("header name");
                for _ in 0..copies {
                    map.append(&name, HeaderValue::from_str(&value).expect("header value"));
                }
            }
            map
        }

        fn headers(&self) -> HeaderMap {
            self.headers_with("", 1, str::to_owned)
        }
    }

    fn cases() -> Vec<Case> {
        #[derive(Deserialize)]
        struct Fixture {
            cases: Vec<Case>,
        }
        let parse = |text| serde_json::from_str::<Fixture>(text).expect("fixture");
        let all = FIXTURES.map(parse);
        all.into_iter().flat_map(|f| f.cases).collect()
    }

    #[test]
    fn published_vectors_give_their_published_outcome() {
        let cases = cases();
        assert!(cases.len() >= 14, "fixtures went missing");
        for case in cases {
            assert!(!case.origin.is_empty(), "{}: no origin", case.name);
            let (h, body) = (case.headers(), case.body.as_bytes());
            let got = case.kind(&[&case.secret], &h, body, case.now);
            assert_eq!(got, case.expect, "{}", case.name);
            if let Ok(verified) = case.verifier(&[&case.secret]).verify(&h, body, case.now) {
                let learned = (
                    verified.secret_index,
                    verified.timestamp,
                    verified.message_id,
                );
                let want = (Some(0), case.timestamp, case.message_id);
                assert_eq!(learned, want, "{}", case.name);
            }
        }
    }

    #[test]
    fn failure_table_holds_for_every_published_vector() {
        for case in cases().into_iter().filter(|c| c.expect == "verified") {
            let (s, b, now) = (case.secret.as_str(), case.body.as_bytes(), case.now);
            // The vector's secret plays the retired one; `current` replaced it.
            let current = match case.scheme {
                Scheme::StandardWebhooks => format!("whsec_{}", BASE64.encode(b"current")),
                _ => "current".to_owned(),
            };
            let mut changed = b.to_vec();
            *changed.last_mut().expect("non-empty body") ^= 0x01;
            let h = case.headers();
            let nosig = case.headers_with("", 0, str::to_owned);
            let dup = case.headers_with("", 2, str::to_owned);
            let garbled = case.headers_with("", 1, |_| "%%x%%".to_owned());
            let cut = case.headers_with("", 1, |v| v[..v.len() / 2].to_owned());
            let (ts, tol) = (case.timestamp.unwrap_or(now), case.tolerance());
            let k = |secrets: &[&str], h: &HeaderMap, b: &[u8], t: i64| case.kind(secrets, h, b, t);
            let mut rows = vec![
                ("retired secret", k(&[&current], &h, b, now), "mismatch"),
                ("rotated list", k(&[&current, s], &h, b, now), "verified"),
                ("body changed", k(&[s], &h, &changed, now), "mismatch"),
                ("no signature", k(&[s], &nosig, b, now), "missing_header"),
                ("duplicated", k(&[s], &dup, b, now), MALFORMED),
                ("garbled", k(&[s], &garbled, b, now), MALFORMED),
                // A cut list may keep a well-formed entry, which then does not match.
                ("truncated", k(&[s], &cut, b, now), EITHER),
            ];
            if case.timestamp.is_some() {
                rows.extend([
                    ("too old", k(&[s], &h, b, ts + tol + 1), OUTSIDE),
                    ("too far ahead", k(&[s], &h, b, ts - tol - 1), OUTSIDE),
                    ("oldest allowed", k(&[s], &h, b, ts + tol), "verified"),
                    ("furthest allowed", k(&[s], &h, b, ts - tol), "verified"),
                ]);
            }
            for (name, _) in &case.headers {
                let got = k(&[s], &case.headers_with(name, 1, str::to_owned), b, now);
                // Headers a scheme does not sign (Shopify's topic) may go.
                rows.push(("a header removed", got, "missing_header verified"));
            }
            for (what, got, want) in rows {
                assert!(
                    want.split(' ').any(|w| w == got),
                    "{}: {what}: {got}",
                    case.name
                );
            }
            let rotated = case.verifier(&[&current, s]).verify(&h, b, now);
            assert_eq!(rotated.expect("verified").secret_index, Some(1));
        }
    }

    #[test]
    fn bad_configuration_is_refused_with_its_reason() {
        let refuse = |scheme: Scheme, secrets: &[&str]| {
            let secrets = secrets.iter().map(|s| SecretString::from(*s)).collect();
            Verifier::new(scheme, secrets, 300).expect_err("refused")
        };
        let hmac = |header: &str, prefix: Option<&str>| Scheme::Hmac {
            header: header.to_owned(),
            encoding: Encoding::Hex,
            prefix: prefix.map(str::to_owned),
        };
        assert_eq!(refuse(Scheme::Stripe, &[]), P::NoSecrets("stripe"));
        assert_eq!(refuse(Scheme::None, &["s"]), P::SecretsWithoutScheme);
        assert_eq!(refuse(Scheme::GitHub, &["ok", "s\n"]), P::BlankSecret(1));
        let whsec = refuse(Scheme::StandardWebhooks, &["whsec_not*b64"]);
        assert!(matches!(whsec, P::BadWebhookSecret { index: 0, .. }));
        let shown = format!("{whsec} {whsec:?}");
        assert!(
            shown.contains("base64") && !shown.contains("not*b64"),
            "{shown}"
        );
        assert_eq!(refuse(hmac("", None), &["s"]), P::EmptyHeaderName);
        assert!(P::EmptyHeaderName.to_string().contains("header name"));
        assert_eq!(
            refuse(hmac("x y", None), &["s"]),
            P::BadHeaderName("x y".into())
        );
        assert_eq!(refuse(hmac("x-sig", Some("")), &["s"]), P::EmptyPrefix);
        let negative = Verifier::new(Scheme::Slack, vec!["s".into()], -1);
        assert_eq!(negative.expect_err("refused"), P::NegativeTolerance(-1));
    }

    #[test]
    fn secrets_stay_out_of_debug_output_and_errors() {
        for case in cases() {
            let verifier = case.verifier(&[&case.secret]);
            let outcome = verifier.verify(&case.headers(), b"tampered", case.now);
            let error = outcome.as_ref().err().map(ToString::to_string);
            let shown = format!("{verifier:?} {outcome:?} {error:?}");
            assert!(
                shown.contains("1 redacted") && !shown.contains(&case.secret),
                "{shown}"
            );
        }
    }

    #[test]
    fn standard_webhooks_secret_prefix_is_optional() {
        for case in cases()
            .iter()
            .filter(|c| c.scheme == Scheme::StandardWebhooks)
        {
            let bare = &case.secret[crate::outbox::signing::WHSEC_PREFIX.len()..];
            let got = case.kind(&[bare], &case.headers(), case.body.as_bytes(), case.now);
            assert_eq!(got, case.expect, "{}", case.name);
        }
    }

    #[test]
    fn none_verifies_nothing_and_says_so() {
        let verifier = Verifier::new(Scheme::None, vec![], 300).expect("config");
        let verified = verifier.verify(&HeaderMap::new(), b"anything", 0);
        assert_eq!(verified, Ok(Verified::default()));
        assert_eq!(verifier.scheme().name(), "none");
    }

    #[test]
    fn hmac_header_name_is_matched_case_insensitively() {
        let json = r#"{"hmac":{"header":"X-Sig","encoding":"base64"}}"#;
        let scheme: Scheme = serde_json::from_str(json).expect("scheme parses");
        let verifier = Verifier::new(scheme, vec!["k".into()], 0).expect("config");
        let err = verifier.verify(&HeaderMap::new(), b"", 0);
        assert_eq!(err, Err(SignatureError::MissingHeader("x-sig".into())));
    }
}
