//! CORS, for browser frontends on other origins: tower-http's `CorsLayer`
//! built from `[server.cors]` and the tenants' `cors_origins`, and the
//! check that a credential is used only from an origin its tenant allows.
//!
//! A preflight carries no credential, so the tenant is not known when it
//! is answered: the layer allows the union of every list (the server's
//! `allowed_origins`, which hold for every tenant, and each tenant's
//! `cors_origins`). The actual request carries the credential, and `auth`
//! asks [`CorsPolicy::refuses`]: an origin that only *other* tenants list
//! is refused for this tenant's credential (403 `forbidden`), so a page
//! of tenant B cannot use a token of tenant A that leaked to it.
//!
//! An origin that no list names gets no CORS headers at all (the browser
//! fails the preflight, or keeps the answer from the page) and is counted
//! in `switchboard_cors_refused_total{kind="preflight"|"request"}`. The
//! server does not refuse such a request itself: same-origin pages (the
//! console) send their own origin on a POST, and non-browser clients send
//! none; requests whose origin is the gateway's own are not counted.
//!
//! What the layer answers for an allowed origin: methods `GET`, `POST`,
//! `DELETE`; request headers [`ALLOWED_HEADERS`]; response headers a page
//! may read, [`EXPOSED_HEADERS`]; `Access-Control-Max-Age`; and
//! `Access-Control-Allow-Credentials` only when configured (cookies; a
//! page's own `Authorization` header needs no credentials mode).

use std::{collections::HashMap, sync::Arc};

use axum::{
    http::{
        HeaderName, HeaderValue, Method,
        header::{self, HeaderMap},
        request::Parts,
    },
    response::Response,
};
use tower::{layer::util::Stack, util::MapResponseLayer};
use tower_http::cors::{AllowCredentials, AllowOrigin, CorsLayer, MaxAge};

use crate::{
    config::{Config, OriginPattern},
    telemetry::metrics::Metrics,
};

/// Request headers a page may send: credentials, JSON bodies, stream
/// rejoins, the AI SDK's version, trace context, and `Cache-Control`
/// (`EventSource` sends it).
pub const ALLOWED_HEADERS: [&str; 9] = [
    "authorization",
    "content-type",
    "last-event-id",
    "x-api-key",
    "x-ai-sdk-version",
    "traceparent",
    "tracestate",
    "x-request-id",
    "cache-control",
];

/// Response headers a page may read: the AI SDK's stream marker, rate
/// limits, the request id, timings, and the id of a session a request
/// created.
pub const EXPOSED_HEADERS: [&str; 7] = [
    "x-vercel-ai-ui-message-stream",
    "retry-after",
    "ratelimit",
    "ratelimit-policy",
    "x-request-id",
    "server-timing",
    "x-session-id",
];

/// The CORS layer and the response cleanup around it (see [`layer`]).
pub type CorsLayers = Stack<CorsLayer, MapResponseLayer<fn(Response) -> Response>>;

/// Which origins may use which tenant's credentials.
pub struct CorsPolicy {
    /// `server.cors.allowed_origins`: every tenant's credentials.
    shared: Vec<OriginPattern>,
    /// Each tenant's own `cors_origins`.
    tenants: HashMap<String, Vec<OriginPattern>>,
    allow_credentials: bool,
    max_age: std::time::Duration,
    metrics: Arc<Metrics>,
}

impl CorsPolicy {
    /// The policy, or `None` when CORS is off (no `[server.cors]` and no
    /// tenant's `cors_origins`).
    pub fn from_config(config: &Config, metrics: Arc<Metrics>) -> Option<Arc<Self>> {
        if !config.cors_enabled() {
            return None;
        }
        let cors = config.server.cors.as_ref();
        let tenants = (config.tenants.values())
            .filter(|t| !t.cors_origins.is_empty())
            .map(|t| (t.id.clone(), t.cors_origins.clone()))
            .collect();
        Some(Arc::new(Self {
            shared: cors.map(|c| c.allowed_origins.clone()).unwrap_or_default(),
            tenants,
            allow_credentials: cors.is_some_and(|c| c.allow_credentials),
            max_age: cors.map_or(crate::config::cors::DEFAULT_MAX_AGE, |c| c.max_age),
            metrics,
        }))
    }

    /// Whether some tenant's credentials may be used from `origin`: what a
    /// preflight can know.
    pub fn allows_someone(&self, origin: &str) -> bool {
        self.shared.iter().chain(self.tenants.values().flatten()).any(|o| o.matches(origin))
    }

    /// Whether a request from `origin` with `tenant`'s credential is
    /// refused: the origin is one only other tenants list. Counted.
    pub fn refuses(&self, origin: &HeaderValue, tenant: &str) -> bool {
        let Ok(origin) = origin.to_str() else { return false };
        if self.shared.iter().any(|o| o.matches(origin)) {
            return false;
        }
        let own = self.tenants.get(tenant).is_some_and(|list| list.iter().any(|o| o.matches(origin)));
        let others = self.tenants.iter().any(|(t, list)| t != tenant && list.iter().any(|o| o.matches(origin)));
        let refused = others && !own;
        if refused {
            self.metrics.cors_refused("tenant");
        }
        refused
    }

    /// The origin predicate of the layer: the union of every list; a
    /// refusal of a cross-origin request is counted.
    fn allow(&self, origin: &HeaderValue, request: &Parts) -> bool {
        let allowed = origin.to_str().is_ok_and(|o| self.allows_someone(o));
        if !allowed && !same_origin(origin, request) {
            let kind = if request.method == Method::OPTIONS { "preflight" } else { "request" };
            self.metrics.cors_refused(kind);
        }
        allowed
    }
}

/// The layers for the app's stack, or `None` when CORS is off: tower-http's
/// `CorsLayer` (it answers preflights itself, without calling the app), and
/// outside it a cleanup that takes the layer's other `Access-Control-*`
/// headers off answers that allow no origin, so a refused origin (or a
/// client that sent none) gets no CORS headers at all.
pub fn layer(policy: Option<&Arc<CorsPolicy>>) -> Option<CorsLayers> {
    let policy = policy?.clone();
    let headers = |names: &[&'static str]| names.iter().map(|n| HeaderName::from_static(n)).collect::<Vec<_>>();
    let origins = if policy.shared.contains(&OriginPattern::Any) {
        AllowOrigin::any()
    } else {
        let predicate = policy.clone();
        AllowOrigin::predicate(move |origin, request| predicate.allow(origin, request))
    };
    let mut cors = CorsLayer::new()
        .allow_origin(origins)
        .allow_methods([Method::GET, Method::POST, Method::DELETE])
        .allow_headers(headers(&ALLOWED_HEADERS))
        .expose_headers(headers(&EXPOSED_HEADERS))
        .max_age(MaxAge::exact(policy.max_age));
    if policy.allow_credentials {
        cors = cors.allow_credentials(AllowCredentials::yes());
    }
    Some(Stack::new(cors, MapResponseLayer::new(drop_unallowed as fn(Response) -> Response)))
}

/// The CORS headers of an answer that allows no origin, other than `Vary`
/// (which caches need either way).
const DROPPED_WITHOUT_ORIGIN: [HeaderName; 5] = [
    header::ACCESS_CONTROL_ALLOW_METHODS,
    header::ACCESS_CONTROL_ALLOW_HEADERS,
    header::ACCESS_CONTROL_MAX_AGE,
    header::ACCESS_CONTROL_EXPOSE_HEADERS,
    header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
];

fn drop_unallowed(mut response: Response) -> Response {
    let headers: &mut HeaderMap = response.headers_mut();
    if !headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN) {
        for name in DROPPED_WITHOUT_ORIGIN {
            headers.remove(name);
        }
    }
    response
}

/// Whether `origin` is the gateway's own (the `Host` the request was sent
/// to): a same-origin page's POST, not a refusal worth counting. Proxies
/// that forward the host without its port (nginx's `$host`) are matched on
/// the host alone.
fn same_origin(origin: &HeaderValue, request: &Parts) -> bool {
    let Ok(origin) = origin.to_str() else { return false };
    let authority = origin.split_once("://").map_or(origin, |(_, a)| a);
    let host = request.headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let Some(host) = host.or_else(|| request.uri.authority().map(|a| a.as_str())) else { return false };
    if authority.eq_ignore_ascii_case(host) {
        return true;
    }
    let without_port = match authority.rsplit_once(':') {
        Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => authority,
    };
    host.bytes().all(|b| b != b':') && without_port.eq_ignore_ascii_case(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(shared: &[&str], tenants: &[(&str, &[&str])]) -> CorsPolicy {
        let parse = |list: &[&str]| list.iter().map(|o| OriginPattern::parse(o).unwrap()).collect::<Vec<_>>();
        CorsPolicy {
            shared: parse(shared),
            tenants: tenants.iter().map(|(t, list)| (t.to_string(), parse(list))).collect(),
            allow_credentials: false,
            max_age: std::time::Duration::from_secs(600),
            metrics: Arc::new(Metrics::new()),
        }
    }

    #[test]
    fn an_origin_only_another_tenant_lists_is_refused_for_this_tenant() {
        let p = policy(&["https://shared.example"], &[("a", &["https://a.example"]), ("b", &["https://b.example"])]);
        let origin = |o: &'static str| HeaderValue::from_static(o);
        assert!(p.allows_someone("https://b.example"), "the preflight allows the union");
        assert!(p.refuses(&origin("https://b.example"), "a"));
        assert!(!p.refuses(&origin("https://b.example"), "b"));
        assert!(!p.refuses(&origin("https://shared.example"), "a"), "shared origins hold for every tenant");
        assert!(!p.refuses(&origin("https://elsewhere.example"), "a"), "no list names it: not this check's");
        assert!(p.metrics.render().contains("switchboard_cors_refused_total{kind=\"tenant\"} 1"));
    }

    #[test]
    fn the_gateways_own_origin_is_same_origin_with_or_without_the_port_in_host() {
        let request = |host: &'static str| {
            let (parts, ()) = axum::http::Request::builder()
                .method(Method::POST)
                .uri("/v1/sessions")
                .header(header::HOST, host)
                .body(())
                .unwrap()
                .into_parts();
            parts
        };
        let origin = HeaderValue::from_static("http://gw.example:8080");
        assert!(same_origin(&origin, &request("gw.example:8080")));
        assert!(same_origin(&origin, &request("gw.example")), "nginx's $host has no port");
        assert!(!same_origin(&origin, &request("gw.example:9090")));
        assert!(!same_origin(&origin, &request("other.example")));
    }
}
