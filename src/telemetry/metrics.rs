//! Prometheus metrics for one app instance, rendered by `GET /metrics`.
//!
//! Labels are low-cardinality only: route templates, methods, status codes,
//! tenant ids and error codes; never session or user ids.

use std::time::Duration;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, histogram::Histogram},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// The matched route template (`/v1/sessions/{id}`), or `unmatched`.
    pub route: String,
    pub method: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RateLimitLabels {
    pub tenant: String,
    /// `allowed`, `limited_local`, `limited_global`, `store_error_refused`,
    /// `store_error_allowed`, `limited_sessions`, `limited_tokens`.
    pub outcome: String,
}

pub struct Metrics {
    registry: Registry,
    pub rate_limits: Family<RateLimitLabels, Counter>,
    pub http_requests: Family<HttpLabels, Counter>,
    pub http_duration: Family<RouteLabels, Histogram>,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("switchboard");
        let http_requests = Family::<HttpLabels, Counter>::default();
        registry.register("http_requests", "HTTP requests answered, by route and status", http_requests.clone());
        let http_duration = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            // 1 ms .. ~33 s; streams are measured to their first byte.
            Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 16))
        });
        registry.register(
            "http_request_duration_seconds",
            "Time until the response head was sent",
            http_duration.clone(),
        );
        let rate_limits = Family::<RateLimitLabels, Counter>::default();
        registry.register("rate_limit_decisions", "Rate-limit decisions by tenant and outcome", rate_limits.clone());
        Self { registry, rate_limits, http_requests, http_duration }
    }

    pub fn observe_http(&self, route: &str, method: &str, status: u16, elapsed: Duration) {
        self.http_requests
            .get_or_create(&HttpLabels { route: route.to_string(), method: method.to_string(), status })
            .inc();
        self.http_duration.get_or_create(&RouteLabels { route: route.to_string() }).observe(elapsed.as_secs_f64());
    }

    pub fn rate_limit(&self, tenant: &str, outcome: &str) {
        self.rate_limits
            .get_or_create(&RateLimitLabels { tenant: tenant.to_string(), outcome: outcome.to_string() })
            .inc();
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
