//! AG-UI's reset after a takeover: the `MESSAGES_SNAPSHOT` of the stored
//! conversation as it stood when the step restarted, without the void
//! partial output (never committed, so never in the store).
//!
//! The store is read when the `step_restarted` event is, which for a replay
//! may be long after: the conversation then holds the regenerated step and
//! perhaps later turns. So the conversation is cut where the step began: a
//! turn's messages start with its user message (the only user message a
//! turn adds; a compaction keeps the current turn's and puts its summary,
//! also a user message, before it), and every finished model step of the
//! turn added one assistant message. Turn `t` of a session at turn `T`
//! starts at the `T - t + 1`-th user message from the end; step `s` begins
//! at the turn's `s`-th assistant message, or at the next turn, or at the
//! end.

use serde_json::{Map, Value, json};

use crate::domain::{ChatMessage, Role};

/// The messages before step `step` of the turn that began `turns_since`
/// turns before the stored session's last one; `None` when that turn's user
/// message is no longer stored (compacted away since).
pub fn before_step(history: &[ChatMessage], turns_since: u32, step: u32) -> Option<&[ChatMessage]> {
    let users: Vec<usize> =
        (history.iter().enumerate()).filter(|(_, m)| m.role == Role::User).map(|(i, _)| i).collect();
    let start = *users.iter().rev().nth(turns_since as usize)?;
    let mut assistants = 0;
    for (i, message) in history.iter().enumerate().skip(start + 1) {
        match message.role {
            Role::User => return Some(&history[..i]),
            Role::Assistant => {
                assistants += 1;
                if assistants == step {
                    return Some(&history[..i]);
                }
            }
            Role::System | Role::Tool => {}
        }
    }
    Some(history)
}

/// `messages` as AG-UI messages. Ids are `history-<index>`: stable, so a
/// second snapshot names the same message the same way (the client updates
/// it in place), and unlike any id the stream's events use, so nothing of
/// what the client built is mistaken for a snapshot message (the client
/// keeps messages whose ids a snapshot lists where they are and appends
/// the others: mixing both would reorder them).
pub fn render(messages: &[ChatMessage]) -> Vec<Value> {
    (messages.iter().enumerate())
        .map(|(i, m)| {
            let mut out = Map::new();
            out.insert("id".into(), json!(format!("history-{i}")));
            let text = m.content.clone().unwrap_or_default();
            match m.role {
                Role::System => {
                    out.insert("role".into(), json!("system"));
                    out.insert("content".into(), json!(text));
                }
                Role::User => {
                    out.insert("role".into(), json!("user"));
                    out.insert("content".into(), user_content(m));
                }
                Role::Assistant => {
                    out.insert("role".into(), json!("assistant"));
                    // `content` is optional, never null.
                    if let Some(content) = &m.content {
                        out.insert("content".into(), json!(content));
                    }
                    if !m.tool_calls.is_empty() {
                        let calls: Vec<Value> = (m.tool_calls.iter())
                            .map(|c| {
                                json!({"id": c.id, "type": "function",
                                       "function": {"name": c.name, "arguments": c.arguments}})
                            })
                            .collect();
                        out.insert("toolCalls".into(), Value::Array(calls));
                    }
                }
                Role::Tool => {
                    out.insert("role".into(), json!("tool"));
                    out.insert("content".into(), json!(text));
                    out.insert("toolCallId".into(), json!(m.tool_call_id.clone().unwrap_or_default()));
                }
            }
            Value::Object(out)
        })
        .collect()
}

/// A user message's text, or with images its text and image parts.
fn user_content(message: &ChatMessage) -> Value {
    if message.images.is_empty() {
        return json!(message.content.clone().unwrap_or_default());
    }
    let mut parts: Vec<Value> = message.content.iter().map(|text| json!({"type": "text", "text": text})).collect();
    parts.extend(
        message.images.iter().map(|image| json!({"type": "image", "source": {"type": "url", "value": image.url}})),
    );
    Value::Array(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ToolCall;

    fn text(role: Role, content: &str) -> ChatMessage {
        ChatMessage::text(role, content)
    }

    fn calling(id: &str) -> ChatMessage {
        ChatMessage {
            content: None,
            tool_calls: vec![ToolCall { id: id.into(), name: "lookup".into(), arguments: "{}".into() }],
            ..text(Role::Assistant, "")
        }
    }

    #[test]
    fn the_cut_is_where_the_step_of_its_turn_began() {
        let history = vec![
            text(Role::System, "seeded"),
            text(Role::User, "first"),
            text(Role::Assistant, "one"),
            text(Role::User, "second"),
            calling("c1"),
            ChatMessage::tool_result("c1", "found"),
            text(Role::Assistant, "two"),
            text(Role::User, "third"),
            text(Role::Assistant, "three"),
        ];
        assert_eq!(before_step(&history, 0, 1).unwrap().len(), 8, "the last turn's first step");
        assert_eq!(before_step(&history, 1, 2).unwrap().len(), 6, "after the tool round of turn 2");
        assert_eq!(before_step(&history, 1, 1).unwrap().len(), 4);
        assert_eq!(before_step(&history, 1, 3).unwrap().len(), 7, "a step turn 2 never finished: up to turn 3");
        assert_eq!(before_step(&history[..6], 0, 2).unwrap().len(), 6, "read before the step committed");
        assert_eq!(before_step(&history, 3, 1), None, "that turn is no longer stored");
    }

    #[test]
    fn messages_take_ag_ui_shapes_and_ids_of_their_own() {
        let messages = vec![
            text(Role::User, "look"),
            calling("c1"),
            ChatMessage::tool_result("c1", "found"),
            text(Role::Assistant, "Found."),
        ];
        assert_eq!(
            render(&messages),
            vec![
                json!({"id": "history-0", "role": "user", "content": "look"}),
                json!({"id": "history-1", "role": "assistant",
                       "toolCalls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]}),
                json!({"id": "history-2", "role": "tool", "content": "found", "toolCallId": "c1"}),
                json!({"id": "history-3", "role": "assistant", "content": "Found."}),
            ]
        );
    }
}
