//! [`PageServer`]: the test page's own origin, a static server on a port
//! of its own, so every call the page makes to the gateway (behind nginx,
//! on another port) is cross-origin. The page is `page/index.html` and
//! `page/app.js`; its API client is the console's `client.js`, the
//! reference browser client, served here as a frontend would ship it.
//!
//! The same server answers as `http://127.0.0.1:PORT` (an origin the
//! gateway allows) and as `http://localhost:PORT` (another origin, which it
//! does not).

use std::net::SocketAddr;

use axum::{
    Router,
    http::header,
    response::{IntoResponse, Response},
    routing::get,
};
use tokio_util::sync::CancellationToken;

const INDEX_HTML: &str = include_str!("page/index.html");
const APP_JS: &str = include_str!("page/app.js");
const CLIENT_JS: &str = include_str!("../../src/api/console/assets/client.js");

pub struct PageServer {
    addr: SocketAddr,
    stop: CancellationToken,
}

impl PageServer {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the page server");
        let addr = listener.local_addr().expect("the page server's address");
        let app = Router::new()
            .route("/", get(|| async { file("text/html; charset=utf-8", INDEX_HTML) }))
            .route("/app.js", get(|| async { file("text/javascript; charset=utf-8", APP_JS) }))
            .route("/client.js", get(|| async { file("text/javascript; charset=utf-8", CLIENT_JS) }));
        let stop = CancellationToken::new();
        let stopped = stop.clone().cancelled_owned();
        tokio::spawn(async move {
            axum::serve(listener, app).with_graceful_shutdown(stopped).await.ok();
        });
        Self { addr, stop }
    }

    /// The origin the gateway allows: `http://127.0.0.1:PORT`.
    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.addr.port())
    }

    /// The same page from an origin the gateway does not allow.
    pub fn refused_origin(&self) -> String {
        format!("http://localhost:{}", self.addr.port())
    }
}

impl Drop for PageServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn file(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-store")], body).into_response()
}
