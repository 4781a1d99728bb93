//! llm-gateway dialect (`/chat`, `/chat/relay/{relayId}`, `/models`,
//! `/summarize`): see docs/protocols.md §2. Errors on these routes use its
//! `{"error": "…"}` body (`error.rs` picks the shape by path), and every
//! malformed body is a 400, as llm-gateway answers: bodies are parsed here,
//! not by axum's `Json` (whose type errors would be 422s). The message
//! names the field, as the 422s of the other dialects do.
//!
//! Each `POST /chat` is a fresh session (dialect `llm-gateway`) seeded with
//! the earlier messages; its turn starts with the last (user) message and
//! the answer is the turn's stream, opened by `connected {sessionId}`.
//! Relays are live (`ApprovalMode::Relay`): the stream stays open while any
//! replica takes the decision posted to `/chat/relay/{relayId}`.
//!
//! `summarize.rs` serves `POST /summarize`, one model call that is not a
//! session.

mod summarize;

pub use self::summarize::summarize;

use axum::{
    Json,
    body::Bytes,
    extract::{Path, State},
    response::Response,
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::stream;
use crate::{
    api::openai_messages::WireMessage,
    domain::{ApprovalMode, ChatMessage, PermissionRules, RelayDecision, Role, SessionOptions, rlm::RlmOptions},
    error::ApiError,
    principal::Principal,
    protocol::llm_gateway::LlmGatewayEncoder,
    sessions::{NewSession, SessionError},
    state::AppState,
};

/// `GET /models`: the tenant's model aliases and patterns, and the model
/// requests without one get (`defaultModel`, absent when there is none).
pub async fn list_models(State(state): State<AppState>, principal: Principal) -> Result<Json<Value>, ApiError> {
    let models = super::visible_models(&state, &principal)?;
    let mut body = json!({"models": models});
    if let Some(default) = state.config.default_model(&principal.tenant) {
        body["defaultModel"] = json!(default);
    }
    Ok(Json(body))
}

/// `POST /chat`: a fresh session on the conversation, streamed as llm-gateway SSE.
pub async fn chat(State(state): State<AppState>, principal: Principal, body: Bytes) -> Result<Response, ApiError> {
    let request = ChatRequest::parse(&body).map_err(ApiError::bad_request)?;
    let model = super::model_or_default(&state, &principal, request.model.as_deref())?;
    let (agent, rlm) = (&state.config.agent, &state.config.rlm);
    // A request may lower the server's limits, not raise them. rlm mode has
    // its own (defaults 10 and 2, as llm-gateway documents them).
    let (max_iterations, max_depth, rlm) = match request.rlm_context {
        Some(context) => {
            let max_depth = request.max_depth.unwrap_or(2).min(rlm.max_depth);
            let options = RlmOptions { max_depth, context };
            (request.max_iterations.unwrap_or(10).min(rlm.max_iterations), max_depth, Some(options))
        }
        None => (
            request.max_iterations.unwrap_or(agent.max_iterations).min(agent.max_iterations),
            request.max_depth.unwrap_or(agent.max_depth).min(agent.max_depth),
            None,
        ),
    };
    let options = SessionOptions {
        rules: request.permissions,
        max_iterations: Some(max_iterations),
        max_depth: Some(max_depth),
        approval: ApprovalMode::Relay,
        rlm,
        ..SessionOptions::default()
    };
    let new = NewSession { id: None, model, dialect: "llm-gateway", options, files: None };
    let started = state.sessions.start_conversation(&principal, new, request.history, request.message).await?;
    let id = started.id().to_string();
    let follower = state.sessions.follow_started(started).await;
    let encoder = Box::new(LlmGatewayEncoder::for_chat(&id, 1, max_iterations));
    Ok(stream::stream(&state, principal, id, follower, encoder))
}

/// `POST /chat/relay/{relayId}`: a permission decision for a live relay, on
/// any replica. 404 `Session not found` / `Relay not found` (also for
/// another tenant's, and for a relay already decided: llm-gateway forgets a
/// relay once it is answered).
pub async fn relay(
    State(state): State<AppState>,
    principal: Principal,
    Path(relay_id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let body = RelayBody::parse(&body).map_err(ApiError::bad_request)?;
    state.sessions.get(&principal, &body.session_id).await.map_err(not_found)?;
    let decision =
        RelayDecision { approved: body.response.approved, always: body.response.always, reason: body.response.reason };
    state.sessions.decide_relay(&principal, Some(&body.session_id), &relay_id, decision).await.map_err(not_found)?;
    Ok(Json(json!({"success": true})))
}

/// llm-gateway's capitalised 404 messages; other errors as usual.
fn not_found(error: SessionError) -> ApiError {
    match error {
        SessionError::NotFound => ApiError::not_found("Session not found"),
        SessionError::RelayNotFound | SessionError::RelayDecided => ApiError::not_found("Relay not found"),
        other => other.into(),
    }
}

/// A validated `POST /chat` body.
#[derive(Debug)]
struct ChatRequest {
    /// `None`: the tenant's default model.
    model: Option<String>,
    /// Every message before the last.
    history: Vec<ChatMessage>,
    /// The last message: the user's, which starts the turn.
    message: ChatMessage,
    permissions: PermissionRules,
    max_iterations: Option<u32>,
    max_depth: Option<u32>,
    /// rlm mode: the REPL's `context` (empty when the request gives none);
    /// `None` in agent mode.
    rlm_context: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawChat {
    model: Option<String>,
    messages: Option<Vec<Value>>,
    permissions: Option<Value>,
    mode: Option<String>,
    max_iterations: Option<u32>,
    max_depth: Option<u32>,
    context: Option<String>,
}

impl ChatRequest {
    fn parse(body: &[u8]) -> Result<Self, String> {
        let raw: RawChat = from_json(body)?;
        let model = raw.model.filter(|m| !m.is_empty());
        let rlm_context = match raw.mode.as_deref() {
            None | Some("agent") => None,
            Some("rlm") => Some(raw.context.unwrap_or_default()),
            Some(other) => return Err(format!("unknown mode {other:?}; use \"agent\" or \"rlm\"")),
        };
        if raw.max_iterations == Some(0) {
            return Err("`maxIterations` must be at least 1".into());
        }
        let permissions = match raw.permissions {
            None | Some(Value::Null) => PermissionRules::default(),
            Some(value) => serde_json::from_value(value).map_err(|e| format!("`permissions`: {e}"))?,
        };
        let raw_messages = raw.messages.ok_or("`messages` is required")?;
        let mut messages = raw_messages
            .into_iter()
            .enumerate()
            .map(|(i, value)| message(value).map_err(|e| format!("`messages[{i}]`: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        check_conversation(&messages)?;
        let message = messages.pop().ok_or("`messages` must not be empty")?;
        Ok(Self {
            model,
            history: messages,
            message,
            permissions,
            max_iterations: raw.max_iterations,
            max_depth: raw.max_depth,
            rlm_context,
        })
    }
}

/// One wire message as a canonical one, with llm-gateway's rules: tool calls
/// only from the assistant, a `tool_call_id` exactly on tool messages,
/// images only from the user.
fn message(value: Value) -> Result<ChatMessage, String> {
    let message = serde_json::from_value::<WireMessage>(value).map_err(|e| e.to_string())?.to_message();
    if !message.tool_calls.is_empty() && message.role != Role::Assistant {
        return Err("only assistant messages may have `tool_calls`".into());
    }
    if message.tool_call_id.is_some() != (message.role == Role::Tool) {
        return Err("a tool message needs a `tool_call_id`, and only a tool message may have one".into());
    }
    if !message.images.is_empty() && message.role != Role::User {
        return Err("only user messages may have images".into());
    }
    Ok(message)
}

/// The conversation must end with a user message, and every assistant tool
/// call must be answered by a tool message before anything else is said
/// (model providers refuse such a history; better a 400 now than a failed
/// stream).
fn check_conversation(messages: &[ChatMessage]) -> Result<(), String> {
    let last = messages.last().ok_or("`messages` must not be empty")?;
    if last.role != Role::User {
        return Err("the last message must be from the user".into());
    }
    if last.content.as_deref().unwrap_or("").is_empty() && last.images.is_empty() {
        return Err("the last message has no content".into());
    }
    let mut open: Vec<&str> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        if message.role == Role::Tool {
            let id = message.tool_call_id.as_deref().unwrap_or_default();
            let Some(at) = open.iter().position(|c| *c == id) else {
                return Err(format!(
                    "`messages[{i}]` answers tool call {id:?}, which no earlier assistant message made"
                ));
            };
            open.remove(at);
            continue;
        }
        if let Some(id) = open.first() {
            return Err(format!("tool call {id:?} has no tool message before `messages[{i}]`"));
        }
        open.extend(message.tool_calls.iter().map(|c| c.id.as_str()));
    }
    Ok(())
}

/// Parses a body, naming the field of a type error (`response.approved:
/// invalid type…`); malformed JSON is reported as such.
fn from_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() || path == "." {
            format!("invalid request body: {inner}")
        } else {
            format!("`{path}`: {inner}")
        }
    })
}

/// A validated `POST /chat/relay/{relayId}` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RelayBody {
    session_id: String,
    response: RelayResponse,
}

#[derive(Debug, Deserialize)]
struct RelayResponse {
    approved: bool,
    #[serde(default)]
    always: bool,
    #[serde(default)]
    reason: Option<String>,
}

impl RelayBody {
    fn parse(body: &[u8]) -> Result<Self, String> {
        let parsed: Self = from_json(body)?;
        if parsed.session_id.is_empty() {
            return Err("`sessionId` must not be empty".into());
        }
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: Value) -> Result<ChatRequest, String> {
        ChatRequest::parse(body.to_string().as_bytes())
    }

    #[test]
    fn the_history_is_every_message_but_the_last_user_one() {
        let request = parse(json!({"model": "m", "maxIterations": 3, "messages": [
            {"role": "user", "content": "refund 9"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "refund", "arguments": "{\"order\":\"9\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "done"},
            {"role": "user", "content": [{"type": "text", "text": "and now?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]},
        ]}))
        .unwrap();
        assert_eq!(request.history.len(), 3);
        assert_eq!(request.history[1].tool_calls[0].arguments, r#"{"order":"9"}"#);
        assert_eq!(request.message.content.as_deref(), Some("and now?"));
        assert_eq!(request.message.images.len(), 1);
        assert_eq!(request.max_iterations, Some(3));
    }

    #[test]
    fn bad_conversations_are_refused_with_a_reason() {
        let cases = [
            (json!({"model": "m"}), "`messages` is required"),
            (json!({"model": "m", "messages": []}), "must not be empty"),
            (json!({"model": "m", "messages": [{"role": "assistant", "content": "x"}]}), "from the user"),
            (json!({"model": "m", "mode": "repl", "messages": [{"role": "user", "content": "x"}]}), "unknown mode"),
            (
                json!({"model": "m", "mode": "rlm", "context": 3, "messages": [{"role": "user", "content": "x"}]}),
                "context",
            ),
            (json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]}), "messages[0]"),
            (json!({"model": "m", "maxIterations": "3", "messages": []}), "`maxIterations`: invalid type"),
            (
                json!({"model": "m", "messages": [{"role": "tool", "tool_call_id": "c9", "content": "x"},
                    {"role": "user", "content": "x"}]}),
                "no earlier assistant message",
            ),
            (
                json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [
                    {"id": "c1", "function": {"name": "t", "arguments": "{}"}}]}, {"role": "user", "content": "x"}]}),
                "has no tool message",
            ),
        ];
        for (body, expected) in cases {
            let error = parse(body.clone()).unwrap_err();
            assert!(error.contains(expected), "{body}: {error}");
        }
        let error = RelayBody::parse(br#"{"sessionId": "s", "response": {"approved": "yes"}}"#).unwrap_err();
        assert!(error.starts_with("`response.approved`: invalid type"), "{error}");
        assert!(RelayBody::parse(b"{").unwrap_err().starts_with("invalid request body"));
    }
}
