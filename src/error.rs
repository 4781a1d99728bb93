//! The API error type and the one place errors become HTTP responses.
//!
//! Handlers and extractors return [`ApiError`]. Its `IntoResponse` only sets
//! the status and attaches an [`ErrorReport`] extension; the
//! [`render_errors`] middleware then writes the JSON body (with the request
//! id), adds `Retry-After`, and logs the cause chain once. The same middleware
//! rescues error responses that axum or tower made themselves (a 405, an
//! extractor rejection), so every error a client sees has the same shape:
//!
//! ```json
//! {"error": {"code": "not_found", "message": "…", "request_id": "…"}}
//! ```
//!
//! except where a dialect's clients expect their own: llm-gateway routes
//! answer `{"error": "…"}`, HolmesGPT routes (`/api/…`) FastAPI's
//! `{"detail": "…"}`, and for a field that fails validation FastAPI's list
//! `{"detail": [{"loc": ["body", …], "msg": "…", "type": "…"}]}` (built from
//! [`FieldError`]); which routes are whose is the dialect registry's
//! ([`crate::config::Dialect`]). Internal details (`ErrorReport::detail`)
//! are logged, never sent.

use axum::{
    extract::Request,
    http::{HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use serde_json::json;

use crate::config::{Dialect, ErrorStyle};

/// The header that carries a request's id: set (or kept from the load
/// balancer) by the middleware stack, echoed on every response and put in
/// every error body.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Stable machine-readable error codes, used in bodies and metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    InvalidJson,
    InvalidRequest,
    ValidationFailed,
    UnknownModel,
    Unauthorized,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    Conflict,
    RecoveryFailed,
    PayloadTooLarge,
    UnsupportedMediaType,
    RateLimited,
    RequestTimeout,
    HeadersTooLarge,
    StoreUnavailable,
    /// The replica is shutting down (readiness); another one answers.
    Draining,
    /// The sandbox does not work on this replica (readiness).
    SandboxUnavailable,
    UpstreamError,
    UpstreamTimeout,
    Internal,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidJson => "invalid_json",
            Self::InvalidRequest => "invalid_request",
            Self::ValidationFailed => "validation_failed",
            Self::UnknownModel => "unknown_model",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::Conflict => "conflict",
            Self::RecoveryFailed => "recovery_failed",
            Self::PayloadTooLarge => "payload_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::RateLimited => "rate_limited",
            Self::RequestTimeout => "request_timeout",
            Self::HeadersTooLarge => "headers_too_large",
            Self::StoreUnavailable => "store_unavailable",
            Self::Draining => "draining",
            Self::SandboxUnavailable => "sandbox_unavailable",
            Self::UpstreamError => "upstream_error",
            Self::UpstreamTimeout => "upstream_timeout",
            Self::Internal => "internal",
        }
    }

    pub fn status(self) -> StatusCode {
        match self {
            Self::InvalidJson | Self::InvalidRequest | Self::UnknownModel => StatusCode::BAD_REQUEST,
            Self::ValidationFailed => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden => StatusCode::FORBIDDEN,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Conflict => StatusCode::CONFLICT,
            Self::RecoveryFailed => StatusCode::GONE,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Self::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::StoreUnavailable | Self::Draining | Self::SandboxUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::UpstreamError => StatusCode::BAD_GATEWAY,
            Self::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The code for an error response something other than [`ApiError`] made.
    fn for_status(status: StatusCode) -> Self {
        match status.as_u16() {
            400 => Self::InvalidRequest,
            401 => Self::Unauthorized,
            403 => Self::Forbidden,
            404 => Self::NotFound,
            405 => Self::MethodNotAllowed,
            408 => Self::RequestTimeout,
            409 => Self::Conflict,
            413 => Self::PayloadTooLarge,
            415 => Self::UnsupportedMediaType,
            422 => Self::ValidationFailed,
            429 => Self::RateLimited,
            431 => Self::HeadersTooLarge,
            502 => Self::UpstreamError,
            503 => Self::StoreUnavailable,
            504 => Self::UpstreamTimeout,
            _ => Self::Internal,
        }
    }
}

/// An error to answer a request with.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: ErrorCode,
    /// For a human; safe to show to the client.
    pub message: String,
    /// Seconds, for 429 and 503 answers.
    pub retry_after: Option<u64>,
    /// The internal cause, logged once and never sent.
    pub detail: Option<String>,
    /// Extra response headers (rate-limit headers on a 429).
    pub headers: Vec<(&'static str, String)>,
    /// The field that failed validation, for dialects that list it (boxed:
    /// errors travel in every `Result` of the API layer).
    pub field: Option<Box<FieldError>>,
}

/// One field's validation failure, as FastAPI (pydantic) reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// Where in the request: `["body", "tool_decisions", 0, "approved"]`.
    pub loc: Vec<serde_json::Value>,
    pub msg: String,
    /// pydantic's error type: `missing`, `bool_type`, `json_invalid`, …
    pub kind: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), retry_after: None, detail: None, headers: Vec::new(), field: None }
    }
    /// A 422 for one field of the body: the message reads `path: msg`.
    pub fn invalid_field(field: FieldError) -> Self {
        let path = field.loc.iter().skip(1).fold(String::new(), |mut path, part| {
            match part {
                serde_json::Value::Number(n) => path.push_str(&format!("[{n}]")),
                serde_json::Value::String(s) if path.is_empty() => path.push_str(s),
                serde_json::Value::String(s) => path.push_str(&format!(".{s}")),
                other => path.push_str(&format!(".{other}")),
            }
            path
        });
        let message = if path.is_empty() { field.msg.clone() } else { format!("{path}: {}", field.msg) };
        Self { field: Some(Box::new(field)), ..Self::new(ErrorCode::ValidationFailed, message) }
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthorized, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Conflict, message)
    }
    /// An internal failure: the client gets a generic message, the log the cause.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::new(ErrorCode::Internal, "internal error").with_detail(detail)
    }
    pub fn with_detail(mut self, detail: impl std::fmt::Display) -> Self {
        self.detail = Some(detail.to_string());
        self
    }
    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for ApiError {}

impl From<crate::sessions::SessionError> for ApiError {
    fn from(error: crate::sessions::SessionError) -> Self {
        use crate::{sessions::SessionError as E, store::StoreError as S};
        match error {
            E::NotFound => Self::not_found("session not found"),
            E::RelayNotFound => Self::not_found("relay not found"),
            e @ E::RelayDecided => Self::conflict(e.to_string()),
            E::RateLimited { message, retry_after_secs } => {
                Self::new(ErrorCode::RateLimited, message).with_retry_after(retry_after_secs)
            }
            E::Conflict(message) => Self::conflict(message),
            E::Invalid(message) => Self::bad_request(message),
            E::Forbidden(message) => Self::new(ErrorCode::Forbidden, message),
            e @ E::CursorExpired { .. } => Self::new(ErrorCode::RecoveryFailed, e.to_string()),
            E::Store(e @ S::Unavailable(_)) => {
                Self::new(ErrorCode::StoreUnavailable, "the session store is not reachable")
                    .with_retry_after(1)
                    .with_detail(e)
            }
            E::Store(e @ S::Corrupt(_)) => Self::internal(e),
        }
    }
}

/// Answered as 404 (unknown session or history), or as the session error.
impl From<crate::sessions::FindError> for ApiError {
    fn from(error: crate::sessions::FindError) -> Self {
        use crate::sessions::FindError as F;
        match error {
            F::UnknownSession | F::UnknownHistory => Self::not_found(error.to_string()),
            F::Session(e) => e.into(),
        }
    }
}

/// What [`render_errors`] needs to write the body; carried as an extension.
#[derive(Debug, Clone)]
pub struct ErrorReport(pub ApiError);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = self.code.status().into_response();
        response.extensions_mut().insert(ErrorReport(self));
        response
    }
}

/// The error body a route's clients parse: its dialect's, else the standard one.
fn body_style(path: &str) -> ErrorStyle {
    Dialect::of_path(path).map_or(ErrorStyle::Standard, |dialect| dialect.spec().errors)
}

/// The one rescue: every error response leaves through here.
pub async fn render_errors(request: Request, next: Next) -> Response {
    let style = body_style(request.uri().path());
    let request_id =
        request.headers().get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let error = match response.extensions().get::<ErrorReport>() {
        Some(ErrorReport(error)) => error.clone(),
        // Already rendered by a dialect encoder: leave it alone.
        None if is_json(&response) => return response,
        None => rescued(status, response).await,
    };
    log_once(&error, status);

    let body = match style {
        ErrorStyle::Standard => json!({"error": {
            "code": error.code.as_str(),
            "message": error.message,
            "request_id": request_id,
        }}),
        ErrorStyle::LlmGateway => json!({"error": error.message}),
        ErrorStyle::OpenAi => json!({"error": {
            "message": error.message,
            "type": openai_type(status),
            "param": error.field.as_ref().map(|f| f.loc.iter().map(|part| match part {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            }).collect::<Vec<_>>().join(".")),
            "code": error.code.as_str(),
        }}),
        ErrorStyle::Holmes => match &error.field {
            Some(field) => json!({"detail": [{"loc": field.loc, "msg": field.msg, "type": field.kind}]}),
            None => json!({"detail": error.message}),
        },
    };
    let mut out = (status, axum::Json(body)).into_response();
    if let Some(secs) = error.retry_after {
        out.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    for (name, value) in &error.headers {
        if let Ok(value) = HeaderValue::from_str(value) {
            out.headers_mut().insert(*name, value);
        }
    }
    out
}

/// OpenAI's error `type` for a status, as its API answers.
fn openai_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        409 => "conflict_error",
        429 => "rate_limit_error",
        500.. => "server_error",
        _ => "invalid_request_error",
    }
}

/// Turns an error response made by axum or tower into an [`ApiError`]. Their
/// texts (e.g. "Failed to deserialize the JSON body…: missing field `ask`")
/// describe the client's mistake and are kept; a 5xx's text is not.
async fn rescued(status: StatusCode, response: Response) -> ApiError {
    let code = ErrorCode::for_status(status);
    if status.is_server_error() {
        return ApiError::new(code, "internal error");
    }
    let bytes = axum::body::to_bytes(response.into_body(), 4096).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes).trim().to_string();
    let message = if text.is_empty() { status.canonical_reason().unwrap_or("error").to_lowercase() } else { text };
    ApiError::new(code, message)
}

fn is_json(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"))
}

fn log_once(error: &ApiError, status: StatusCode) {
    let code = error.code.as_str();
    let detail = error.detail.as_deref().unwrap_or("");
    if status.is_server_error() {
        tracing::error!(code, status = status.as_u16(), detail, "request failed");
    } else {
        tracing::info!(code, status = status.as_u16(), detail, "request refused");
    }
}
