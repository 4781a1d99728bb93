//! History compaction: a summarising model call replaces the older part of
//! the conversation, keeping system messages and everything from the last
//! user message on (so tool calls stay paired with their results).

use tokio_util::sync::CancellationToken;

use super::model_call::{self, ModelCall, Output, StepError};
use crate::{
    config::ModelConfig,
    domain::{ChatMessage, Role},
    providers::ModelRequest,
};

const INSTRUCTION: &str = "Summarise the conversation above for your own later use: the user's goals, \
the facts established, tool results that matter, decisions taken and what is still open. \
Answer inside <analysis></analysis> tags.";

/// Asks the model for a summary of `messages` (no tools, nothing streamed to
/// clients; charged to the tenant's budget like any model call).
pub(super) async fn summarize(
    call: &ModelCall<'_>,
    model: &ModelConfig,
    messages: &[ChatMessage],
    cancelled: &CancellationToken,
) -> Result<String, StepError> {
    let mut request_messages = messages.to_vec();
    request_messages.push(ChatMessage::text(Role::User, INSTRUCTION));
    let request = ModelRequest::plain(model, request_messages);
    Ok(model_call::call(call, request, Output::Quiet, cancelled).await?.text)
}

/// The history after compaction.
pub(super) fn compacted(messages: &[ChatMessage], summary: &str) -> Vec<ChatMessage> {
    let tail_start = messages.iter().rposition(|m| m.role == Role::User).unwrap_or(messages.len());
    let mut out: Vec<ChatMessage> = messages[..tail_start].iter().filter(|m| m.role == Role::System).cloned().collect();
    out.push(ChatMessage::text(Role::User, format!("Summary of the earlier conversation:\n{summary}")));
    out.push(ChatMessage::text(Role::Assistant, "Understood; I will continue from that summary."));
    out.extend(messages[tail_start..].iter().cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ToolCall;

    #[test]
    fn compaction_keeps_system_messages_and_the_last_exchange() {
        let mut assistant = ChatMessage::text(Role::Assistant, "");
        assistant.tool_calls = vec![ToolCall { id: "c1".into(), name: "t".into(), arguments: "{}".into() }];
        let messages = vec![
            ChatMessage::text(Role::System, "sys"),
            ChatMessage::text(Role::User, "old question"),
            ChatMessage::text(Role::Assistant, "old answer"),
            ChatMessage::text(Role::User, "new question"),
            assistant,
            ChatMessage::tool_result("c1", "result"),
        ];
        let out = compacted(&messages, "S");
        let roles: Vec<Role> = out.iter().map(|m| m.role).collect();
        assert_eq!(roles, vec![Role::System, Role::User, Role::Assistant, Role::User, Role::Assistant, Role::Tool]);
        assert!(out[1].content.as_deref().unwrap().ends_with('S'));
        assert_eq!(out[3].content.as_deref(), Some("new question"));
    }
}
