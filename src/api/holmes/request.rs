//! The `POST /api/chat` body, as both seed revisions of the Holmes API send
//! it, and its translation to canonical shapes. Unknown fields are ignored
//! (Holmes clients send extras); malformed JSON, a wrong type or a missing
//! field is FastAPI's 422 naming the field (`validation.rs`).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::{
    api::openai_messages::{ImageInput, WireMessage},
    domain::FrontendTool,
    error::{ApiError, FieldError},
    providers::{ChatMessage, Role},
};

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    /// The question; may be `""` on a resume (and is then not used).
    pub ask: String,
    #[serde(default)]
    pub conversation_history: Option<Vec<WireMessage>>,
    /// A model alias; the tenant's first one by default.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub enable_tool_approval: bool,
    #[serde(default)]
    pub tool_decisions: Option<Vec<ToolDecision>>,
    #[serde(default)]
    pub frontend_tools: Option<Vec<FrontendTool>>,
    #[serde(default)]
    pub frontend_tool_results: Option<Vec<FrontendToolResult>>,
    #[serde(default)]
    pub response_format: Option<Map<String, Value>>,
    #[serde(default)]
    pub images: Option<Vec<ImageInput>>,
    #[serde(default)]
    pub additional_system_prompt: Option<String>,
    #[serde(default)]
    pub behavior_controls: Option<BTreeMap<String, bool>>,
    /// Ours: the session a resume or a follow-up question belongs to.
    #[serde(default)]
    pub session_id: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct ToolDecision {
    pub tool_call_id: String,
    pub approved: bool,
    #[serde(default)]
    pub feedback: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct FrontendToolResult {
    pub tool_call_id: String,
    pub tool_name: String,
    /// JSON-encoded by the client when it is structured.
    pub result: String,
}

impl ChatRequest {
    /// A resume answers a paused turn: it carries decisions or results.
    pub fn is_resume(&self) -> bool {
        self.tool_decisions.as_ref().is_some_and(|d| !d.is_empty())
            || self.frontend_tool_results.as_ref().is_some_and(|r| !r.is_empty())
    }

    /// The history as canonical messages (`None` when absent or empty).
    pub fn history(&self) -> Result<Option<Vec<ChatMessage>>, ApiError> {
        history_of(self.conversation_history.as_deref())
    }

    /// The ids of the tool calls this resume answers.
    pub fn answered_calls(&self) -> Vec<&str> {
        let decisions = self.tool_decisions.iter().flatten().map(|d| d.tool_call_id.as_str());
        let results = self.frontend_tool_results.iter().flatten().map(|r| r.tool_call_id.as_str());
        decisions.chain(results).collect()
    }

    /// The user message of a new turn.
    pub fn user_message(&self) -> ChatMessage {
        let images = self.images.iter().flatten().map(ImageInput::to_part).collect();
        ChatMessage { images, ..ChatMessage::text(Role::User, self.ask.clone()) }
    }
}

/// A client's `conversation_history` as canonical messages (`None` when
/// absent or empty); its first message must be the system message, as
/// Holmes' validator has it.
pub fn history_of(history: Option<&[WireMessage]>) -> Result<Option<Vec<ChatMessage>>, ApiError> {
    let Some(history) = history.filter(|h| !h.is_empty()) else { return Ok(None) };
    if history[0].role() != Role::System {
        return Err(ApiError::invalid_field(FieldError {
            loc: vec![json!("body"), json!("conversation_history")],
            msg: "Value error, The first item in conversation_history must contain 'role': 'system'".into(),
            kind: "value_error".into(),
        }));
    }
    Ok(Some(history.iter().map(WireMessage::to_message).collect()))
}

/// Parses the body (see `validation.rs`).
pub fn parse(body: &[u8]) -> Result<ChatRequest, ApiError> {
    super::validation::parse(body, "/api/chat")
}

/// Parses a history we rendered ourselves (an `approval_required` event's),
/// to index it as the client will send it back.
pub fn parse_history(history: &Value) -> Option<Vec<ChatMessage>> {
    let messages: Vec<WireMessage> = serde_json::from_value(history.clone()).ok()?;
    Some(messages.iter().map(WireMessage::to_message).collect())
}

/// Every tool call of the history must be answered before the next
/// message; only a resume may end with calls still open (the stored pause).
pub fn check_calls_answered(history: &[ChatMessage]) -> Result<(), ApiError> {
    let mut open: Vec<&str> = Vec::new();
    let mut opened_at = 0;
    for (i, message) in history.iter().enumerate() {
        if message.role == Role::Tool {
            let id = message.tool_call_id.as_deref().unwrap_or_default();
            open.retain(|c| *c != id);
            continue;
        }
        if !open.is_empty() {
            break;
        }
        if !message.tool_calls.is_empty() {
            open = message.tool_calls.iter().map(|c| c.id.as_str()).collect();
            opened_at = i;
        }
    }
    if open.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid_field(FieldError {
        loc: vec![json!("body"), json!("conversation_history"), json!(opened_at)],
        msg: format!(
            "Value error, tool calls {open:?} have no results; answer a paused conversation with tool_decisions or \
             frontend_tool_results"
        ),
        kind: "value_error".into(),
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{
        protocol::holmes::render_history,
        providers::{ImagePart, ToolCall},
    };

    #[test]
    fn a_rendered_history_parses_back_to_the_same_messages() {
        let mut user = ChatMessage::text(Role::User, "what is this?");
        user.images = vec![ImagePart { url: "https://x/y.png".into(), detail: Some("high".into()), format: None }];
        let mut assistant = ChatMessage::text(Role::Assistant, "Checking.");
        assistant.tool_calls =
            vec![ToolCall { id: "c1".into(), name: "lookup".into(), arguments: r#"{"id":"1"}"#.into() }];
        let messages = vec![
            ChatMessage::text(Role::System, "sys"),
            user,
            assistant,
            ChatMessage::tool_result("c1", "found"),
            ChatMessage { content: None, ..ChatMessage::text(Role::Assistant, "") },
        ];
        let rendered = Value::Array(render_history(&messages));
        assert_eq!(rendered[3]["name"], "lookup");
        assert_eq!(parse_history(&rendered).unwrap(), messages);
    }

    #[test]
    fn wrong_types_name_their_path_and_bad_json_is_a_validation_error_too() {
        use crate::error::ErrorCode;
        let body = json!({"ask": "hi", "conversation_history": [{"role": "system", "content": 5}]});
        let error = parse(body.to_string().as_bytes()).unwrap_err();
        assert_eq!(error.code, ErrorCode::ValidationFailed);
        assert!(error.message.starts_with("conversation_history[0].content"), "{}", error.message);
        let error = parse(br#"{"ask": "hi", "stream": "yes"}"#).unwrap_err();
        assert!(error.message.starts_with("stream:"), "{}", error.message);
        assert_eq!(parse(br#"{"ask": "#).unwrap_err().field.unwrap().kind, "json_invalid");
        assert!(parse(br#"{"ask": "x", "investigation_result": {}}"#).is_ok(), "unknown fields are ignored");
    }

    #[test]
    fn open_tool_calls_are_refused_for_a_new_question() {
        let mut assistant = ChatMessage::text(Role::Assistant, "");
        assistant.tool_calls = vec![ToolCall { id: "c1".into(), name: "t".into(), arguments: "{}".into() }];
        let mut history = vec![ChatMessage::text(Role::System, "s"), assistant];
        assert!(check_calls_answered(&history).is_err());
        history.push(ChatMessage::tool_result("c1", "ok"));
        history.push(ChatMessage::text(Role::Assistant, "done"));
        assert!(check_calls_answered(&history).is_ok());
    }
}
