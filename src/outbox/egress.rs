//! What may leave the process. Every URL the dispatcher sends to (an
//! effect, a decision callback, a reconciliation probe) is checked against
//! its target's allow-list at send time, after its placeholders are
//! filled, and only an [`EgressUrl`] can be sent: a stored URL edited in
//! the database, or a probe template whose filled values would change the
//! host, is refused there and never sent.
//!
//! Placeholders (`{idempotency_key}`, `{external_ref}`) are filled with
//! percent-encoded values: everything outside RFC 3986's unreserved set is
//! encoded, and a segment that would be only dots has its dots encoded
//! too, so a value can never add a `/`, a `?`, a `..` segment, or change
//! the scheme, host or port. A placeholder before the path (in the scheme
//! or authority) is refused, at commit and again at send.

use super::TargetConfig;

/// The placeholders a probe template may hold.
pub const PLACEHOLDERS: [&str; 2] = ["{idempotency_key}", "{external_ref}"];

/// A URL checked against its target's allow-list, ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressUrl(url::Url);

impl EgressUrl {
    /// The URL as sent.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The parsed URL.
    pub fn url(&self) -> &url::Url {
        &self.0
    }
}

/// Why a URL may not leave: named with the target, never with a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("egress refused: {problem} (target {target})")]
pub struct EgressRefused {
    /// The target the URL was meant for.
    pub target: String,
    /// What is wrong with it.
    pub problem: String,
}

impl TargetConfig {
    /// `url` as it may be sent to this target.
    ///
    /// # Errors
    /// [`EgressRefused`] when it does not parse or lies outside the
    /// target's allow-list ([`TargetConfig::resolve`]).
    pub fn check_egress(&self, url: &str) -> Result<EgressUrl, EgressRefused> {
        let refused = |problem: String| EgressRefused {
            target: self.name.clone(),
            problem,
        };
        if self.resolve(url).is_none() {
            return Err(refused(format!("{url} is outside the target's allow-list")));
        }
        url::Url::parse(url)
            .map(EgressUrl)
            .map_err(|e| refused(format!("{url} is not a URL: {e}")))
    }

    /// A probe template with its placeholders filled (`values` in
    /// [`PLACEHOLDERS`] order), checked like any URL that leaves.
    ///
    /// # Errors
    /// [`EgressRefused`] when a placeholder stands before the path or the
    /// filled URL lies outside the allow-list.
    pub fn probe_egress(
        &self,
        template: &str,
        values: [&str; 2],
    ) -> Result<EgressUrl, EgressRefused> {
        let filled = fill(template, values).map_err(|problem| EgressRefused {
            target: self.name.clone(),
            problem,
        })?;
        self.check_egress(&filled)
    }

    /// Checks a probe template at commit: placeholders only in the path or
    /// query, and the template inside the target with any values.
    ///
    /// # Errors
    /// What is wrong, in words.
    pub fn check_probe_template(&self, template: &str) -> Result<(), String> {
        let filled = fill(template, ["x", "x"])?;
        if self.resolve(&filled).is_none() {
            return Err("must lie inside the target's base URL".into());
        }
        Ok(())
    }
}

/// `template` with each placeholder replaced by its value, encoded for
/// where it stands (a path segment or the query).
///
/// # Errors
/// A placeholder in the scheme or authority.
pub fn fill(template: &str, values: [&str; 2]) -> Result<String, String> {
    let path_start = template
        .find("://")
        .and_then(|s| template[s + 3..].find(['/', '?', '#']).map(|i| s + 3 + i))
        .ok_or("must be an absolute URL with a path")?;
    let (origin, rest) = template.split_at(path_start);
    if PLACEHOLDERS.iter().any(|p| origin.contains(p)) {
        return Err("placeholders may stand only in the path or the query, never in the scheme, host or port".into());
    }
    let query_start = rest.find(['?', '#']).unwrap_or(rest.len());
    let (path, query) = rest.split_at(query_start);
    let segments: Vec<String> = path.split('/').map(|s| segment(s, values)).collect();
    Ok(format!(
        "{origin}{}{}",
        segments.join("/"),
        substitute(query, values)
    ))
}

/// One path segment filled; a segment a value made `.` or `..` keeps its
/// dots encoded, so it is never a dot segment.
fn segment(template: &str, values: [&str; 2]) -> String {
    let filled = substitute(template, values);
    let only_dots = !filled.is_empty() && filled.bytes().all(|b| b == b'.');
    if only_dots && filled != template {
        filled.replace('.', "%2E")
    } else {
        filled
    }
}

fn substitute(template: &str, values: [&str; 2]) -> String {
    let mut out = template.to_owned();
    for (placeholder, value) in PLACEHOLDERS.iter().zip(values) {
        out = out.replace(placeholder, &encode(value));
    }
    out
}

/// Percent-encodes every byte outside RFC 3986's unreserved set
/// (`A-Z a-z 0-9 - . _ ~`).
pub fn encode(value: &str) -> String {
    percent_encode(value, |b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
}

/// Writes every byte of `text` that `keep` refuses as `%XX`.
pub fn percent_encode(text: &str, keep: impl Fn(u8) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if keep(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(base: &str) -> TargetConfig {
        toml::from_str(&format!("name = \"t\"\nbase_url = \"{base}\"\n")).unwrap()
    }

    #[test]
    fn values_are_encoded_as_segments_and_query_values() {
        let t = "http://h.example/v1/probe/{idempotency_key}?ref={external_ref}";
        assert_eq!(
            fill(t, ["ns:k/../a b", "x&y=z#"]).unwrap(),
            "http://h.example/v1/probe/ns%3Ak%2F..%2Fa%20b?ref=x%26y%3Dz%23"
        );
        assert_eq!(
            fill("http://h.example/v1/{idempotency_key}/x", ["..", ""]).unwrap(),
            "http://h.example/v1/%2E%2E/x"
        );
        assert_eq!(
            fill(
                "http://h.example/v1/{idempotency_key}{external_ref}",
                [".", "."]
            )
            .unwrap(),
            "http://h.example/v1/%2E%2E"
        );
        assert_eq!(
            fill("http://h.example/v1/a.{idempotency_key}", [".", ""]).unwrap(),
            "http://h.example/v1/a.."
        );
    }

    #[test]
    fn placeholders_before_the_path_are_refused() {
        for t in [
            "http://127.0.0.0{idempotency_key}1:9/v1/probe",
            "http://h.example:{external_ref}/v1",
            "{idempotency_key}://h.example/v1",
            "http://{idempotency_key}@h.example/v1",
            "http://h.example{idempotency_key}",
        ] {
            assert!(fill(t, ["2", "2"]).is_err(), "{t}");
        }
    }

    #[test]
    fn the_filled_url_is_checked_not_a_sample() {
        let t = target("http://127.0.0.1:19001");
        // The sample `127.0.0.0x1` parses as 127.0.0.1; the key `2` makes
        // it 127.0.0.021, that is 127.0.0.17.
        let template = "http://127.0.0.0{idempotency_key}1:19001/v1/probe";
        assert!(t.check_probe_template(template).is_err());
        assert!(t.probe_egress(template, ["2", ""]).is_err());
        assert!(t.check_egress("http://127.0.0.021:19001/v1/probe").is_err());
        let ok = t
            .probe_egress(
                "http://127.0.0.1:19001/v1/probe/{idempotency_key}",
                ["../../admin", ""],
            )
            .unwrap();
        assert_eq!(
            ok.as_str(),
            "http://127.0.0.1:19001/v1/probe/..%2F..%2Fadmin"
        );
    }
}
