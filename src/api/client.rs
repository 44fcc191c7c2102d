//! The client's address as the request log shows it.
//!
//! Behind a TLS proxy every connection comes from the proxy, so the TCP
//! peer says nothing about the client. The proxy passes the address it saw
//! in `X-Forwarded-For` (or `X-Real-IP`), but anyone can send those
//! headers, so they are read only when the peer is one of
//! `server.trusted_proxies`; from any other peer the client is the peer.
//! `X-Forwarded-For` is read from the right: each trusted hop is skipped,
//! and the first address that is not a trusted proxy is the client (the
//! entries left of it were written by the client itself and are not
//! believed). docs/tls.md shows the nginx side.

use std::net::{IpAddr, SocketAddr};

use axum::http::HeaderMap;

/// The proxy's list of the addresses a request passed through.
const FORWARDED_FOR: &str = "x-forwarded-for";
/// The single address nginx's `proxy_set_header X-Real-IP` passes.
const REAL_IP: &str = "x-real-ip";

/// The client of a request that came from `peer`: the peer itself, or,
/// when the peer is a trusted proxy, the address the proxy passed.
/// `None` only when the server did not record the peer.
pub fn client_address(
    peer: Option<SocketAddr>,
    headers: &HeaderMap,
    trusted: &[IpAddr],
) -> Option<IpAddr> {
    let peer = peer?.ip();
    if !trusted.contains(&peer) {
        return Some(peer);
    }
    let hops = forwarded_hops(headers);
    if hops.is_empty() {
        return Some(real_ip(headers).unwrap_or(peer));
    }
    // From the right: the last hop a trusted proxy vouches for.
    let mut client = peer;
    for hop in hops.iter().rev() {
        match hop {
            Some(ip) => {
                client = *ip;
                if !trusted.contains(ip) {
                    break;
                }
            }
            // Not an address: nothing left of it can be believed.
            None => break,
        }
    }
    Some(client)
}

/// Every `X-Forwarded-For` entry in order (several headers read as one
/// list); `None` for an entry that is not an IP address.
fn forwarded_hops(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    headers
        .get_all(FORWARDED_FOR)
        .iter()
        .flat_map(|value| {
            value.to_str().map_or_else(
                |_| vec![None],
                |text| text.split(',').map(parse_hop).collect(),
            )
        })
        .collect()
}

fn parse_hop(text: &str) -> Option<IpAddr> {
    text.trim().parse().ok()
}

/// `X-Real-IP` when it is sent once and is an address.
fn real_ip(headers: &HeaderMap) -> Option<IpAddr> {
    let mut values = headers.get_all(REAL_IP).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    parse_hop(value.to_str().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    fn client(peer: &str, pairs: &[(&'static str, &'static str)], trusted: &[&str]) -> String {
        let trusted: Vec<IpAddr> = trusted.iter().map(|t| t.parse().unwrap()).collect();
        client_address(Some(peer.parse().unwrap()), &headers(pairs), &trusted)
            .unwrap()
            .to_string()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_sends() {
        let forged = [
            ("x-forwarded-for", "203.0.113.9"),
            ("x-real-ip", "203.0.113.9"),
        ];
        assert_eq!(client("198.51.100.7:4000", &forged, &[]), "198.51.100.7");
        assert_eq!(
            client("198.51.100.7:4000", &forged, &["127.0.0.1"]),
            "198.51.100.7"
        );
    }

    #[test]
    fn a_trusted_proxy_names_the_client() {
        let trusted = ["127.0.0.1"];
        let xff = [("x-forwarded-for", "198.51.100.7")];
        assert_eq!(client("127.0.0.1:5000", &xff, &trusted), "198.51.100.7");
        let real = [("x-real-ip", "2001:db8::7")];
        assert_eq!(client("127.0.0.1:5000", &real, &trusted), "2001:db8::7");
        assert_eq!(client("127.0.0.1:5000", &[], &trusted), "127.0.0.1");
    }

    #[test]
    fn entries_a_client_wrote_itself_are_not_believed() {
        let trusted = ["127.0.0.1", "10.0.0.2"];
        // The client sent "203.0.113.9"; the proxies appended what they saw.
        let appended = [("x-forwarded-for", "203.0.113.9, 198.51.100.7, 10.0.0.2")];
        assert_eq!(
            client("127.0.0.1:5000", &appended, &trusted),
            "198.51.100.7"
        );
        let split = [
            ("x-forwarded-for", "203.0.113.9"),
            ("x-forwarded-for", "198.51.100.7"),
        ];
        assert_eq!(client("127.0.0.1:5000", &split, &trusted), "198.51.100.7");
        let garbage = [("x-forwarded-for", "203.0.113.9, not-an-ip, 10.0.0.2")];
        assert_eq!(client("127.0.0.1:5000", &garbage, &trusted), "10.0.0.2");
        let all_trusted = [("x-forwarded-for", "10.0.0.2")];
        assert_eq!(client("127.0.0.1:5000", &all_trusted, &trusted), "10.0.0.2");
    }
}
