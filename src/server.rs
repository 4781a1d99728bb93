//! The accept loop: hyper's HTTP/1 and HTTP/2 server for the router, with
//! the connection-level protections `axum::serve` leaves unset.
//!
//! - A connection must deliver each request's headers within
//!   `server.header_read_timeout_secs` (slowloris); the same timer closes
//!   idle keep-alive connections.
//! - hyper refuses more than [`HARD_MAX_HEADERS`] headers with 431 before
//!   the router sees the request; the configured, lower limits are checked by
//!   `limits::input` so the refusal has the JSON error body.
//! - HTTP/2 over cleartext (h2c, prior knowledge) on the same port, with
//!   `[server.http2]`'s settings: many chats share one connection (a load
//!   balancer's); a client resetting one stream ends only that request.
//! - `TCP_NODELAY` on every accepted socket: SSE frames are small writes, and
//!   Nagle plus delayed ACKs added ~40 ms to short rejoins
//!   (load-tests/RESULTS.md).
//! - The protocol is told from the connection's first bytes, peeked (not
//!   read), and the connection is then served by hyper's HTTP/1 or HTTP/2
//!   alone. Left to hyper-util's detection, the 24 bytes it reads first
//!   are handed back to HTTP/1 as a first read of their own, and the
//!   connection's 8 KiB read buffer then doubles for the rest of the head:
//!   8 KiB more held for every open HTTP/1.1 chat. Only a connection whose
//!   first segment is a strict beginning of the HTTP/2 preface goes to
//!   hyper-util's detection.
//! - On shutdown the listener closes, each connection finishes its in-flight
//!   requests, and [`serve`] returns when the last one is gone.

use std::{future::Future, io, pin::pin, sync::Arc, time::Duration};

use axum::{Router, body::Body};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto::Builder, graceful::GracefulShutdown},
    service::TowerToHyperService,
};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt as _;

use crate::config::{InputLimits, http2::Http2Config};

/// hyper's own ceiling on the number of request headers (its default);
/// `server.max_header_count` is checked below it, with a JSON answer.
pub const HARD_MAX_HEADERS: usize = 100;

/// Serves `router` on `listener` until `shutdown` resolves, then waits for
/// open connections to finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: InputLimits,
    http2: Http2Config,
    shutdown: impl Future<Output = ()>,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_headers(HARD_MAX_HEADERS);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(http2.max_concurrent_streams)
        .initial_stream_window_size(http2.stream_window_bytes)
        .initial_connection_window_size(http2.connection_window_bytes)
        .max_send_buf_size(http2.max_send_buf_bytes)
        .keep_alive_interval(http2.keepalive)
        .keep_alive_timeout(http2.keepalive_timeout)
        .max_header_list_size(u32::try_from(limits.max_header_bytes.saturating_mul(2)).unwrap_or(u32::MAX));
    let builders = Arc::new(Builders {
        http1: builder.clone().http1_only(),
        http2: builder.clone().http2_only(),
        auto: builder,
        header_read_timeout: limits.header_read_timeout,
    });
    let graceful = GracefulShutdown::new();
    let mut shutdown = pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _peer)) => tcp,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let service = router.clone().map_request(|request: hyper::Request<Incoming>| request.map(Body::new));
        let (builders, watcher) = (builders.clone(), graceful.watcher());
        tokio::spawn(async move {
            // A connection that says nothing in time is closed, as hyper's
            // header timer would have.
            let Ok(Ok(version)) = tokio::time::timeout(builders.header_read_timeout, sniff(&tcp)).await else {
                return;
            };
            let builder = match version {
                Version::Http1 => &builders.http1,
                Version::Http2 => &builders.http2,
                Version::Undecided => &builders.auto,
            };
            let connection = builder.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(service));
            if let Err(e) = watcher.watch(connection.into_owned()).await {
                // Timeouts, resets and malformed requests end up here.
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// The connection builders, configured alike: one per protocol, and
/// hyper-util's detection for a connection [`sniff`] could not tell.
struct Builders {
    http1: Builder<TokioExecutor>,
    http2: Builder<TokioExecutor>,
    auto: Builder<TokioExecutor>,
    header_read_timeout: Duration,
}

#[derive(Debug, PartialEq, Eq)]
enum Version {
    Http1,
    Http2,
    /// What has arrived is a strict beginning of the HTTP/2 preface.
    Undecided,
}

/// The prior-knowledge HTTP/2 client's first bytes (RFC 9113, 3.4).
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Tells the protocol from the first bytes that arrived, without reading
/// them. An error (or a connection closed before a byte) ends it.
async fn sniff(tcp: &TcpStream) -> io::Result<Version> {
    let mut first = [0u8; HTTP2_PREFACE.len()];
    let n = tcp.peek(&mut first).await?;
    if n == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(version_of(&first[..n]))
}

fn version_of(first: &[u8]) -> Version {
    if !HTTP2_PREFACE.starts_with(first) {
        Version::Http1
    } else if first.len() == HTTP2_PREFACE.len() {
        Version::Http2
    } else {
        Version::Undecided
    }
}

/// A refused or reset connection is the client's business; anything else
/// (out of file descriptors) gets a pause so the loop does not spin.
async fn accept_failed(error: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(error.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset) {
        return;
    }
    tracing::error!(error = %error, "accept failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protocol_is_told_from_the_first_bytes() {
        assert_eq!(version_of(b"POST /chat HTTP/1.1\r\nHost: x\r\n\r\n"), Version::Http1);
        assert_eq!(version_of(b"G"), Version::Http1);
        // A method that begins like the preface but is not it.
        assert_eq!(version_of(b"PRIX"), Version::Http1);
        assert_eq!(version_of(HTTP2_PREFACE), Version::Http2);
        assert_eq!(version_of(b"PRI * HTTP/2"), Version::Undecided);
        assert_eq!(version_of(b"P"), Version::Undecided);
    }
}
