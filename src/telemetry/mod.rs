//! Telemetry: log output and Prometheus metrics.
//!
//! Logs go to stdout: human-readable by default, JSON lines when
//! `SWITCHBOARD_LOG_FORMAT=json`. The filter comes from `RUST_LOG` (default
//! `info`). Log lines carry ids and codes, never tokens, keys or message text.
//!
//! Metrics live in [`metrics::Metrics`], one registry per app instance (not a
//! process-global recorder), so several replicas in one test process keep
//! separate counts.

pub mod metrics;

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Installs the global log subscriber. Safe to call more than once (later
/// calls do nothing), which tests rely on.
pub fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("SWITCHBOARD_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    let registry = tracing_subscriber::registry().with(filter);
    let result = if json {
        registry.with(fmt::layer().json().flatten_event(true).with_current_span(true).with_span_list(false)).try_init()
    } else {
        registry.with(fmt::layer().with_target(false)).try_init()
    };
    // Err means a subscriber is already installed (tests, embedding): keep it.
    let _ = result;
}
