//! A proxied request: its fingerprint, the URL it goes to (checked against
//! the target's allow-list), and the headers that pass upstream.

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method};
use secrecy::ExposeSecret;

use super::config::is_hop_by_hop;
use super::ProxyConfig;
use crate::ledger::PayloadHash;
use crate::outbox::egress::EgressUrl;
use crate::outbox::TargetConfig;

/// A request as the caller sent it to `/proxy/{name}/{path}`.
#[derive(Debug, Clone)]
pub struct Inbound {
    /// Its method.
    pub method: Method,
    /// The path after `/proxy/{name}`, as received (still percent-encoded),
    /// empty or starting with `/`.
    pub path: String,
    /// The query, as received, without `?`.
    pub query: Option<String>,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body, read within the proxy's limit.
    pub body: axum::body::Bytes,
}

/// Why a request may not go upstream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PathRefused(pub String);

impl Inbound {
    /// The fingerprint (draft §2.4): SHA-256 over the method, path, query,
    /// body and the configured headers, each length-prefixed so no two
    /// different requests share their material.
    pub fn fingerprint(&self, proxy: &ProxyConfig) -> PayloadHash {
        let mut material = b"oncegate-proxy-fingerprint-v1".to_vec();
        let mut part = |bytes: &[u8]| {
            material.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
            material.extend_from_slice(bytes);
        };
        part(self.method.as_str().as_bytes());
        part(self.path.as_bytes());
        match &self.query {
            Some(q) => part(format!("?{q}").as_bytes()),
            None => part(b""),
        }
        part(&self.body);
        let mut names: Vec<String> = proxy
            .fingerprint_headers
            .iter()
            .map(|n| n.to_ascii_lowercase())
            .collect();
        names.sort();
        names.dedup();
        for name in names {
            part(name.as_bytes());
            for value in self.headers.get_all(name.as_str()) {
                part(value.as_bytes());
            }
            part(b"\n");
        }
        PayloadHash::of_bytes(&material)
    }

    /// The URL this request goes to: the path joined onto the target's
    /// base URL, with the query, checked against the allow-list as it will
    /// be sent (dot segments and encoded slashes cannot leave the base).
    ///
    /// # Errors
    /// [`PathRefused`] when it lies outside the target's base URL.
    pub fn upstream_url(&self, target: &TargetConfig) -> Result<EgressUrl, PathRefused> {
        let joined = target.join(&self.path).map_err(PathRefused)?;
        let url = match &self.query {
            Some(q) => format!("{joined}?{q}"),
            None => joined,
        };
        target
            .check_egress(&url)
            .map_err(|e| PathRefused(e.problem))
    }

    /// The headers sent upstream: the caller's, less hop-by-hop headers
    /// (and those `Connection` names), `Host` and `Content-Length` (set for
    /// the upstream connection), the caller's oncegate token and key, and
    /// any header the target sets itself; then the target's key header
    /// (`upstream_key`) and its secret headers, added only here.
    pub fn upstream_headers(&self, target: &TargetConfig, upstream_key: Option<&str>) -> HeaderMap {
        let named: Vec<String> = self
            .headers
            .get_all("connection")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|n| n.trim().to_ascii_lowercase())
            .collect();
        let own = |name: &str| {
            name.eq_ignore_ascii_case(&target.idempotency_header)
                || target
                    .secret_headers
                    .keys()
                    .any(|s| s.eq_ignore_ascii_case(name))
        };
        let mut out = HeaderMap::new();
        for (name, value) in &self.headers {
            let n = name.as_str();
            let dropped = is_hop_by_hop(n)
                || named.iter().any(|c| c == n)
                || matches!(
                    n,
                    "host" | "content-length" | "authorization" | "idempotency-key" | "expect"
                )
                || own(n);
            if !dropped {
                out.append(name.clone(), value.clone());
            }
        }
        if let Some(key) = upstream_key {
            insert(&mut out, &target.idempotency_header, key);
        }
        for (name, value) in &target.secret_headers {
            insert(&mut out, name, value.expose_secret());
        }
        out
    }
}

fn insert(headers: &mut HeaderMap, name: &str, value: &str) {
    if let (Ok(name), Ok(value)) = (
        HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_str(value),
    ) {
        headers.insert(name, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> TargetConfig {
        toml::from_str(
            "name = \"crm\"\nbase_url = \"http://127.0.0.1:9/api\"\n\
             [secret_headers]\nX-Api-Key = \"s3cr3t\"\n",
        )
        .unwrap()
    }

    fn inbound(path: &str, query: Option<&str>, body: &'static [u8]) -> Inbound {
        Inbound {
            method: Method::POST,
            path: path.into(),
            query: query.map(str::to_owned),
            headers: HeaderMap::new(),
            body: axum::body::Bytes::from_static(body),
        }
    }

    fn proxy(headers: &[&str]) -> ProxyConfig {
        let list: Vec<String> = headers.iter().map(|h| format!("{h:?}")).collect();
        toml::from_str(&format!(
            "name = \"crm\"\ntarget = \"crm\"\nfingerprint_headers = [{}]",
            list.join(", ")
        ))
        .unwrap()
    }

    #[test]
    fn the_fingerprint_covers_method_path_query_body_and_chosen_headers() {
        let p = proxy(&["X-Tenant"]);
        let base = inbound("/leads", Some("a=1"), b"{}");
        let fp = base.fingerprint(&p);
        assert_eq!(fp, base.clone().fingerprint(&p));
        let mut other = base.clone();
        other.method = Method::PUT;
        assert_ne!(other.fingerprint(&p), fp);
        assert_ne!(inbound("/lead", Some("a=1"), b"{}").fingerprint(&p), fp);
        assert_ne!(inbound("/leads", Some("a=2"), b"{}").fingerprint(&p), fp);
        assert_ne!(inbound("/leads", None, b"{}").fingerprint(&p), fp);
        assert_ne!(inbound("/leads", Some("a=1"), b"{ }").fingerprint(&p), fp);
        // Moving bytes between parts changes it too.
        assert_ne!(
            inbound("/leads?a=1", None, b"{}").fingerprint(&p),
            inbound("/leads", Some("a=1"), b"{}").fingerprint(&p)
        );
        let mut tenant = base.clone();
        tenant
            .headers
            .insert("x-tenant", HeaderValue::from_static("eu"));
        assert_ne!(tenant.fingerprint(&p), fp);
        let mut unlisted = base.clone();
        unlisted
            .headers
            .insert("x-trace", HeaderValue::from_static("1"));
        assert_eq!(unlisted.fingerprint(&p), fp);
    }

    #[test]
    fn paths_outside_the_base_are_refused() {
        let t = target();
        let ok = inbound("/leads/7", Some("x=%2F"), b"")
            .upstream_url(&t)
            .unwrap();
        assert_eq!(ok.as_str(), "http://127.0.0.1:9/api/leads/7?x=%2F");
        assert_eq!(
            inbound("", None, b"").upstream_url(&t).unwrap().as_str(),
            "http://127.0.0.1:9/api"
        );
        for path in [
            "/../admin",
            "/..%2fadmin",
            "/%2e%2e/admin",
            "/a/../../admin",
        ] {
            assert!(inbound(path, None, b"").upstream_url(&t).is_err(), "{path}");
        }
    }

    #[test]
    fn hop_by_hop_credentials_and_the_key_stay_behind() {
        let mut req = inbound("/x", None, b"");
        for (name, value) in [
            ("connection", "keep-alive, x-private"),
            ("x-private", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("trailer", "x"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("proxy-authorization", "Basic x"),
            ("host", "oncegate.example"),
            ("authorization", "Bearer og_token"),
            ("idempotency-key", "\"k\""),
            ("x-api-key", "forged"),
            ("content-type", "application/json"),
        ] {
            req.headers.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        let out = req.upstream_headers(&target(), Some("proxy:crm:n8n:k"));
        let names: Vec<&str> = out.keys().map(HeaderName::as_str).collect();
        assert_eq!(out["content-type"], "application/json");
        assert_eq!(out["idempotency-key"], "proxy:crm:n8n:k");
        assert_eq!(out["x-api-key"], "s3cr3t");
        assert_eq!(out.get_all("x-api-key").iter().count(), 1);
        assert_eq!(names.len(), 3, "{names:?}");
    }
}
