//! The session console at `/console` (on with `[server] console = true`):
//! a page in plain HTML and JavaScript, embedded in the binary, no build
//! step and no external assets. It asks for a token or an API key and
//! calls the public API only (`GET /v1/sessions`, the session's view and
//! events, relay decisions, tool results, cancel), so it is also the
//! reference browser client: `assets/client.js` is the fetch + SSE client
//! (rejoins with `Last-Event-ID` on its own), `assets/console.js` the page.
//!
//! The pages are public (`auth::CONSOLE_PATH`): they hold no data. A strict
//! Content-Security-Policy keeps the page to its own scripts and styles and
//! its own origin: no inline script, nothing from elsewhere.

use axum::{
    Router,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
    routing::get,
};

use crate::state::AppState;

const INDEX_HTML: &str = include_str!("assets/index.html");
const CONSOLE_JS: &str = include_str!("assets/console.js");
const CLIENT_JS: &str = include_str!("assets/client.js");
const CONSOLE_CSS: &str = include_str!("assets/console.css");

/// Its own scripts, styles and API only; no framing, no forms posted
/// anywhere, no base URL change.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The console's routes, merged into the app's when it is on.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/console", get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }))
        .route("/console/", get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }))
        .route("/console/console.js", get(|| async { asset("text/javascript; charset=utf-8", CONSOLE_JS) }))
        .route("/console/client.js", get(|| async { asset("text/javascript; charset=utf-8", CLIENT_JS) }))
        .route("/console/console.css", get(|| async { asset("text/css; charset=utf-8", CONSOLE_CSS) }))
}

/// One embedded file, revalidated on every load (a new binary's page is
/// never mixed with an old script).
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}
