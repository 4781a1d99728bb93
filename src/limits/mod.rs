//! Per-tenant request limits, enforced after authentication, in this order:
//!
//! 1. **subject, local** — when the tenant sets `subject_requests_per_second`,
//!    a governor GCRA limiter keyed by subject, in this replica's memory:
//!    stops one noisy client from spending the whole tenant's rate, without a
//!    Redis round trip. It holds per replica, not across them.
//! 2. **tenant, global** — the tenant's rate across all replicas: GCRA in one
//!    Lua script in Redis (see `store::Quotas`). It alone decides what the
//!    tenant may send.
//! 3. **refusal regime** — when Redis refuses, it says when the next
//!    request can pass; until then this replica refuses the tenant's requests
//!    itself (GCRA's next-allowed time only moves forward, so Redis would
//!    refuse them too). After that, one request at a time asks Redis (the
//!    probe) while the others are refused here, until Redis allows one with
//!    budget to spare. Without the probe, every request in flight when a
//!    window ends asked Redis at once: measured (`load-tests/RESULTS.md`,
//!    32 clients on two replicas, 100/s), 0.42–0.50 Redis calls per request
//!    of a flood; with it, 0.02, and the flood is answered at 0.9 of an
//!    unlimited tenant's rate instead of 0.5. (A local limiter with the
//!    tenant's quota *ahead* of Redis would refuse some requests Redis would
//!    allow, since it thins the arrivals Redis sees: measured, it cut the
//!    accepted rate by 15 % with three replicas.)
//! 4. **fallback** — when Redis cannot be asked and `limits.on_store_error`
//!    is `fail_open`, each subject is held to the tenant's quota on this
//!    replica, so failing open never means unlimited.
//!
//! governor is used directly rather than through tower_governor: each tenant
//! has its own quota, and a tower_governor layer takes one quota for all keys.
//!
//! Refusals are 429 with `Retry-After`, `RateLimit-Policy` and `RateLimit`
//! headers (draft-ietf-httpapi-ratelimit-headers). When Redis cannot be
//! asked, `limits.on_store_error` decides: fail closed (503, the default) or
//! open (the fallback above); every outcome is logged (store errors) and
//! counted.
//!
//! Concurrent sessions and tokens per minute are checked where sessions start
//! and model calls are made (`sessions`, `orchestrator`). Bounds on the input
//! itself (headers, body size, JSON shape, read deadlines) are in [`input`].

pub mod input;

use std::{collections::HashMap, num::NonZeroU32, sync::Arc, time::Duration};

use axum::{
    extract::{Request, State},
    http::HeaderValue,
    middleware::Next,
    response::Response,
};
use dashmap::DashMap;
use governor::{
    DefaultKeyedRateLimiter, Quota, RateLimiter,
    clock::{Clock, DefaultClock},
};
use tokio::time::Instant;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    config::{Config, RateLimitConfig, StoreFailure},
    error::{ApiError, ErrorCode},
    principal::Principal,
    store::{Quotas, RateDecision},
    telemetry::metrics::Metrics,
};

/// How often idle subjects and past refusals are dropped from memory.
const CLEANUP_EVERY: Duration = Duration::from_secs(60);

pub struct RateLimits {
    config: Arc<Config>,
    quotas: Arc<dyn Quotas>,
    metrics: Arc<Metrics>,
    /// tenant → its limiter keyed by subject, for tenants that set a
    /// subject rate.
    subjects: HashMap<String, DefaultKeyedRateLimiter<String>>,
    /// tenant → its refusal regime on this replica, while there is one.
    refused: DashMap<String, Refusal>,
    /// tenant → its fallback limiter keyed by subject (only when limits
    /// fail open).
    fallback: HashMap<String, DefaultKeyedRateLimiter<String>>,
}

impl RateLimits {
    pub fn new(config: Arc<Config>, quotas: Arc<dyn Quotas>, metrics: Arc<Metrics>) -> Arc<Self> {
        let limiters = |policy: fn(&RateLimitConfig) -> Option<Policy>| -> HashMap<_, _> {
            (config.tenants.values())
                .filter_map(|tenant| {
                    Some((tenant.id.clone(), RateLimiter::keyed(policy(&tenant.rate_limit?)?.quota())))
                })
                .collect()
        };
        let subjects = limiters(Policy::subject);
        let fallback = match config.on_store_error {
            StoreFailure::FailOpen => limiters(Policy::tenant),
            StoreFailure::FailClosed => HashMap::new(),
        };
        Arc::new(Self { config, quotas, metrics, subjects, refused: DashMap::new(), fallback })
    }

    /// Drops idle subjects periodically, until shutdown.
    pub fn start_cleanup(self: &Arc<Self>, tasks: &TaskTracker, shutdown: CancellationToken) {
        let limits = self.clone();
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(CLEANUP_EVERY);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        for limiter in limits.subjects.values().chain(limits.fallback.values()) {
                            limiter.retain_recent();
                            limiter.shrink_to_fit();
                        }
                        let now = Instant::now();
                        limits.refused.retain(|_, refusal| refusal.until > now || refusal.probing);
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
        let tenant = &*principal.tenant;
        if let (Some(limiter), Some(policy)) = (self.subjects.get(tenant), Policy::subject(&limit))
            && let Err(not_until) = limiter.check_key(&principal.subject)
        {
            self.metrics.rate_limit(tenant, "limited_subject");
            return Err(policy.refusal(not_until.wait_time_from(DefaultClock::default().now())));
        }
        let Some(policy) = Policy::tenant(&limit) else { return Ok(None) };
        let asked = Instant::now();
        // In a refusal regime, this request either is refused here or
        // becomes the probe; the guard ends the probe however the request
        // ends (a client that goes away drops this future mid-await).
        let _probe = match self.refused.get_mut(tenant) {
            Some(refusal) if asked < refusal.until || refusal.probing => {
                let wait = refusal.until.saturating_duration_since(asked).max(policy.interval());
                drop(refusal);
                self.metrics.rate_limit(tenant, "limited_local");
                return Err(policy.refusal(wait));
            }
            Some(mut refusal) => {
                refusal.probing = true;
                Some(Probe { refused: &self.refused, tenant })
            }
            None => None,
        };
        match self.quotas.take_request(tenant, policy.rate, policy.burst).await {
            Ok(RateDecision::Allowed { remaining }) => {
                // Budget to spare: the regime is over. None: the next
                // request probes again (and learns the next window).
                if remaining > 0 {
                    self.refused.remove(tenant);
                }
                self.metrics.rate_limit(tenant, "allowed");
                Ok(Some(policy.headers(remaining, Duration::ZERO)))
            }
            Ok(RateDecision::Limited { retry_after }) => {
                // From when the request was sent: Redis decided after that,
                // so this errs towards asking again a little early.
                self.refused.insert(tenant.to_string(), Refusal { until: asked + retry_after, probing: false });
                self.metrics.rate_limit(tenant, "limited_global");
                Err(policy.refusal(retry_after))
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
                    tracing::warn!(tenant, error = %e, "rate limit store unavailable; limiting per subject here (fail open)");
                    self.fallback(principal, policy)
                }
            },
        }
    }

    /// Fail open: each subject is held to the tenant's quota on this replica.
    fn fallback(&self, principal: &Principal, policy: Policy) -> Result<Option<RateHeaders>, ApiError> {
        let tenant = &*principal.tenant;
        if let Some(limiter) = self.fallback.get(tenant)
            && let Err(not_until) = limiter.check_key(&principal.subject)
        {
            self.metrics.rate_limit(tenant, "store_error_limited");
            return Err(policy.refusal(not_until.wait_time_from(DefaultClock::default().now())));
        }
        self.metrics.rate_limit(tenant, "store_error_allowed");
        Ok(None)
    }
}

/// A tenant Redis refused, as this replica remembers it.
#[derive(Debug, Clone, Copy)]
struct Refusal {
    /// Before this, Redis would refuse the tenant too.
    until: Instant,
    /// A request of the tenant is asking Redis.
    probing: bool,
}

/// Ends a tenant's probe when the probing request is done with Redis.
struct Probe<'a> {
    refused: &'a DashMap<String, Refusal>,
    tenant: &'a str,
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        if let Some(mut refusal) = self.refused.get_mut(self.tenant) {
            refusal.probing = false;
        }
    }
}

/// One rate a request is held to: whose it is, and its quota.
#[derive(Clone, Copy)]
struct Policy {
    /// The policy's name in the `RateLimit*` headers.
    name: &'static str,
    rate: u32,
    burst: u32,
}

impl Policy {
    fn tenant(limit: &RateLimitConfig) -> Option<Self> {
        Some(Self { name: "tenant", rate: limit.requests_per_second?, burst: limit.burst })
    }

    fn subject(limit: &RateLimitConfig) -> Option<Self> {
        Some(Self { name: "subject", rate: limit.subject_requests_per_second?, burst: limit.subject_burst })
    }

    /// The time between two requests at this rate.
    fn interval(self) -> Duration {
        Duration::from_secs(1) / self.rate.max(1)
    }

    fn quota(self) -> Quota {
        // Validation keeps both positive; the fallbacks only satisfy the type.
        let rate = NonZeroU32::new(self.rate).unwrap_or(NonZeroU32::MIN);
        Quota::per_second(rate).allow_burst(NonZeroU32::new(self.burst).unwrap_or(rate))
    }

    fn headers(self, remaining: u32, reset: Duration) -> RateHeaders {
        RateHeaders {
            policy: format!("\"{}\";q={};w=1;burst={}", self.name, self.rate, self.burst),
            current: format!("\"{}\";r={remaining};t={}", self.name, reset.as_secs_f64().ceil() as u64),
        }
    }

    fn refusal(self, wait: Duration) -> ApiError {
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        let whose = if self.name == "subject" { " for this client" } else { "" };
        let mut error = ApiError::new(
            ErrorCode::RateLimited,
            format!("rate limit of {} requests per second{whose} exceeded; retry in {secs} s", self.rate),
        )
        .with_retry_after(secs);
        error.headers = self.headers(0, wait).pairs();
        error
    }
}

/// `RateLimit-Policy` and `RateLimit` header values.
#[derive(Debug)]
pub struct RateHeaders {
    policy: String,
    current: String,
}

impl RateHeaders {
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

#[cfg(test)]
mod tests;
