//! Which browser origins may call the gateway: `[server.cors]` and each
//! tenant's `cors_origins`, as written (`RawCors`) and as checked
//! ([`CorsConfig`], [`OriginPattern`]).
//!
//! This module only describes origins and matches them; `crate::cors`
//! builds the `CorsLayer` and the per-tenant check from them, and
//! `validate/cors.rs` reports what is wrong with a list.

use std::time::Duration;

use serde::Deserialize;

/// `[server.cors]` as written.
#[derive(Debug, Default, Deserialize)]
pub struct RawCors {
    pub allowed_origins: Option<Vec<String>>,
    pub allow_credentials: Option<bool>,
    pub max_age_secs: Option<u64>,
}

/// `[server.cors]`, checked. Every tenant's credentials may be used from
/// `allowed_origins`; a tenant's `cors_origins` add origins for that tenant
/// only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorsConfig {
    pub allowed_origins: Vec<OriginPattern>,
    /// `Access-Control-Allow-Credentials: true`: pages may send cookies and
    /// HTTP authentication (`credentials: "include"`). Not needed for
    /// `Authorization` or `X-API-Key` headers a page sets itself. Never
    /// with `*` (validation refuses it; browsers would refuse the answer).
    pub allow_credentials: bool,
    /// How long a browser may cache a preflight (`Access-Control-Max-Age`).
    pub max_age: Duration,
}

/// The preflight cache time when `max_age_secs` is not set: long enough to
/// spare a chat page a preflight per message, short enough that a changed
/// configuration is seen soon. Chromium caps it at 2 h, Firefox at 24 h.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(600);

/// One entry of an origin list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginPattern {
    /// `*`: every origin. Only in `server.cors.allowed_origins`, alone, and
    /// without credentials.
    Any,
    /// `scheme://host[:port]`, as browsers send it in `Origin` (lowercase,
    /// no path, the default port left out).
    Exact(String),
    /// `scheme://host:*`: that scheme and host on any port, or none (a
    /// developer's `http://localhost:5173`, whatever the port).
    AnyPort { scheme: String, host: String },
}

impl OriginPattern {
    /// Parses one entry; the message says what a correct one looks like.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text == "*" {
            return Ok(Self::Any);
        }
        let shape = "write scheme://host or scheme://host:port (no path, no trailing slash), or scheme://host:* \
                     for any port";
        let lower = text.to_ascii_lowercase();
        let Some((scheme, authority)) = lower.split_once("://") else {
            return Err(format!("{text:?} is not an origin: {shape}"));
        };
        if scheme != "http" && scheme != "https" {
            return Err(format!("{text:?} is not an http or https origin"));
        }
        if authority.contains(['/', '?', '#', '@', ' ']) || authority.is_empty() {
            return Err(format!("{text:?} is not an origin: {shape}"));
        }
        if (authority.contains('*') && !authority.ends_with(":*")) || authority.matches('*').count() > 1 {
            return Err(format!("{text:?}: only the port may be a wildcard (list each host)"));
        }
        let (host, port) = split_port(authority);
        if !valid_host(host) {
            return Err(format!("{text:?} is not an origin: {shape}"));
        }
        match port {
            None => Ok(Self::Exact(lower)),
            Some("*") => Ok(Self::AnyPort { scheme: scheme.to_string(), host: host.to_string() }),
            Some(port) if port.parse::<u16>().is_ok_and(|p| p > 0) => Ok(Self::Exact(lower)),
            Some(_) => Err(format!("{text:?} has an invalid port")),
        }
    }

    /// Whether the `Origin` a browser sent is this one. Browsers send
    /// origins in lowercase; anything else is compared as sent.
    pub fn matches(&self, origin: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Exact(exact) => exact == origin,
            Self::AnyPort { scheme, host } => {
                let Some(rest) = origin.strip_prefix(scheme.as_str()).and_then(|r| r.strip_prefix("://")) else {
                    return false;
                };
                let Some(rest) = rest.strip_prefix(host.as_str()) else { return false };
                rest.is_empty()
                    || rest.strip_prefix(':').is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            }
        }
    }
}

/// `host` and the text after its port colon, if any (`[::1]:8080` too).
fn split_port(authority: &str) -> (&str, Option<&str>) {
    let after_host = authority.rfind(']').map_or(0, |i| i + 1);
    match authority[after_host..].rfind(':') {
        Some(i) => (&authority[..after_host + i], Some(&authority[after_host + i + 1..])),
        None => (authority, None),
    }
}

/// A DNS name, an IPv4 address, or a bracketed IPv6 address.
fn valid_host(host: &str) -> bool {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inner.parse::<std::net::Ipv6Addr>().is_ok();
    }
    !host.is_empty()
        && !host.starts_with(['.', '-'])
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_parse_as_browsers_send_them() {
        assert_eq!(OriginPattern::parse("*"), Ok(OriginPattern::Any));
        assert_eq!(
            OriginPattern::parse("https://App.Example.com"),
            Ok(OriginPattern::Exact("https://app.example.com".into()))
        );
        assert_eq!(
            OriginPattern::parse("http://localhost:*"),
            Ok(OriginPattern::AnyPort { scheme: "http".into(), host: "localhost".into() })
        );
        assert!(OriginPattern::parse("http://[::1]:8080").is_ok());
        for bad in [
            "https://app.example.com/",
            "app.example.com",
            "ftp://example.com",
            "https://*.example.com",
            "https://example.com:99999",
            "https://user@example.com",
            "https://",
            "http://localhost:*:*",
        ] {
            assert!(OriginPattern::parse(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn any_port_matches_every_port_of_that_scheme_and_host_only() {
        let local = OriginPattern::parse("http://localhost:*").unwrap();
        assert!(local.matches("http://localhost:5173"));
        assert!(local.matches("http://localhost"));
        assert!(!local.matches("https://localhost:5173"));
        assert!(!local.matches("http://localhost.evil.example:80"));
        assert!(!local.matches("http://localhostx:80"));
        assert!(!local.matches("http://localhost:"));
        let exact = OriginPattern::parse("https://app.example.com").unwrap();
        assert!(exact.matches("https://app.example.com"));
        assert!(!exact.matches("https://app.example.com:8443"));
        assert!(!exact.matches("http://app.example.com"));
    }
}
