//! `[server.http2]` checked: see `config/http2.rs`.

use std::time::Duration;

use super::positive;
use crate::config::{
    ConfigErrors,
    http2::{Http2Config, RawHttp2},
};

/// Checks `[server.http2]`; absent keys keep their defaults.
pub(super) fn validate_http2(errors: &mut ConfigErrors, raw: Option<RawHttp2>) -> Http2Config {
    let d = Http2Config::default();
    let Some(raw) = raw else { return d };
    let window = |errors: &mut ConfigErrors, key: &str, value: Option<u32>, default: u32| match value {
        // HTTP/2's bounds (RFC 9113 §6.9.2): at least the default 65,535, at most 2^31 - 1.
        Some(v) if !(65_535..=0x7fff_ffff).contains(&v) => {
            errors.push(format!("server.http2.{key}"), "must be between 65535 and 2147483647");
            default
        }
        Some(v) => v,
        None => default,
    };
    Http2Config {
        max_concurrent_streams: positive(errors, "server.http2.max_concurrent_streams", raw.max_concurrent_streams)
            .unwrap_or(d.max_concurrent_streams),
        keepalive: match raw.keepalive_secs {
            Some(0) => None,
            Some(secs) => Some(Duration::from_secs(secs)),
            None => d.keepalive,
        },
        keepalive_timeout: positive(errors, "server.http2.keepalive_timeout_secs", raw.keepalive_timeout_secs)
            .map_or(d.keepalive_timeout, Duration::from_secs),
        stream_window_bytes: window(errors, "stream_window_bytes", raw.stream_window_bytes, d.stream_window_bytes),
        connection_window_bytes: window(
            errors,
            "connection_window_bytes",
            raw.connection_window_bytes,
            d.connection_window_bytes,
        ),
        max_send_buf_bytes: positive(errors, "server.http2.max_send_buf_bytes", raw.max_send_buf_bytes)
            .map_or(d.max_send_buf_bytes, |v| usize::try_from(v).unwrap_or(usize::MAX)),
    }
}
