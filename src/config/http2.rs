//! `[server.http2]`: the HTTP/2 settings that matter for many SSE streams
//! on one connection (a load balancer's, a browser's): how many chats one
//! connection may carry, how much a stream may buffer, and the pings that
//! keep an idle connection alive through proxies and find a dead one.
//!
//! The server speaks HTTP/2 over cleartext with prior knowledge (h2c: what
//! Envoy, cloud L7 balancers and `curl --http2-prior-knowledge` send) and
//! HTTP/1.1 on the same port; TLS ends in front of it.

use std::time::Duration;

use serde::Deserialize;

/// `[server.http2]` as written.
#[derive(Debug, Default, Deserialize)]
pub struct RawHttp2 {
    pub max_concurrent_streams: Option<u32>,
    pub keepalive_secs: Option<u64>,
    pub keepalive_timeout_secs: Option<u64>,
    pub stream_window_bytes: Option<u32>,
    pub connection_window_bytes: Option<u32>,
    pub max_send_buf_bytes: Option<u64>,
}

/// `[server.http2]`, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Config {
    /// Streams (requests: chats, rejoins) one connection may have open.
    pub max_concurrent_streams: u32,
    /// A ping after this long without frames; `None`: no pings.
    pub keepalive: Option<Duration>,
    /// A ping unanswered this long closes the connection.
    pub keepalive_timeout: Duration,
    /// What a client may send on one stream, and on the connection, before
    /// the server's window updates (request bodies: small here).
    pub stream_window_bytes: u32,
    pub connection_window_bytes: u32,
    /// Most response bytes buffered per stream for a slow client; the
    /// stream's writer waits beyond it (an SSE frame is small).
    pub max_send_buf_bytes: usize,
}

impl Default for Http2Config {
    fn default() -> Self {
        Self {
            max_concurrent_streams: 1024,
            keepalive: Some(Duration::from_secs(20)),
            keepalive_timeout: Duration::from_secs(20),
            stream_window_bytes: 256 * 1024,
            connection_window_bytes: 1024 * 1024,
            max_send_buf_bytes: 64 * 1024,
        }
    }
}
