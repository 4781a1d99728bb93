//! How a Holmes turn is answered: as SSE (with keep-alives), or folded into
//! one JSON body once the turn ends or pauses — the `/api/chat` shape or,
//! for an investigation, seed 001's `{analysis, sections, tool_calls,
//! instructions}`. A turn that failed answers with a real status. Every
//! pause is indexed (its history and pending calls, `sessions/resume.rs`)
//! before the client sees it, so a resume on any replica finds it.

use std::time::Duration;

use axum::{
    Json,
    http::HeaderValue,
    response::{IntoResponse, Response},
};
use futures::{StreamExt, stream::BoxStream};
use serde_json::{Value, json};

use super::request::parse_history;
use crate::{
    api::stream,
    domain::FailureCode,
    error::{ApiError, ErrorCode},
    principal::Principal,
    protocol::{Frame, holmes::HolmesEncoder},
    sessions::Started,
    state::AppState,
    telemetry::timing::UpstreamElapsed,
};

/// `Retry-After` of a 429 for a rate-limited turn whose error event did not
/// say how long to wait (events logged before it could).
const RATE_LIMIT_RETRY_AFTER_SECS: u64 = 10;

/// What the client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `/api/chat` (and its streamed variants).
    Chat { stream: bool },
    /// `/api/investigate`, `/api/stream/investigate`.
    Investigation { stream: bool },
}

impl Shape {
    fn streams(self) -> bool {
        matches!(self, Self::Chat { stream: true } | Self::Investigation { stream: true })
    }
}

/// Follows the turn and answers: SSE, or one JSON body.
pub async fn respond(
    state: AppState,
    principal: Principal,
    started: Started,
    shape: Shape,
    encoder: HolmesEncoder,
) -> Result<Response, ApiError> {
    let id = started.id().to_string();
    let follower = state.sessions.follow_started(started).await;
    let frames = stream::encode(&state, principal.clone(), id.clone(), follower, Box::new(encoder));
    let mut response = if shape.streams() {
        stream_response(&state, principal, id.clone(), frames)
    } else {
        let upstream = state.sessions.upstream_time(&principal, &id);
        let mut response = answer(&state, &principal, &id, frames, shape).await?;
        let elapsed = UpstreamElapsed(upstream.map_or(Duration::ZERO, |u| u.get()));
        response.extensions_mut().insert(elapsed);
        response
    };
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-session-id", value);
    }
    Ok(response)
}

/// The frames as SSE, with keep-alives. A pause is indexed before its
/// `approval_required` frame leaves, so the client cannot resume too early.
fn stream_response(state: &AppState, principal: Principal, id: String, frames: BoxStream<'static, Frame>) -> Response {
    let sessions = state.sessions.clone();
    let events = frames.then(move |frame| {
        let (sessions, principal, id) = (sessions.clone(), principal.clone(), id.clone());
        async move {
            if frame.event.as_deref() == Some("approval_required") {
                index_pause(&sessions, &principal, &id, &frame).await;
            }
            frame
        }
    });
    stream::sse(state, events.boxed())
}

/// Indexes the history and the pending calls an `approval_required` frame
/// carries. A failure only costs the client resuming without its session
/// id: `session_id` still works.
async fn index_pause(sessions: &crate::sessions::Sessions, principal: &Principal, id: &str, frame: &Frame) {
    let data = serde_json::from_str::<Value>(&frame.data).unwrap_or_default();
    let history = parse_history(&data["conversation_history"]);
    let pending: Vec<&str> = ["pending_approvals", "pending_frontend_tool_calls"]
        .iter()
        .flat_map(|field| data[field].as_array().into_iter().flatten())
        .filter_map(|call| call["tool_call_id"].as_str())
        .collect();
    let result = match &history {
        Some(history) => sessions.index_pause(principal, id, history, &pending).await,
        None => Ok(()),
    };
    if history.is_none() || result.is_err() {
        tracing::warn!(session = %id, error = ?result.err(), "could not index the paused conversation");
    }
}

/// The non-stream answer: the turn's frames drained, folded into one body.
/// A turn that failed answers with a real status, not 200.
async fn answer(
    state: &AppState,
    principal: &Principal,
    id: &str,
    mut frames: BoxStream<'static, Frame>,
    shape: Shape,
) -> Result<Response, ApiError> {
    let mut tool_calls = Vec::new();
    let mut error = None;
    let mut end = None;
    while let Some(frame) = frames.next().await {
        let data: Value = serde_json::from_str(&frame.data).unwrap_or(Value::Null);
        match frame.event.as_deref() {
            Some("tool_calling_result") if data["result"]["status"] != "approval_required" => {
                tool_calls.push(json!({
                    "tool_call_id": data["tool_call_id"],
                    "tool_name": data["name"],
                    "description": data["description"],
                    "result": data["result"],
                }));
            }
            Some("error") => error = Some(data),
            Some("approval_required") => {
                index_pause(&state.sessions, principal, id, &frame).await;
                end = Some(data);
            }
            Some("ai_answer_end") => end = Some(data),
            _ => {}
        }
    }
    let Some(end) = end else { return Err(failure(error.as_ref())) };
    let body = match shape {
        Shape::Investigation { .. } => json!({
            "analysis": end["analysis"],
            "sections": end["sections"],
            "tool_calls": tool_calls,
            "instructions": end["instructions"],
            "metadata": end["metadata"],
            "session_id": id,
        }),
        Shape::Chat { .. } => chat_body(end, tool_calls, id),
    };
    Ok(Json(body).into_response())
}

/// `/api/chat`'s answer: `ChatResponse`, with `pending_approvals` (and the
/// pending frontend calls) when the turn paused.
fn chat_body(end: Value, tool_calls: Vec<Value>, id: &str) -> Value {
    let mut body = json!({
        "analysis": end["analysis"],
        "conversation_history": end["conversation_history"],
        "tool_calls": tool_calls,
        "follow_up_actions": end["follow_up_actions"],
        "metadata": end["metadata"],
        "session_id": id,
    });
    if end["requires_approval"] == true {
        body["requires_approval"] = json!(true);
        body["pending_approvals"] = end["pending_approvals"].clone();
        if end["pending_frontend_tool_calls"].as_array().is_some_and(|calls| !calls.is_empty()) {
            body["pending_frontend_tool_calls"] = end["pending_frontend_tool_calls"].clone();
        }
    }
    body
}

/// The status for a turn that ended without an answer, from its `error`
/// frame (whose `code` is the canonical error code).
fn failure(error: Option<&Value>) -> ApiError {
    let Some(error) = error else {
        return ApiError::new(ErrorCode::StoreUnavailable, "the turn did not finish here; retry the request")
            .with_retry_after(1);
    };
    let message = error["msg"].as_str().unwrap_or("the turn failed").to_string();
    let code = error["code"].as_str().unwrap_or_default();
    // A turn's failure carries a FailureCode; the stream's own failures
    // (cancelled, a lost cursor, the store) carry theirs.
    let Ok(failure) = serde_json::from_value::<FailureCode>(error["code"].clone()) else {
        return match code {
            "cancelled" => ApiError::conflict(message),
            "recovery_failed" => ApiError::new(ErrorCode::RecoveryFailed, message),
            "store_unavailable" => ApiError::new(ErrorCode::StoreUnavailable, message).with_retry_after(1),
            code => ApiError::internal(format!("turn failed with {code}: {message}")),
        };
    };
    match failure {
        FailureCode::RateLimited => ApiError::new(ErrorCode::RateLimited, message)
            .with_retry_after(error["retry_after"].as_u64().unwrap_or(RATE_LIMIT_RETRY_AFTER_SECS)),
        FailureCode::UpstreamError | FailureCode::UpstreamDisconnected => {
            ApiError::new(ErrorCode::UpstreamError, message)
        }
        FailureCode::UpstreamTimeout => ApiError::new(ErrorCode::UpstreamTimeout, message),
        FailureCode::ContextOverflow => ApiError::new(ErrorCode::InvalidRequest, message),
        FailureCode::UnknownModel => ApiError::new(ErrorCode::UnknownModel, message),
        FailureCode::StoreUnavailable => ApiError::new(ErrorCode::StoreUnavailable, message).with_retry_after(1),
        FailureCode::Internal => ApiError::internal(message),
    }
}
