//! The `demo` model: deterministic, offline, behind the same trait as the real
//! providers, so a newcomer sees streaming, tool calls, a permission relay and
//! a resume without an API key.
//!
//! What it answers:
//! - a user message containing `use <tool> with {json}` (one or more, for
//!   tools offered in the request) → those tool calls, arguments streamed in
//!   fragments, finish reason `tool_calls`;
//! - after tool results → a sentence quoting each result;
//! - a title request (`domain::title::request`) → the first words of the
//!   quoted user message, capitalised (`Hello There`), so a demo session's
//!   title is deterministic;
//! - anything else → an echo with a hint, a word at a time.

use std::time::Duration;

use async_trait::async_trait;
use futures::{StreamExt, stream};

use super::{
    ChatMessage, FinishReason, ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError, Role, Usage,
};
use crate::domain::title;

/// Gap between streamed words, so a terminal shows the stream happening.
const DEFAULT_WORD_DELAY: Duration = Duration::from_millis(15);
/// How many pieces a tool call's arguments are streamed in.
const ARGUMENT_FRAGMENTS: usize = 3;

pub struct DemoProvider {
    word_delay: Duration,
}

impl Default for DemoProvider {
    fn default() -> Self {
        Self { word_delay: DEFAULT_WORD_DELAY }
    }
}

impl DemoProvider {
    pub fn with_word_delay(word_delay: Duration) -> Self {
        Self { word_delay }
    }
}

#[async_trait]
impl ModelProvider for DemoProvider {
    fn name(&self) -> &'static str {
        "demo"
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ProviderError> {
        let events = respond(&request);
        let delay = self.word_delay;
        let paced = stream::iter(events).then(move |event| async move {
            if matches!(event, ModelEvent::TextDelta(_)) && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Ok(event)
        });
        Ok(Box::pin(paced))
    }
}

/// The whole scripted answer to `request`, as events.
fn respond(request: &ModelRequest) -> Vec<ModelEvent> {
    let mut events = Vec::new();
    let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    let finish = match request.messages.last() {
        _ if title::is_request(&request.messages) => {
            push_words(&mut events, &demo_title(title::quoted_user(&request.messages).unwrap_or_default()));
            FinishReason::Stop
        }
        Some(last) if last.role == Role::Tool => {
            let text = describe_results(&request.messages);
            push_words(&mut events, &text);
            FinishReason::Stop
        }
        Some(last) if last.role == Role::User => {
            let text = last.content.as_deref().unwrap_or_default();
            let calls = requested_calls(text, &offered);
            if calls.is_empty() {
                let hint = match offered.first() {
                    Some(tool) => {
                        format!(" Ask me to use {tool} with {{\"id\":\"42\"}} to see a tool call.")
                    }
                    None => String::new(),
                };
                push_words(&mut events, &format!("Demo model here. You said: {text}.{hint}"));
                FinishReason::Stop
            } else {
                let first_id = prior_tool_calls(&request.messages) + 1;
                for (i, (name, args)) in calls.into_iter().enumerate() {
                    let index = i as u32;
                    let id = format!("call_demo_{}", first_id + i);
                    events.push(ModelEvent::ToolCallStart { index, id, name: name.to_string() });
                    for fragment in fragments(&args, ARGUMENT_FRAGMENTS) {
                        events.push(ModelEvent::ToolCallDelta { index, fragment });
                    }
                }
                FinishReason::ToolCalls
            }
        }
        _ => {
            push_words(&mut events, "Demo model here. Send me a user message.");
            FinishReason::Stop
        }
    };
    let output_tokens = events.len() as u64;
    events.push(ModelEvent::Usage(Usage {
        input_tokens: estimate_tokens(&request.messages),
        output_tokens,
        ..Usage::default()
    }));
    events.push(ModelEvent::Finish(finish));
    events
}

/// The demo's title for a conversation that began with `user`: its first
/// words, each capitalised.
fn demo_title(user: &str) -> String {
    let words = title::words(user);
    let capitalised: Vec<String> = words
        .split(' ')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_default()
        })
        .collect();
    let text = capitalised.join(" ");
    if text.is_empty() { title::UNTITLED.to_string() } else { text }
}

fn push_words(events: &mut Vec<ModelEvent>, text: &str) {
    let words: Vec<&str> = text.split(' ').collect();
    let last = words.len().saturating_sub(1);
    for (i, word) in words.into_iter().enumerate() {
        let delta = if i == last { word.to_string() } else { format!("{word} ") };
        events.push(ModelEvent::TextDelta(delta));
    }
}

/// Finds `use <tool> with {json}` (or `use <tool>` alone) for offered tools.
fn requested_calls<'a>(text: &str, offered: &[&'a str]) -> Vec<(&'a str, String)> {
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(pos) = rest.find("use ") {
        rest = &rest[pos + 4..];
        let name_len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-')).unwrap_or(rest.len());
        let Some(tool) = offered.iter().find(|t| **t == &rest[..name_len]) else {
            continue;
        };
        rest = &rest[name_len..];
        let args = rest
            .strip_prefix(" with ")
            .and_then(json_object_prefix)
            .map(|(json, after)| {
                rest = after;
                json
            })
            .unwrap_or_else(|| "{}".to_string());
        calls.push((*tool, args));
    }
    calls
}

/// A leading balanced JSON object of `text`, compacted, and what follows it.
fn json_object_prefix(text: &str) -> Option<(String, &str)> {
    if !text.starts_with('{') {
        return None;
    }
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '{' if !in_string => depth += 1,
            '}' if !in_string => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    let value: serde_json::Value = serde_json::from_str(&text[..=i]).ok()?;
                    return Some((value.to_string(), &text[i + 1..]));
                }
            }
            _ => {}
        }
    }
    None
}

fn fragments(text: &str, pieces: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(pieces).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

fn prior_tool_calls(messages: &[ChatMessage]) -> usize {
    messages.iter().map(|m| m.tool_calls.len()).sum()
}

/// "The tool answered: …" for the tool results after the last assistant turn.
fn describe_results(messages: &[ChatMessage]) -> String {
    let results: Vec<&ChatMessage> =
        messages.iter().rev().take_while(|m| m.role == Role::Tool).collect::<Vec<_>>().into_iter().rev().collect();
    let parts: Vec<String> = results
        .iter()
        .map(|m| {
            let name = tool_name_of(messages, m.tool_call_id.as_deref().unwrap_or_default()).unwrap_or("the tool");
            let text: String = m.content.as_deref().unwrap_or_default().chars().take(200).collect();
            format!("{name} answered: {text}")
        })
        .collect();
    format!("Done. {}", parts.join("; "))
}

fn tool_name_of<'a>(messages: &'a [ChatMessage], call_id: &str) -> Option<&'a str> {
    messages.iter().flat_map(|m| &m.tool_calls).find(|c| c.id == call_id).map(|c| c.name.as_str())
}

/// About four characters per token: good enough for a demo's usage numbers.
fn estimate_tokens(messages: &[ChatMessage]) -> u64 {
    let chars: usize = messages.iter().map(|m| m.content.as_deref().map_or(0, str::len)).sum();
    (chars as u64).div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{ToolCall, ToolSpec};

    fn request(messages: Vec<ChatMessage>) -> ModelRequest {
        ModelRequest {
            model: "demo".into(),
            messages,
            tools: vec![ToolSpec {
                name: "lookup_order".into(),
                description: String::new(),
                parameters: serde_json::json!({}),
            }],
            max_output_tokens: 100,
            response_format: None,
            prefill: None,
            reasoning: None,
        }
    }

    async fn collect(request: ModelRequest) -> Vec<ModelEvent> {
        let provider = DemoProvider::with_word_delay(Duration::ZERO);
        let stream = provider.stream(request).await.unwrap();
        stream.map(Result::unwrap).collect().await
    }

    fn text_of(events: &[ModelEvent]) -> String {
        events.iter().filter_map(|e| if let ModelEvent::TextDelta(t) = e { Some(t.as_str()) } else { None }).collect()
    }

    #[tokio::test]
    async fn a_plain_message_is_echoed_a_word_at_a_time() {
        let events = collect(request(vec![ChatMessage::text(Role::User, "hello there")])).await;
        let deltas = events.iter().filter(|e| matches!(e, ModelEvent::TextDelta(_))).count();
        assert!(deltas > 3, "one delta per word");
        assert!(text_of(&events).contains("You said: hello there."));
        assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::Stop)));
    }

    #[tokio::test]
    async fn asking_for_an_offered_tool_yields_a_streamed_tool_call() {
        let events =
            collect(request(vec![ChatMessage::text(Role::User, r#"please use lookup_order with {"id": "42"} now"#)]))
                .await;
        assert_eq!(
            events[0],
            ModelEvent::ToolCallStart { index: 0, id: "call_demo_1".into(), name: "lookup_order".into() }
        );
        let args: String =
            events
                .iter()
                .filter_map(|e| {
                    if let ModelEvent::ToolCallDelta { fragment, .. } = e { Some(fragment.as_str()) } else { None }
                })
                .collect();
        assert_eq!(args, r#"{"id":"42"}"#);
        assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::ToolCalls)));
    }

    #[tokio::test]
    async fn a_title_request_gets_the_first_words_of_the_conversation_capitalised() {
        let history =
            [ChatMessage::text(Role::User, "where is my order 42"), ChatMessage::text(Role::Assistant, "Demo here.")];
        let events = collect(ModelRequest { tools: vec![], ..request(title::request(&history)) }).await;
        assert_eq!(text_of(&events), "Where Is My Order 42");
        assert_eq!(title::normalize(&text_of(&events)).as_deref(), Some("Where Is My Order 42"));
        assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::Stop)));
    }

    #[tokio::test]
    async fn a_tool_that_is_not_offered_is_not_called() {
        let events = collect(request(vec![ChatMessage::text(Role::User, "use rm_rf with {}")])).await;
        assert!(!events.iter().any(|e| matches!(e, ModelEvent::ToolCallStart { .. })));
    }

    #[tokio::test]
    async fn tool_results_are_quoted_back() {
        let mut assistant = ChatMessage::text(Role::Assistant, "");
        assistant.tool_calls =
            vec![ToolCall { id: "call_demo_1".into(), name: "lookup_order".into(), arguments: "{}".into() }];
        let events = collect(request(vec![
            ChatMessage::text(Role::User, "use lookup_order"),
            assistant,
            ChatMessage::tool_result("call_demo_1", "shipped"),
        ]))
        .await;
        assert_eq!(text_of(&events), "Done. lookup_order answered: shipped");
    }
}
