//! `Server-Timing` on answers that are not streams: how long the gateway
//! took itself, apart from the time spent waiting on upstream model and tool
//! calls, so a slow answer shows at once where its time went.
//!
//! A running turn adds every model and HTTP tool call's duration to its
//! [`UpstreamTime`]; a handler that waits for a turn puts the total on its
//! response as [`UpstreamElapsed`]; [`server_timing`] writes the header.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use axum::{
    http::{HeaderValue, header},
    response::Response,
};

/// Time a turn spent waiting on upstream calls (parallel calls add up).
#[derive(Debug, Default)]
pub struct UpstreamTime(AtomicU64);

impl UpstreamTime {
    pub fn add(&self, elapsed: Duration) {
        self.0.fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn get(&self) -> Duration {
        Duration::from_micros(self.0.load(Ordering::Relaxed))
    }
}

/// A response extension: the upstream share of the request's time.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamElapsed(pub Duration);

/// Adds `Server-Timing: gateway;dur=…, upstream;dur=…` (milliseconds) to a
/// non-stream response that took `total`. The gateway's share is what is
/// left after the upstream calls (never below zero: parallel calls can add
/// up to more than the wall time).
pub fn server_timing(response: &mut Response, total: Duration) {
    let streaming = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"));
    if streaming {
        return;
    }
    let upstream = response.extensions().get::<UpstreamElapsed>().map_or(Duration::ZERO, |u| u.0);
    let gateway = total.saturating_sub(upstream);
    let value = format!(
        "gateway;dur={:.1};desc=\"switchboard\", upstream;dur={:.1};desc=\"model and tool calls\"",
        gateway.as_secs_f64() * 1000.0,
        upstream.as_secs_f64() * 1000.0
    );
    if let Ok(value) = HeaderValue::from_str(&value) {
        response.headers_mut().insert("server-timing", value);
    }
}
