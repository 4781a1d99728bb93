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
//! - On shutdown the listener closes, each connection finishes its in-flight
//!   requests, and [`serve`] returns when the last one is gone.

use std::{future::Future, io, pin::pin, time::Duration};

use axum::{Router, body::Body};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto::Builder, graceful::GracefulShutdown},
    service::TowerToHyperService,
};
use tokio::net::TcpListener;
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
        let connection = builder.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(service)).into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                // Timeouts, resets and malformed requests end up here.
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
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
