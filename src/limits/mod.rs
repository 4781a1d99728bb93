//! Per-tenant request limits, enforced after authentication:
//!
//! 1. **local** — a governor GCRA limiter per tenant, keyed by subject, in
//!    this replica's memory: stops one noisy client without a Redis round
//!    trip. (governor directly rather than tower_governor: each tenant has its
//!    own quota, and tower_governor takes one quota per layer.)
//! 2. **global** — the tenant's rate across all replicas, one Lua script in
//!    Redis (see `store::Quotas`).
//!
//! Refusals are 429 with `Retry-After`, `RateLimit-Policy` and `RateLimit`
//! headers (draft-ietf-httpapi-ratelimit-headers). When Redis cannot be
//! asked, `limits.on_store_error` decides: fail closed (503, the default) or
//! open (let it through); both are logged and counted.
//!
//! Concurrent sessions and tokens per minute are checked where sessions start
//! and model calls are made (`sessions`, `orchestrator`). Bounds on the input
//! itself (headers, body size, JSON shape, read deadlines) are in [`input`].

pub mod input;

use std::{num::NonZeroU32, sync::Arc, time::Duration};

use axum::{
    extract::{Request, State},
    http::HeaderValue,
    middleware::Next,
    response::Response,
};
use dashmap::DashMap;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter, clock::Clock};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    auth::Principal,
    config::{Config, RateLimitConfig, StoreFailure},
    error::{ApiError, ErrorCode},
    store::{Quotas, RateDecision},
    telemetry::metrics::Metrics,
};

/// How often idle subjects are dropped from the local limiters.
const CLEANUP_EVERY: Duration = Duration::from_secs(60);

pub struct RateLimits {
    config: Arc<Config>,
    quotas: Arc<dyn Quotas>,
    metrics: Arc<Metrics>,
    /// tenant → its limiter keyed by subject.
    local: DashMap<String, Arc<DefaultKeyedRateLimiter<String>>>,
}

impl RateLimits {
    pub fn new(config: Arc<Config>, quotas: Arc<dyn Quotas>, metrics: Arc<Metrics>) -> Arc<Self> {
        let local = config
            .tenants
            .values()
            .filter_map(|tenant| {
                let limit = tenant.rate_limit?;
                let quota = quota(&limit)?;
                Some((tenant.id.clone(), Arc::new(RateLimiter::keyed(quota))))
            })
            .collect();
        Arc::new(Self { config, quotas, metrics, local })
    }

    /// Drops idle subjects periodically, until shutdown.
    pub fn start_cleanup(self: &Arc<Self>, tasks: &TaskTracker, shutdown: CancellationToken) {
        let limits = self.clone();
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(CLEANUP_EVERY);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        for limiter in limits.local.iter() {
                            limiter.retain_recent();
                            limiter.shrink_to_fit();
                        }
                    }
                    () = shutdown.cancelled() => break,
                }
            }
        });
    }

    /// Checks one request of `principal`; `Ok` carries the headers to add.
    pub async fn check(&self, principal: &Principal) -> Result<Option<RateHeaders>, ApiError> {
        let Some(limit) = self.config.tenants.get(&*principal.tenant).and_then(|t| t.rate_limit) else {
            return Ok(None);
        };
        let Some(rate) = limit.requests_per_second else { return Ok(None) };
        let tenant = &*principal.tenant;
        if let Some(limiter) = self.local.get(tenant)
            && let Err(not_until) = limiter.check_key(&principal.subject)
        {
            let wait = not_until.wait_time_from(governor::clock::DefaultClock::default().now());
            self.metrics.rate_limit(tenant, "limited_local");
            return Err(limited(rate, &limit, wait));
        }
        match self.quotas.take_request(tenant, rate, limit.burst).await {
            Ok(RateDecision::Allowed { remaining }) => {
                self.metrics.rate_limit(tenant, "allowed");
                Ok(Some(RateHeaders::new(rate, &limit, remaining, Duration::ZERO)))
            }
            Ok(RateDecision::Limited { retry_after }) => {
                self.metrics.rate_limit(tenant, "limited_global");
                Err(limited(rate, &limit, retry_after))
            }
            Err(e) => match self.config.on_store_error {
                StoreFailure::FailClosed => {
                    tracing::warn!(tenant, error = %e, "rate limit store unavailable; refusing (fail closed)");
                    self.metrics.rate_limit(tenant, "store_error_refused");
                    Err(ApiError::new(ErrorCode::StoreUnavailable, "rate limits cannot be checked right now")
                        .with_retry_after(1)
                        .with_detail(e))
                }
                StoreFailure::FailOpen => {
                    tracing::warn!(tenant, error = %e, "rate limit store unavailable; allowing (fail open)");
                    self.metrics.rate_limit(tenant, "store_error_allowed");
                    Ok(None)
                }
            },
        }
    }
}

fn quota(limit: &RateLimitConfig) -> Option<Quota> {
    let rate = NonZeroU32::new(limit.requests_per_second?)?;
    let burst = NonZeroU32::new(limit.burst).unwrap_or(rate);
    Some(Quota::per_second(rate).allow_burst(burst))
}

fn limited(rate: u32, limit: &RateLimitConfig, wait: Duration) -> ApiError {
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    let mut error = ApiError::new(
        ErrorCode::RateLimited,
        format!("rate limit of {rate} requests per second exceeded; retry in {secs} s"),
    )
    .with_retry_after(secs);
    error.headers = RateHeaders::new(rate, limit, 0, wait).pairs();
    error
}

/// `RateLimit-Policy` and `RateLimit` header values.
pub struct RateHeaders {
    policy: String,
    current: String,
}

impl RateHeaders {
    fn new(rate: u32, limit: &RateLimitConfig, remaining: u32, reset: Duration) -> Self {
        Self {
            policy: format!("\"tenant\";q={rate};w=1;burst={}", limit.burst),
            current: format!("\"tenant\";r={remaining};t={}", reset.as_secs_f64().ceil() as u64),
        }
    }

    fn pairs(self) -> Vec<(&'static str, String)> {
        vec![("ratelimit-policy", self.policy), ("ratelimit", self.current)]
    }
}

/// Middleware: applies the tenant's request limits to authenticated requests.
pub async fn enforce(
    State(limits): State<Arc<RateLimits>>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Some(principal) = request.extensions().get::<Principal>().cloned() else {
        return Ok(next.run(request).await);
    };
    let headers = limits.check(&principal).await?;
    let mut response = next.run(request).await;
    if let Some(headers) = headers {
        for (name, value) in headers.pairs() {
            if let Ok(value) = HeaderValue::from_str(&value) {
                response.headers_mut().insert(name, value);
            }
        }
    }
    Ok(response)
}
