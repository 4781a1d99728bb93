//! HolmesGPT dialect (`/api/chat`, `/api/model`): see PROTOCOLS.md §1.
//!
//! `POST /api/chat` is three requests in one:
//! - a new question (no decisions or results): a new session, seeded with
//!   the client's `conversation_history` (or a follow-up turn of the session
//!   `session_id` names);
//! - a resume (`tool_decisions` and/or `frontend_tool_results`): the paused
//!   session, found by `session_id` or by the history the client sends back
//!   (see `sessions/history.rs`), answered with the calls as stored;
//! - either streamed (`stream: true`, SSE in the Holmes encoder) or answered
//!   as one JSON body once the turn ends or pauses.
//!
//! Every pause is indexed by the history it hands the client, before the
//! client sees it, so a resume on any replica finds it.

mod request;

use std::{convert::Infallible, time::Duration};

use axum::{
    Json,
    body::Bytes,
    extract::State,
    http::HeaderValue,
    response::{IntoResponse, Response},
};
use futures::{StreamExt, stream::BoxStream};
use serde_json::{Value, json};

use self::request::{ChatRequest, check_calls_answered, parse_history};
use super::stream;
use crate::{
    app::AppState,
    auth::Principal,
    domain::{Answers, ApprovalMode, ChatMessage, Decision, FailureCode, FrontendMode, Role, SessionOptions},
    error::{ApiError, ErrorCode},
    orchestrator::prompt,
    protocol::{Frame, holmes::HolmesEncoder},
    sessions::{NewSession, Started},
    telemetry::timing::UpstreamElapsed,
};

/// `Retry-After` of a 429 for a rate-limited turn whose error event did not
/// say how long to wait (events logged before it could).
const RATE_LIMIT_RETRY_AFTER_SECS: u64 = 10;

/// `GET /api/model`: the model aliases the caller's tenant may use. (The real
/// server sends a JSON string here; its docs show an array, which we send.)
pub async fn list_models(State(state): State<AppState>, principal: Principal) -> Result<Json<Value>, ApiError> {
    let models = super::visible_models(&state, &principal)?;
    Ok(Json(json!({"model_name": models})))
}

/// `POST /api/chat`: a question, or the answer to a paused one.
pub async fn chat(State(state): State<AppState>, principal: Principal, body: Bytes) -> Result<Response, ApiError> {
    let request = request::parse(&body)?;
    let history = request.history()?;
    if let Some(tools) = &request.frontend_tools {
        super::check_frontend_tools(&state, tools)?;
        if !request.stream && tools.iter().any(|t| t.mode == FrontendMode::Pause) {
            return Err(ApiError::bad_request("frontend tools in pause mode need \"stream\": true"));
        }
    }
    if request.is_resume() {
        resume(state, principal, request, history).await
    } else {
        ask(state, principal, request, history).await
    }
}

/// A new turn: on a new session seeded with the client's history, or on
/// the session `session_id` names.
async fn ask(
    state: AppState,
    principal: Principal,
    request: ChatRequest,
    history: Option<Vec<ChatMessage>>,
) -> Result<Response, ApiError> {
    if request.ask.trim().is_empty() && request.images.as_ref().is_none_or(Vec::is_empty) {
        return Err(ApiError::new(ErrorCode::ValidationFailed, "ask: must not be empty unless resuming"));
    }
    if let Some(history) = &history {
        check_calls_answered(history)?;
    }
    let message = request.user_message();
    let (model, started) = match &request.session_id {
        Some(id) => {
            let session = state.sessions.find_for_turn(&principal, id, history.as_deref()).await?;
            let started = state.sessions.start_turn(&principal, id, message).await?;
            (session.model().to_string(), started)
        }
        None => {
            let model = super::model_or_default(&state, &principal, request.model.as_deref())?;
            let options = options(&request);
            let seed = seed(history, &options, state.enabled_prompts.as_deref());
            let new = NewSession { id: None, model: model.clone(), dialect: "holmes", options };
            (model, state.sessions.start_conversation(&principal, new, seed, message).await?)
        }
    };
    let encoder = encoder(&state, &model);
    respond(state, principal, started, request.stream, encoder).await
}

/// The session's options from the request. Later turns and resumes keep
/// them (Holmes clients re-send `frontend_tools`; the stored ones apply).
fn options(request: &ChatRequest) -> SessionOptions {
    SessionOptions {
        frontend_tools: request.frontend_tools.clone().unwrap_or_default(),
        additional_system_prompt: request.additional_system_prompt.clone(),
        response_format: request.response_format.clone().map(Value::Object),
        behavior_controls: request.behavior_controls.clone().unwrap_or_default(),
        approval: if request.enable_tool_approval { ApprovalMode::Pause } else { ApprovalMode::Refuse },
        ..SessionOptions::default()
    }
}

/// The conversation a new session starts with, system message first: the
/// client's (with `additional_system_prompt` appended), or ours, rendered
/// now and stored, so every history we hand out shows what the model saw.
fn seed(
    history: Option<Vec<ChatMessage>>,
    options: &SessionOptions,
    enabled_prompts: Option<&[String]>,
) -> Vec<ChatMessage> {
    let extra = options.additional_system_prompt.as_deref().map(str::trim).filter(|s| !s.is_empty());
    match history {
        Some(mut history) => {
            if let (Some(extra), Some(system)) = (extra, history.first_mut()) {
                let text = system.content.get_or_insert_with(String::new);
                // A follow-up sends back a prompt that already has it.
                if !text.ends_with(extra) {
                    text.push_str("\n\n");
                    text.push_str(extra);
                }
            }
            history
        }
        None => {
            let text = prompt::system_prompt(&options.behavior_controls, enabled_prompts, extra);
            vec![ChatMessage::text(Role::System, text)]
        }
    }
}

/// Answers the paused session the request names (by `session_id` or by its
/// history) with the client's decisions and results.
async fn resume(
    state: AppState,
    principal: Principal,
    request: ChatRequest,
    history: Option<Vec<ChatMessage>>,
) -> Result<Response, ApiError> {
    let session = state.sessions.find_paused(&principal, request.session_id.as_deref(), history.as_deref()).await?;
    let results = request.frontend_tool_results.unwrap_or_default();
    for (i, result) in results.iter().enumerate() {
        let stored = session.call(&result.tool_call_id).map(|c| c.call());
        if let Some(stored) = stored.filter(|c| c.name != result.tool_name) {
            return Err(ApiError::bad_request(format!(
                "frontend_tool_results[{i}].tool_name: call {:?} is a call of {:?}, not {:?}",
                result.tool_call_id, stored.name, result.tool_name
            )));
        }
    }
    let outputs = results.into_iter().map(|r| (r.tool_call_id, r.result)).collect();
    let decisions = request
        .tool_decisions
        .unwrap_or_default()
        .into_iter()
        .map(|d| Decision { tool_call_id: d.tool_call_id, approved: d.approved, reason: d.feedback })
        .collect();
    let started = state.sessions.resume(&principal, session.id(), Answers { outputs, decisions }).await?;
    let mut encoder = encoder(&state, session.model());
    for planned in session.calls() {
        let call = planned.call();
        encoder.remember_call(&call.id, serde_json::from_str(&call.arguments).unwrap_or(json!({})));
    }
    respond(state, principal, started, request.stream, encoder).await
}

fn encoder(state: &AppState, model: &str) -> HolmesEncoder {
    HolmesEncoder::new(state.model_limits.get(model))
}

/// Follows the turn and answers: SSE, or one JSON body.
async fn respond(
    state: AppState,
    principal: Principal,
    started: Started,
    stream: bool,
    encoder: HolmesEncoder,
) -> Result<Response, ApiError> {
    let id = started.id().to_string();
    let follower = state.sessions.follow_started(started).await;
    let frames = stream::encode(&state, principal.clone(), id.clone(), follower, Box::new(encoder));
    let mut response = if stream {
        stream_response(&state, principal, id.clone(), frames)
    } else {
        let upstream = state.sessions.upstream_time(&principal, &id);
        let mut response = answer(&state, &principal, &id, frames).await?;
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
            Ok::<_, Infallible>(super::stream::sse_event(frame))
        }
    });
    super::stream::respond(state, events)
}

/// Indexes the history an `approval_required` frame carries. A failure
/// only costs the client resuming by history: `session_id` still works.
async fn index_pause(sessions: &crate::sessions::Sessions, principal: &Principal, id: &str, frame: &Frame) {
    let history =
        serde_json::from_str::<Value>(&frame.data).ok().and_then(|data| parse_history(&data["conversation_history"]));
    let result = match &history {
        Some(history) => sessions.index_history(principal, id, history).await,
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
    let mut body = json!({
        "analysis": end["analysis"],
        "conversation_history": end["conversation_history"],
        "tool_calls": tool_calls,
        "follow_up_actions": [],
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
    Ok(Json(body).into_response())
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
    }
}
