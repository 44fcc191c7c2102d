//! Who an ID token names: the subject and roles read from the configured
//! claims of a token whose signature, issuer, audience, expiry and nonce
//! were already checked ([`super::flow`]).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::Value;

use super::OidcError;

/// A person as the provider vouches for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The subject (the audit's actor).
    pub subject: String,
    /// The roles.
    pub roles: Vec<String>,
}

/// The most roles kept from one token, and the longest name of either.
const MAX_ROLES: usize = 64;
const MAX_LEN: usize = 255;

/// The claims of a compact JWS whose signature was verified.
///
/// # Errors
/// [`OidcError::Claims`] when the payload is not a JSON object.
pub fn payload(compact: &str) -> Result<Value, OidcError> {
    let part = compact
        .split('.')
        .nth(1)
        .ok_or_else(|| OidcError::Claims("the ID token is not a compact JWS".into()))?;
    let bytes = URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .map_err(|_| OidcError::Claims("the ID token's payload is not base64url".into()))?;
    match serde_json::from_slice(&bytes) {
        Ok(v @ Value::Object(_)) => Ok(v),
        _ => Err(OidcError::Claims(
            "the ID token's payload is not a JSON object".into(),
        )),
    }
}

/// The claim `name`: a JSON pointer when it starts with `/`, else a
/// top-level claim (whose name may hold dots or slashes-free text).
fn claim<'a>(claims: &'a Value, name: &str) -> Option<&'a Value> {
    if name.starts_with('/') {
        claims.pointer(name)
    } else {
        claims.get(name)
    }
}

/// The subject and roles of `claims`, from the configured claim names.
///
/// # Errors
/// [`OidcError::Claims`] when the subject claim is missing, empty, too
/// long, or not text; roles that are not text are refused too, rather than
/// silently dropped.
pub fn identity(
    claims: &Value,
    subject_claim: &str,
    roles_claim: Option<&str>,
) -> Result<Identity, OidcError> {
    let subject = match claim(claims, subject_claim) {
        Some(Value::String(s)) if !s.trim().is_empty() && s.len() <= MAX_LEN => s.trim().to_owned(),
        Some(_) => {
            return Err(OidcError::Claims(format!(
                "the ID token's {subject_claim:?} claim is empty, too long or not text"
            )))
        }
        None => {
            return Err(OidcError::Claims(format!(
                "the ID token has no {subject_claim:?} claim (approvals.oidc.subject_claim)"
            )))
        }
    };
    let roles = match roles_claim.and_then(|name| claim(claims, name).map(|v| (name, v))) {
        None | Some((_, Value::Null)) => Vec::new(),
        Some((_, Value::String(s))) => split_roles(s),
        Some((name, Value::Array(items))) => {
            let mut roles = Vec::new();
            for item in items {
                let Value::String(s) = item else {
                    return Err(OidcError::Claims(format!(
                        "the ID token's {name:?} claim holds a role that is not text"
                    )));
                };
                roles.extend(split_roles(s));
            }
            roles
        }
        Some((name, _)) => {
            return Err(OidcError::Claims(format!(
                "the ID token's {name:?} claim is neither text nor a list of text"
            )))
        }
    };
    if roles.len() > MAX_ROLES || roles.iter().any(|r| r.len() > MAX_LEN) {
        return Err(OidcError::Claims(format!(
            "the ID token names more than {MAX_ROLES} roles, or one too long"
        )));
    }
    Ok(Identity { subject, roles })
}

/// Roles as text: comma- or space-separated (`"finance ops"`, `"a,b"`).
fn split_roles(text: &str) -> Vec<String> {
    text.split([',', ' '])
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subject_and_roles_come_from_the_configured_claims() {
        let claims = json!({"sub": "u-1", "preferred_username": "carol",
            "groups": ["finance", "support-lead"], "realm_access": {"roles": ["ops"]},
            "scope_roles": "a, b c"});
        let got = identity(&claims, "preferred_username", Some("groups")).unwrap();
        assert_eq!(got.subject, "carol");
        assert_eq!(got.roles, ["finance", "support-lead"]);
        let keycloak = identity(&claims, "sub", Some("/realm_access/roles")).unwrap();
        assert_eq!(
            (keycloak.subject.as_str(), keycloak.roles),
            ("u-1", vec!["ops".to_owned()])
        );
        assert_eq!(
            identity(&claims, "sub", Some("scope_roles")).unwrap().roles,
            ["a", "b", "c"]
        );
        assert!(identity(&claims, "sub", Some("missing"))
            .unwrap()
            .roles
            .is_empty());
        assert!(identity(&claims, "sub", None).unwrap().roles.is_empty());
    }

    #[test]
    fn a_missing_or_odd_claim_is_refused_plainly() {
        let claims = json!({"sub": "", "n": 5, "roles": [1], "email": "x@example.com"});
        for (subject, roles) in [
            ("sub", None),
            ("missing", None),
            ("n", None),
            ("email", Some("roles")),
            ("email", Some("n")),
        ] {
            assert!(
                matches!(identity(&claims, subject, roles), Err(OidcError::Claims(_))),
                "{subject} {roles:?}"
            );
        }
    }

    #[test]
    fn the_payload_is_read_from_the_middle_part() {
        let body = URL_SAFE_NO_PAD.encode(br#"{"sub":"a"}"#);
        assert_eq!(payload(&format!("h.{body}.s")).unwrap()["sub"], "a");
        assert!(payload("nodots").is_err());
        assert!(payload(&format!("h.{}.s", URL_SAFE_NO_PAD.encode(b"[1]"))).is_err());
    }
}
