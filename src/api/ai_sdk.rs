//! The Vercel AI SDK chat endpoints (docs/protocols.md §5), for `useChat` (ai@6
//! and ai@7) with `DefaultChatTransport({api: "/v1/ai-sdk/chat"})`:
//!
//! - `POST /v1/ai-sdk/chat` `{id, messages, trigger, messageId?}` plus our
//!   optional `model` and `frontend_tools` (the transport's `body` option).
//!   The chat id is the session id (see [`client_chat`]): a new id starts a
//!   session seeded with the earlier messages' text; a known one starts a
//!   turn with the last (user) message; a paused one is answered from the
//!   tool parts of the last (assistant) message: `output-available` /
//!   `output-error` for client tools, `approval.approved` for approvals
//!   (see [`messages`]). `trigger: "regenerate-message"` (`regenerate()`)
//!   drops the last answer and answers the last user message again; the
//!   regenerated message is a new one (`<chat>-<turn>`, as every turn's).
//!   The answer is the turn's UI message stream.
//! - `GET /v1/ai-sdk/chat/{id}/stream`: replays the running turn from its
//!   `start` (as the SDK's resume expects) and follows it; 204 when none runs.
//!
//! Approvals pause the turn (`ApprovalMode::Pause`): the stream ends with
//! `tool-approval-request`s, and the client's `addToolApprovalResponse`
//! answers come back with the next POST.
//!
//! Client tools: declared in `frontend_tools`, or only in the app's UI. The
//! AI SDK sends no tool definitions, so a tool the app runs but never
//! declares is known by its name alone: a call the model makes to a tool
//! that is no server tool is the client's (the turn pauses on it), and the
//! tools the messages' tool parts name are remembered on the session, so
//! later model calls offer them (without a description or a schema).
//!
//! The request does not say which `ai` version sent it, and both read the
//! same chunks, except that ai@7 has `reset-step` for a step a takeover cut
//! short: an app on ai@7 sends `X-AI-SDK-Version: 7` to get it; any other
//! request gets the stream ai@6 reads ([`AiSdkVersion`]).

mod messages;

use axum::{
    Json,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use serde::Deserialize;

use self::messages::{UiConversation, UiMessage, tool_parts};
use super::{client_chat, stream};
use crate::{
    domain::{ApprovalMode, FrontendTool, SessionOptions},
    error::ApiError,
    principal::Principal,
    protocol::ai_sdk::{AiSdkEncoder, AiSdkVersion, VERSION_HEADER},
    sessions::NewSession,
    state::AppState,
};

/// `DefaultChatTransport`'s body. Other fields an app adds are ignored.
#[derive(Debug, Deserialize)]
pub struct ChatBody {
    id: String,
    messages: Vec<UiMessage>,
    #[serde(default)]
    trigger: Option<String>,
    #[serde(default, rename = "messageId")]
    message_id: Option<String>,
    /// Ours: a model alias (default: the tenant's first).
    #[serde(default)]
    model: Option<String>,
    /// Ours: tools the client runs (`onToolCall` + `addToolOutput`).
    #[serde(default)]
    frontend_tools: Vec<FrontendTool>,
}

impl ChatBody {
    fn conversation(&self) -> UiConversation<'_> {
        UiConversation { id: &self.id, messages: &self.messages, message_id: self.message_id.as_deref() }
    }
}

/// `POST /v1/ai-sdk/chat`.
pub async fn chat(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    Json(body): Json<ChatBody>,
) -> Result<Response, ApiError> {
    client_chat::check_id("id", &body.id)?;
    let version = client_version(&headers)?;
    if body.trigger.as_deref() == Some("regenerate-message") {
        return regenerate(state, principal, version, body).await;
    }
    super::check_frontend_tools(&state, &body.frontend_tools)?;
    let model = super::model_or_default(&state, &principal, body.model.as_deref())?;
    let options = SessionOptions {
        frontend_tools: body.frontend_tools.clone(),
        approval: ApprovalMode::Pause,
        undeclared_tools_are_client: true,
        ..SessionOptions::default()
    };
    let new = NewSession { id: None, model, dialect: "ai-sdk", options, files: None };
    let conversation = body.conversation();
    let proceeded = client_chat::proceed(&state, &principal, new, &conversation).await?;
    let encoder = if proceeded.resumed {
        let last = conversation.last_assistant();
        let message_id = body.message_id.clone().or_else(|| last.map(|m| m.id.clone())).filter(|id| !id.is_empty());
        let known = last.map(|m| tool_parts(m).map(|p| p.id.to_string()).collect()).unwrap_or_default();
        AiSdkEncoder::continuing(version, message_id, known)
    } else {
        AiSdkEncoder::new(version)
    };
    let follower = state.sessions.follow_started(proceeded.started).await;
    Ok(stream::stream(&state, principal, body.id, follower, Box::new(encoder)))
}

/// `trigger: "regenerate-message"` (see [`UiConversation`]'s check of it).
async fn regenerate(
    state: AppState,
    principal: Principal,
    version: AiSdkVersion,
    body: ChatBody,
) -> Result<Response, ApiError> {
    let started = client_chat::regenerate(&state, &principal, &body.conversation()).await?;
    let follower = state.sessions.follow_started(started).await;
    Ok(stream::stream(&state, principal, body.id, follower, Box::new(AiSdkEncoder::new(version))))
}

/// `GET /v1/ai-sdk/chat/{id}/stream`.
pub async fn reconnect(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let version = client_version(&headers)?;
    let view = state.sessions.get(&principal, &id).await?;
    if !view.session.status().is_active() {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    // The running turn (or its continuation) is replayed from its `start`.
    let follower = state.sessions.follow(&principal, &id, view.turn_start_seq).await?;
    Ok(stream::stream(&state, principal, id, follower, Box::new(AiSdkEncoder::new(version))))
}

/// The `ai` version the request's `X-AI-SDK-Version` header names (ai@6's
/// stream when it has none); a value that is no version is a 400.
pub fn client_version(headers: &HeaderMap) -> Result<AiSdkVersion, ApiError> {
    let Some(value) = headers.get(VERSION_HEADER) else { return Ok(AiSdkVersion::default()) };
    value
        .to_str()
        .ok()
        .and_then(AiSdkVersion::from_header)
        .ok_or_else(|| ApiError::bad_request(format!("{VERSION_HEADER} must be the ai package's version, such as 7")))
}
