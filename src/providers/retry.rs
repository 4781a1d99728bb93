//! What the HTTP providers share: the [`Endpoint`] they call (client, URL,
//! key, the request's headers), and resilience: one call to [`open`] sends a
//! request, retries what is worth retrying, and hands back a stream only once
//! its first event has arrived.
//!
//! What is retried, and only while nothing has been yielded: refused or
//! failed connections, HTTP 408, 429 and 5xx, an in-stream overload or
//! server error before the first event, and silence past the first-byte (or
//! idle) timeout. The wait is exponential from `retry_base` with full
//! jitter, or the upstream's `Retry-After` (seconds, capped at a minute).
//! Everything else (other 4xx, malformed streams) fails at once. Once an
//! event has been yielded nothing is retried: errors arrive in the stream.
//!
//! An endpoint at a plain `http://` URL, called over HTTP/1.1 and not
//! through a proxy, is spoken to over [`http1`]'s connections, read in the
//! turn's own task; everything else (TLS, h2c, a proxy from the
//! environment) goes through reqwest.
//!
//! This module also maps HTTP statuses and upstream error bodies to
//! [`ProviderError`]; messages are truncated and never carry the API key.

use std::{borrow::Cow, future::Future, time::Duration};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use http_body_util::Full;
use reqwest::{
    StatusCode,
    header::{ACCEPT, CONTENT_TYPE, HOST, HeaderMap, HeaderValue, RETRY_AFTER},
};
use tokio::time::Instant;
use tracing::{debug, info};

use super::{
    ModelRequest, ModelStream, ProviderError, http1,
    sse::{Body, BodyError, Decoder, Pump, describe, timeout_first_byte},
};
use crate::config::{ModelConfig, Resilience, Secret};

/// Longest wait between two attempts, whatever `Retry-After` asks for.
const MAX_DELAY: Duration = Duration::from_secs(60);
/// Upstream error messages are cut to this many characters.
const MAX_MESSAGE_CHARS: usize = 500;
/// An error answer's body is read up to this many bytes.
const MAX_ERROR_BODY: usize = 64 << 10;

/// The receive window of an HTTP/2 connection to a model server. Every
/// streamed token is a small DATA frame; h2 closes a connection
/// (`GOAWAY ENHANCE_YOUR_CALM`) once the small frames buffered but not yet
/// read pass a budget of half this window. With hyper's 5 MiB that was
/// about 13,000 frames: 9,900 answers arriving at once on one connection
/// broke every stream on it (load-tests/RESULTS.md). 64 MiB allows ten
/// times that; flow control still bounds each stream (2 MiB).
const H2_CONNECTION_WINDOW: u32 = 64 << 20;

/// The HTTP client of one provider: a connect timeout, and no overall
/// request timeout (streams last as long as the model talks; the first-byte
/// and idle timeouts guard them instead). With `http2`, plain-HTTP model
/// servers are spoken to in HTTP/2 at once (h2c, prior knowledge): every
/// call of the replica shares one connection, with a connection window of
/// [`H2_CONNECTION_WINDOW`].
pub(super) fn client(resilience: &Resilience, http2: bool) -> reqwest::Client {
    let builder = reqwest::Client::builder().connect_timeout(resilience.connect_timeout);
    let builder = if http2 {
        builder.http2_prior_knowledge().http2_initial_connection_window_size(H2_CONNECTION_WINDOW)
    } else {
        builder
    };
    builder
        .build()
        // Only fails when the TLS backend cannot start: nothing would work.
        .expect("the HTTP client for model providers can be built")
}

/// What an HTTP provider calls: its client, endpoint, model, key and limits.
/// The providers add only their wire format and their auth headers.
pub(super) struct Endpoint {
    transport: Transport,
    model: String,
    api_key: Option<Secret>,
    max_output_tokens: u32,
    resilience: Resilience,
}

/// How the requests of an [`Endpoint`] travel.
enum Transport {
    /// A plain-HTTP/1.1 server reached without a proxy: our connections,
    /// the request line's target and `Host` made once.
    Direct { pool: http1::Pool, target: http::Uri, host: HeaderValue },
    /// Everything else: reqwest (TLS, HTTP/2, proxies from the environment).
    Client {
        client: reqwest::Client,
        /// Parsed once (a parse per request was ~2 % of a chat's
        /// instructions); the text when it does not parse, so each request
        /// fails with reqwest's own error.
        url: Result<reqwest::Url, String>,
    },
}

impl Transport {
    fn new(model: &ModelConfig, url: String) -> Self {
        match Self::direct(model, &url) {
            Some(direct) => direct,
            None => Self::Client {
                client: client(&model.resilience, model.http2),
                url: reqwest::Url::parse(&url).map_err(|_| url),
            },
        }
    }

    /// The direct transport, where it serves: `http://`, HTTP/1.1, and no
    /// proxy the environment would send the request through (reqwest's
    /// own rule: `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`).
    fn direct(model: &ModelConfig, url: &str) -> Option<Self> {
        if model.http2 {
            return None;
        }
        let uri: http::Uri = url.parse().ok()?;
        let authority = uri.authority()?;
        if uri.scheme() != Some(&http::uri::Scheme::HTTP)
            || hyper_util::client::proxy::matcher::Matcher::from_env().intercept(&uri).is_some()
        {
            return None;
        }
        let address = format!("{}:{}", authority.host(), authority.port_u16().unwrap_or(80));
        let host = HeaderValue::from_str(authority.as_str()).ok()?;
        let target = uri.path_and_query().cloned().map_or_else(|| http::Uri::from_static("/"), http::Uri::from);
        Some(Self::Direct { pool: http1::Pool::new(address, model.resilience.connect_timeout), target, host })
    }

    /// Sends one request (`headers` and `body`), up to the answer's head.
    async fn send(&self, headers: &HeaderMap, body: &Bytes) -> Result<Answer, ProviderError> {
        match self {
            Self::Direct { pool, target, host } => {
                let make = || {
                    let mut request = http::Request::new(Full::new(body.clone()));
                    *request.method_mut() = http::Method::POST;
                    *request.uri_mut() = target.clone();
                    let mut headers = headers.clone();
                    headers.insert(HOST, host.clone());
                    *request.headers_mut() = headers;
                    request
                };
                let (head, exchange) = pool.send(make).await.map_err(|error| direct_error(&error))?;
                let (head, ()) = head.into_parts();
                Ok(Answer { status: head.status, headers: head.headers, body: Box::pin(exchange) })
            }
            Self::Client { client, url } => {
                let builder = match url {
                    Ok(url) => client.post(url.clone()),
                    Err(text) => client.post(text),
                };
                let mut response =
                    builder.headers(headers.clone()).body(body.clone()).send().await.map_err(|e| send_error(&e))?;
                let (status, headers) = (response.status(), std::mem::take(response.headers_mut()));
                let body = response.bytes_stream().map_err(|e| -> BodyError { Box::new(e) });
                Ok(Answer { status, headers, body: Box::pin(body) })
            }
        }
    }
}

/// An upstream's answer: its status and headers, and the body to read.
pub(super) struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Body,
}

impl Endpoint {
    /// `path` follows the model's base URL (`/chat/completions`, `/messages`).
    pub fn new(model: &ModelConfig, path: &str) -> Self {
        Self {
            transport: Transport::new(model, format!("{}{path}", model.base_url)),
            model: model.model.clone(),
            api_key: model.api_key.clone(),
            max_output_tokens: model.max_output_tokens,
            resilience: model.resilience,
        }
    }

    /// The upstream model id and output limit for `request`: its own when it
    /// sets them, else the configured ones.
    pub fn model_and_limit<'a>(&'a self, request: &'a ModelRequest) -> (&'a str, u32) {
        let model = if request.model.is_empty() { self.model.as_str() } else { request.model.as_str() };
        let limit = if request.max_output_tokens == 0 { self.max_output_tokens } else { request.max_output_tokens };
        (model, limit)
    }

    /// The upstream model id of `request`, which is given up: once its body
    /// is written, a call waiting for its first event (a slow model, a
    /// retry's back-off) holds only that body, not the request's messages
    /// and tool specs beside it (≈ 4 KiB per streaming chat).
    pub fn served_model(&self, request: ModelRequest) -> Cow<'_, str> {
        if request.model.is_empty() { Cow::Borrowed(&self.model) } else { Cow::Owned(request.model) }
    }

    /// Streams `body` through [`open`]. The one place an upstream request
    /// is built: JSON in, SSE out, the W3C trace context of the current
    /// (`chat`) span, and the provider's own headers from `auth` (given the
    /// key, if any; it must mark the key's header sensitive).
    pub async fn stream<D: Decoder>(
        &self,
        provider: &'static str,
        model: &str,
        body: Bytes,
        auth: impl FnOnce(&mut HeaderMap, Option<&Secret>),
        decoder: impl Fn() -> D,
    ) -> Result<ModelStream, ProviderError> {
        let mut headers = HeaderMap::new();
        crate::telemetry::trace::inject_current(&mut headers);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        auth(&mut headers, self.api_key.as_ref());
        let upstream = Upstream {
            provider,
            model,
            resilience: self.resilience,
            api_key: self.api_key.as_ref().map(Secret::expose),
        };
        // Boxed: the call's future is held for as long as its first event
        // is awaited, and need not keep room for a request's sending.
        open(&upstream, || Box::pin(self.transport.send(&headers, &body)), decoder).await
    }
}

/// Who is being called, for limits and logs.
pub(super) struct Upstream<'a> {
    pub provider: &'static str,
    pub model: &'a str,
    pub resilience: Resilience,
    /// Only used to scrub the key out of echoed error messages.
    pub api_key: Option<&'a str>,
}

/// Sends `send()` (a request afresh per attempt) until a response yields
/// its first event, then returns the stream with that event first.
pub(super) async fn open<D: Decoder, F: Future<Output = Result<Answer, ProviderError>>>(
    upstream: &Upstream<'_>,
    send: impl Fn() -> F,
    decoder: impl Fn() -> D,
) -> Result<ModelStream, ProviderError> {
    let Upstream { provider, model, resilience, .. } = *upstream;
    let mut attempt = 0;
    loop {
        debug!(provider, model, attempt, "upstream request");
        let error = match attempt_once(upstream, send(), decoder()).await {
            Ok(stream) => return Ok(stream),
            Err(error) => error,
        };
        if attempt >= resilience.max_retries || !is_retryable(&error) {
            info!(provider, model, attempt, error = %error, "upstream request failed");
            return Err(error);
        }
        let delay = match retry_after_of(&error) {
            Some(secs) => Duration::from_secs(secs).min(MAX_DELAY),
            None => backoff(resilience.retry_base, attempt),
        };
        info!(provider, model, attempt, error = %error, delay_ms = delay.as_millis() as u64, "retrying upstream");
        tokio::time::sleep(delay).await;
        attempt += 1;
    }
}

/// One attempt: the response's status, then its first event.
async fn attempt_once<D: Decoder>(
    upstream: &Upstream<'_>,
    send: impl Future<Output = Result<Answer, ProviderError>>,
    decoder: D,
) -> Result<ModelStream, ProviderError> {
    let resilience = upstream.resilience;
    let deadline = Instant::now() + resilience.first_byte_timeout;
    let answer = tokio::time::timeout_at(deadline, send).await.map_err(|_| timeout_first_byte())??;
    let status = answer.status;
    debug!(provider = upstream.provider, model = upstream.model, status = status.as_u16(), "upstream answered");
    if !status.is_success() {
        return Err(error_response(answer, deadline, upstream.api_key).await);
    }
    if is_json(&answer.headers) {
        // A server that ignored `stream: true`; asking again would not help.
        return Err(ProviderError::Protocol("the upstream answered JSON, not an event stream".into()));
    }
    let Answer { body, headers, .. } = answer;
    // The head's values are slices of the connection's read buffer: kept
    // while a slow model's first event is awaited, they would keep that
    // buffer from being used again (8 KiB more per waiting call).
    drop(headers);
    let mut pump = Pump::new(body, decoder, deadline, resilience.idle_timeout);
    match pump.next().await {
        Some(Ok(first)) => Ok(pump.into_stream(first)),
        Some(Err(error)) => Err(error),
        None => Err(ProviderError::Protocol("the response ended without any event".into())),
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    let content_type = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
    content_type.is_some_and(|v| v.trim_start().starts_with("application/json"))
}

/// Worth another attempt, as long as nothing has been yielded yet.
pub(super) fn is_retryable(error: &ProviderError) -> bool {
    match error {
        ProviderError::Http { status, .. } => *status == 408 || *status >= 500,
        ProviderError::RateLimited { .. } | ProviderError::Timeout(_) | ProviderError::Disconnected(_) => true,
        ProviderError::Protocol(_) => false,
    }
}

fn retry_after_of(error: &ProviderError) -> Option<u64> {
    match error {
        ProviderError::Http { retry_after, .. } | ProviderError::RateLimited { retry_after } => *retry_after,
        _ => None,
    }
}

/// Full jitter: a uniform wait between zero and `base * 2^attempt`.
pub(super) fn backoff(base: Duration, attempt: u32) -> Duration {
    let ceiling = base.saturating_mul(2u32.saturating_pow(attempt)).min(MAX_DELAY);
    let millis = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(rand::random_range(0..=millis))
}

/// A failed direct send: no response at all.
fn direct_error(error: &http1::SendError) -> ProviderError {
    match error {
        http1::SendError::ConnectTimeout => ProviderError::Timeout("connect"),
        http1::SendError::Connect(error) => {
            ProviderError::Disconnected(format!("connect failed: {}", describe(&**error)))
        }
        http1::SendError::Request(error) => {
            ProviderError::Disconnected(format!("request failed: {}", describe(&**error)))
        }
    }
}

/// A failed reqwest `send()`: no response at all.
fn send_error(error: &reqwest::Error) -> ProviderError {
    if error.is_timeout() {
        return ProviderError::Timeout("connect");
    }
    let what = if error.is_connect() { "connect failed" } else { "request failed" };
    ProviderError::Disconnected(format!("{what}: {}", describe(error)))
}

/// A non-2xx answer, with the upstream's own message when it gave one.
async fn error_response(answer: Answer, deadline: Instant, api_key: Option<&str>) -> ProviderError {
    let retry_after = retry_after(&answer.headers);
    // A slow error body is not worth waiting past the first-byte deadline for.
    let mut text = Vec::new();
    let mut body = answer.body;
    let read = async {
        while let Some(Ok(chunk)) = body.next().await {
            text.extend_from_slice(&chunk[..chunk.len().min(MAX_ERROR_BODY - text.len())]);
            if text.len() >= MAX_ERROR_BODY {
                break;
            }
        }
    };
    let _ = tokio::time::timeout_at(deadline, read).await;
    http_error(answer.status, retry_after, &String::from_utf8_lossy(&text), api_key)
}

/// Maps a status and body: 429 is [`ProviderError::RateLimited`], the rest
/// [`ProviderError::Http`].
pub(super) fn http_error(status: StatusCode, retry_after: Option<u64>, body: &str, key: Option<&str>) -> ProviderError {
    if status == StatusCode::TOO_MANY_REQUESTS {
        return ProviderError::RateLimited { retry_after };
    }
    let message = upstream_message(body).unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_string());
    ProviderError::Http { status: status.as_u16(), retry_after, message: scrub(&message, key) }
}

/// `Retry-After` in seconds. (The HTTP-date form is rare from model APIs
/// and treated as absent: the backoff applies instead.)
pub(super) fn retry_after(headers: &HeaderMap) -> Option<u64> {
    headers.get(RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()
}

/// `error.message` (OpenAI, Anthropic), `error` as a string, or `message`.
fn upstream_message(body: &str) -> Option<String> {
    let json: serde_json::Value = serde_json::from_str(body).ok()?;
    let error = &json["error"];
    let message = error["message"].as_str().or_else(|| error.as_str()).or_else(|| json["message"].as_str())?;
    Some(message.to_string())
}

/// Truncated to [`MAX_MESSAGE_CHARS`], with the key (if echoed) masked.
pub(super) fn scrub(message: &str, key: Option<&str>) -> String {
    let mut text: String = message.chars().take(MAX_MESSAGE_CHARS).collect();
    if let Some(key) = key.filter(|k| !k.is_empty()) {
        text = text.replace(key, "***");
    }
    text
}

/// An error the upstream reported inside a 200 stream, by its type (both
/// APIs' vocabularies) or, failing that, a numeric HTTP-like code.
pub(super) fn stream_error(kind: &str, code: Option<u16>, message: &str) -> ProviderError {
    let status = match kind {
        _ if kind.contains("rate_limit") || code == Some(429) => {
            return ProviderError::RateLimited { retry_after: None };
        }
        "overloaded_error" => 529,
        "api_error" | "server_error" | "internal_error" | "internal_server_error" => 500,
        "timeout_error" => 504,
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        _ => match code {
            Some(code @ 400..=599) => code,
            _ => {
                return ProviderError::Protocol(format!(
                    "upstream error {}: {}",
                    scrub(kind, None),
                    scrub(message, None)
                ));
            }
        },
    };
    ProviderError::Http { status, retry_after: None, message: scrub(message, None) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_stays_under_the_doubled_base() {
        let base = Duration::from_millis(100);
        for attempt in 0..4 {
            assert!(backoff(base, attempt) <= base * 2u32.pow(attempt));
        }
        assert!(backoff(Duration::from_secs(10), 30) <= MAX_DELAY);
    }

    #[test]
    fn an_upstream_message_is_kept_truncated_and_without_the_key() {
        let body = format!(r#"{{"error":{{"message":"bad key sk-123 {}"}}}}"#, "x".repeat(600));
        let ProviderError::Http { status, message, .. } =
            http_error(StatusCode::UNAUTHORIZED, None, &body, Some("sk-123"))
        else {
            panic!("expected Http");
        };
        assert_eq!(status, 401);
        assert!(message.starts_with("bad key *** x"));
        assert!(!message.contains("sk-123"));
        assert!(message.chars().count() <= MAX_MESSAGE_CHARS);
    }

    #[test]
    fn a_body_without_a_message_falls_back_to_the_status_reason() {
        let error = http_error(StatusCode::BAD_GATEWAY, Some(3), "<html>", None);
        assert_eq!(error, ProviderError::Http { status: 502, retry_after: Some(3), message: "Bad Gateway".into() });
        assert!(is_retryable(&error));
    }

    #[test]
    fn too_many_requests_is_a_rate_limit_and_other_client_errors_are_final() {
        assert_eq!(
            http_error(StatusCode::TOO_MANY_REQUESTS, Some(1), "", None),
            ProviderError::RateLimited { retry_after: Some(1) }
        );
        assert!(!is_retryable(&http_error(StatusCode::BAD_REQUEST, None, "", None)));
        assert!(is_retryable(&http_error(StatusCode::REQUEST_TIMEOUT, None, "", None)));
    }

    #[test]
    fn a_request_names_its_own_model_and_limit_or_falls_back_to_the_configured_ones() {
        let config = crate::config::ModelConfig {
            alias: "fast".into(),
            provider: crate::config::ProviderKind::OpenAiCompatible,
            base_url: "http://127.0.0.1:9".into(),
            server_address: "127.0.0.1".into(),
            model: "configured".into(),
            api_key: None,
            context_window: 1000,
            max_output_tokens: 64,
            resilience: Resilience::default(),
            continue_partial: false,
            prices: None,
            http2: false,
        };
        let endpoint = Endpoint::new(&config, "/chat/completions");
        let mut request = ModelRequest::plain(&config, Vec::new());
        (request.model, request.max_output_tokens) = (String::new(), 0);
        assert_eq!(endpoint.model_and_limit(&request), ("configured", 64));
        assert_eq!(endpoint.served_model(request), "configured");
        let mut request = ModelRequest::plain(&config, Vec::new());
        (request.model, request.max_output_tokens) = ("own".into(), 7);
        assert_eq!(endpoint.model_and_limit(&request), ("own", 7));
        assert_eq!(endpoint.served_model(request), "own");
    }

    #[test]
    fn in_stream_errors_map_by_type() {
        assert!(matches!(stream_error("overloaded_error", None, "busy"), ProviderError::Http { status: 529, .. }));
        assert_eq!(stream_error("rate_limit_error", None, ""), ProviderError::RateLimited { retry_after: None });
        assert!(matches!(stream_error("BadRequestError", Some(400), ""), ProviderError::Http { status: 400, .. }));
        assert!(matches!(stream_error("weird", None, ""), ProviderError::Protocol(_)));
    }
}
