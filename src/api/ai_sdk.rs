//! The Vercel AI SDK chat endpoints (PROTOCOLS.md §5), for `useChat` with
//! `DefaultChatTransport({api: "/v1/ai-sdk/chat"})`:
//!
//! - `POST /v1/ai-sdk/chat` `{id, messages, trigger, messageId?}` plus our
//!   optional `model` and `frontend_tools` (the transport's `body` option).
//!   The chat id is the session id (see [`client_chat`]): a new id starts a
//!   session seeded with the earlier messages' text; a known one starts a
//!   turn with the last (user) message; a paused one is answered from the
//!   tool parts of the last (assistant) message: `output-available` /
//!   `output-error` for frontend tools, `approval.approved` for approvals.
//!   The answer is the turn's UI message stream. Parts of a step a
//!   takeover voided (those a `data-step-restarted` part ends) are not read.
//! - `GET /v1/ai-sdk/chat/{id}/stream`: replays the running turn from its
//!   `start` (as the SDK's resume expects) and follows it; 204 when none runs.
//!
//! Approvals pause the turn (`ApprovalMode::Pause`): the stream ends with
//! `tool-approval-request`s, and the client's `addToolApprovalResponse`
//! answers come back with the next POST. `trigger: "regenerate-message"` is
//! refused: a session's history is not rewritten.
//!
//! The request does not say which `ai` version sent it, and both ai@6 and
//! ai@7 read the same chunks, except that ai@7 has `reset-step` for a step a
//! takeover cut short: an app on ai@7 sends `X-AI-SDK-Version: 7` to get it;
//! any other request gets the stream ai@6 reads ([`AiSdkVersion`]).

use axum::{
    Json,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::Value;

use super::{
    client_chat::{self, Conversation},
    stream,
};
use crate::{
    app::AppState,
    auth::Principal,
    domain::{Answers, ApprovalMode, ChatMessage, Decision, FrontendTool, Role, Session, SessionOptions},
    error::ApiError,
    protocol::ai_sdk::{AiSdkEncoder, AiSdkVersion, VERSION_HEADER, live_parts},
    sessions::NewSession,
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

#[derive(Debug, Deserialize)]
struct UiMessage {
    #[serde(default)]
    id: String,
    role: UiRole,
    #[serde(default)]
    parts: Vec<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum UiRole {
    System,
    User,
    Assistant,
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
        return Err(ApiError::bad_request("regenerate-message is not supported: send a new message instead"));
    }
    super::check_frontend_tools(&state, &body.frontend_tools)?;
    let model = super::model_or_default(&state, &principal, body.model.as_deref())?;
    let options = SessionOptions {
        frontend_tools: body.frontend_tools.clone(),
        approval: ApprovalMode::Pause,
        ..SessionOptions::default()
    };
    let new = NewSession { id: None, model, dialect: "ai-sdk", options };
    let proceeded = client_chat::proceed(&state, &principal, new, &body).await?;
    let encoder = if proceeded.resumed {
        let last = body.messages.iter().rev().find(|m| m.role == UiRole::Assistant);
        let message_id = body.message_id.clone().or_else(|| last.map(|m| m.id.clone())).filter(|id| !id.is_empty());
        let known = last.map(|m| tool_parts(m).map(|p| p.id.to_string()).collect()).unwrap_or_default();
        AiSdkEncoder::continuing(version, message_id, known)
    } else {
        AiSdkEncoder::new(version)
    };
    let follower = state.sessions.follow_started(proceeded.started).await;
    Ok(stream::stream(&state, principal, body.id, follower, Box::new(encoder)))
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

impl Conversation for ChatBody {
    fn chat_id(&self) -> &str {
        &self.id
    }

    fn turn(&self) -> Option<(ChatMessage, Vec<ChatMessage>)> {
        let (last, earlier) = self.messages.split_last()?;
        let text = text_of(last);
        if last.role != UiRole::User || text.is_empty() {
            return None;
        }
        let history = earlier
            .iter()
            .filter_map(|m| {
                let text = text_of(m);
                let role = match m.role {
                    UiRole::System => Role::System,
                    UiRole::User => Role::User,
                    UiRole::Assistant => Role::Assistant,
                };
                (!text.is_empty()).then(|| ChatMessage::text(role, text))
            })
            .collect();
        Some((ChatMessage::text(Role::User, text), history))
    }

    fn answers(&self, session: &Session) -> Result<Answers, ApiError> {
        let parts: Vec<ToolPart> = match self.messages.last() {
            Some(last) if last.role == UiRole::Assistant => tool_parts(last).collect(),
            _ => Vec::new(),
        };
        let part = |id: &str| parts.iter().find(|p| p.id == id);
        let mut resume = Answers::default();
        let (mut missing_calls, mut missing_approvals) = (Vec::new(), Vec::new());
        let (pending_calls, pending_relays) = (session.pending_calls(), session.pending_relays());
        for call in &pending_calls {
            match part(&call.tool_call_id).and_then(ToolPart::output) {
                Some(output) => resume.outputs.push((call.tool_call_id.clone(), output)),
                None => missing_calls.push(call.tool_call_id.as_str()),
            }
        }
        for relay in &pending_relays {
            match part(&relay.tool_call_id).and_then(ToolPart::decision) {
                Some((approved, reason)) => {
                    resume.decisions.push(Decision { tool_call_id: relay.tool_call_id.clone(), approved, reason });
                }
                None => missing_approvals.push(relay.tool_call_id.as_str()),
            }
        }
        if missing_calls.is_empty() && missing_approvals.is_empty() {
            Ok(resume)
        } else {
            Err(client_chat::still_waiting(&missing_calls, &missing_approvals))
        }
    }
}

/// The text parts of a message, joined (not those of a step a takeover
/// voided).
fn text_of(message: &UiMessage) -> String {
    let texts: Vec<&str> = live_parts(&message.parts)
        .into_iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    texts.join("\n")
}

/// A tool part (`tool-<name>` or `dynamic-tool`) of a message, as far as
/// answering a paused turn needs it.
struct ToolPart<'a> {
    id: &'a str,
    part: &'a Value,
}

fn tool_parts(message: &UiMessage) -> impl Iterator<Item = ToolPart<'_>> {
    live_parts(&message.parts).into_iter().filter_map(|part| {
        let kind = part["type"].as_str()?;
        let is_tool = kind.starts_with("tool-") || kind == "dynamic-tool";
        is_tool.then_some(ToolPart { id: part["toolCallId"].as_str()?, part })
    })
}

impl ToolPart<'_> {
    /// A frontend tool's result: its output (text as is, anything else as
    /// JSON text), or its error.
    fn output(&self) -> Option<String> {
        match self.part["state"].as_str()? {
            "output-available" => Some(match &self.part["output"] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            }),
            "output-error" => Some(format!("Error: {}", self.part["errorText"].as_str().unwrap_or("the tool failed"))),
            _ => None,
        }
    }

    /// An approval response: approved, and the reason given.
    fn decision(&self) -> Option<(bool, Option<String>)> {
        let approval = &self.part["approval"];
        let approved = approval["approved"].as_bool()?;
        Some((approved, approval["reason"].as_str().map(str::to_string)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_parts_of_a_step_a_takeover_voided_are_not_read() {
        let message: UiMessage = serde_json::from_value(json!({"id": "s1-1", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "text", "text": "w1 w2 ", "state": "done"},
            {"type": "tool-chart", "toolCallId": "c1", "state": "output-error", "errorText": "not made"},
            {"type": "data-step-restarted", "id": "step-restarted-4", "data": {"step": 1}},
            {"type": "step-start"},
            {"type": "text", "text": "w1 w2 w3", "state": "done"},
            {"type": "tool-chart", "toolCallId": "c1", "state": "output-available", "output": {"drawn": true}},
        ]}))
        .unwrap();
        assert_eq!(text_of(&message), "w1 w2 w3");
        let outputs: Vec<Option<String>> = tool_parts(&message).map(|p| p.output()).collect();
        assert_eq!(
            outputs,
            [Some(r#"{"drawn":true}"#.to_string())],
            "the regenerated call's output, not the void one's"
        );
    }
}
