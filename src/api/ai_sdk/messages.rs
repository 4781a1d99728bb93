//! The AI SDK's `UIMessage`s as a request carries them, and what the chat
//! reads of them ([`Conversation`]): the user's new text, the answers to a
//! paused turn in the tool parts of the last (assistant) message, and the
//! names of the tools the parts show (the client's own tools, for an app
//! that declares them only in its UI).
//!
//! Parts of a step a takeover voided (those a `data-step-restarted` part
//! ends, as ai@6 clients keep them) are not read.

use serde::Deserialize;
use serde_json::Value;

use super::super::client_chat::{self, Conversation};
use crate::{
    domain::{Answers, ChatMessage, Decision, Role, Session},
    error::ApiError,
    protocol::ai_sdk::live_parts,
};

/// Most distinct tool names read from one request's parts.
const MAX_TOOL_NAMES: usize = 64;

#[derive(Debug, Deserialize)]
pub struct UiMessage {
    #[serde(default)]
    pub id: String,
    pub role: UiRole,
    #[serde(default)]
    pub parts: Vec<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UiRole {
    System,
    User,
    Assistant,
}

/// A chat's messages as one request carries them, and the `messageId` it
/// names.
pub struct UiConversation<'a> {
    pub id: &'a str,
    pub messages: &'a [UiMessage],
    pub message_id: Option<&'a str>,
}

impl UiConversation<'_> {
    /// The last assistant message the request holds.
    pub fn last_assistant(&self) -> Option<&UiMessage> {
        self.messages.iter().rev().find(|m| m.role == UiRole::Assistant)
    }
}

impl Conversation for UiConversation<'_> {
    fn chat_id(&self) -> &str {
        self.id
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
            // A part still `input-available` (no output) is a call the client has yet to run.
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

    /// `regenerate()` dropped the answer it regenerates and sends the
    /// messages before it, up to the user message that answer answered.
    /// `messageId`, when given, names that answer (`<chat>-<turn>`, the
    /// last turn's) or that user message: an earlier answer cannot be
    /// regenerated, the server's history being the truth.
    fn regenerates(&self, session: &Session) -> Result<(), ApiError> {
        let Some(last) = self.messages.last().filter(|m| m.role == UiRole::User) else {
            return Err(ApiError::bad_request(
                "regenerate-message needs the messages up to the user message whose answer is regenerated",
            ));
        };
        let last_answer = format!("{}-{}", self.id, session.turn());
        if let Some(id) = self.message_id.filter(|id| !id.is_empty() && *id != last_answer && *id != last.id) {
            return Err(ApiError::conflict(format!(
                "only the last answer ({last_answer}) can be regenerated, not {id:?}"
            )));
        }
        // An earlier user message (`regenerate({messageId})` of an earlier
        // one) would fork the conversation the server keeps.
        let stored = session.history().and_then(|h| h.iter().rev().find(|m| m.role == Role::User));
        if stored.is_some_and(|m| m.content.as_deref() != Some(text_of(last).as_str())) {
            return Err(ApiError::conflict(
                "only the last answer can be regenerated: the messages sent do not end with the chat's last user message",
            ));
        }
        Ok(())
    }

    /// The tools of every assistant message's tool parts (`tool-<name>`,
    /// or a `dynamic-tool`'s `toolName`), in order, each once.
    fn tool_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let assistants = self.messages.iter().filter(|m| m.role == UiRole::Assistant);
        let parts = assistants.flat_map(tool_parts);
        for name in parts.filter_map(|p| p.tool_name()) {
            if names.len() >= MAX_TOOL_NAMES {
                break;
            }
            if !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
        names
    }
}

/// The text parts of a message, joined (not those of a step a takeover
/// voided).
pub fn text_of(message: &UiMessage) -> String {
    let texts: Vec<&str> = live_parts(&message.parts)
        .into_iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    texts.join("\n")
}

/// A tool part (`tool-<name>` or `dynamic-tool`) of a message, as far as
/// answering a paused turn needs it.
pub struct ToolPart<'a> {
    pub id: &'a str,
    part: &'a Value,
}

pub fn tool_parts(message: &UiMessage) -> impl Iterator<Item = ToolPart<'_>> {
    live_parts(&message.parts).into_iter().filter_map(|part| {
        let kind = part["type"].as_str()?;
        let is_tool = kind.starts_with("tool-") || kind == "dynamic-tool";
        is_tool.then_some(ToolPart { id: part["toolCallId"].as_str()?, part })
    })
}

impl<'a> ToolPart<'a> {
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

    /// The tool's name: a static part's type after `tool-`, a dynamic
    /// part's `toolName`.
    fn tool_name(&self) -> Option<&'a str> {
        match self.part["type"].as_str()? {
            "dynamic-tool" => self.part["toolName"].as_str(),
            kind => kind.strip_prefix("tool-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn message(value: Value) -> UiMessage {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_parts_of_a_step_a_takeover_voided_are_not_read() {
        let message = message(json!({"id": "s1-1", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "text", "text": "w1 w2 ", "state": "done"},
            {"type": "tool-chart", "toolCallId": "c1", "state": "output-error", "errorText": "not made"},
            {"type": "data-step-restarted", "id": "step-restarted-4", "data": {"step": 1}},
            {"type": "step-start"},
            {"type": "text", "text": "w1 w2 w3", "state": "done"},
            {"type": "tool-chart", "toolCallId": "c1", "state": "output-available", "output": {"drawn": true}},
        ]}));
        assert_eq!(text_of(&message), "w1 w2 w3");
        let outputs: Vec<Option<String>> = tool_parts(&message).map(|p| p.output()).collect();
        assert_eq!(
            outputs,
            [Some(r#"{"drawn":true}"#.to_string())],
            "the regenerated call's output, not the void one's"
        );
    }

    #[test]
    fn the_tools_the_assistant_parts_name_are_read_once_each_in_order() {
        let messages = [
            message(json!({"role": "user", "parts": [{"type": "tool-not_from_a_user", "toolCallId": "u"}]})),
            message(json!({"id": "a1", "role": "assistant", "parts": [
                {"type": "tool-render_chart", "toolCallId": "c1", "state": "input-available", "input": {}},
                {"type": "dynamic-tool", "toolName": "pick_date", "toolCallId": "c2", "state": "output-available"},
                {"type": "tool-render_chart", "toolCallId": "c3", "state": "output-available", "output": 1},
                {"type": "text", "text": "tool-looking text"},
                {"type": "tool-no_call_id"},
            ]})),
        ];
        let conversation = UiConversation { id: "c", messages: &messages, message_id: None };
        assert_eq!(conversation.tool_names(), ["render_chart", "pick_date"]);
    }
}
