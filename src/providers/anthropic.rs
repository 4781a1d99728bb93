//! Anthropic Messages, streamed (`POST {base}/messages` with `stream: true`).
//!
//! This file owns the wire format only: translating the canonical (OpenAI
//! shaped) conversation into Messages, and the named SSE events back into
//! [`ModelEvent`]s. Retries and timeouts are `retry.rs`'s, reading SSE is
//! `sse.rs`'s.
//!
//! Translation choices:
//! - system messages are joined (blank line between) into `system`;
//! - tool results become `tool_result` blocks of a user message, consecutive
//!   results sharing one message; an assistant message with neither text nor
//!   tool calls is dropped (the API rejects empty content);
//! - images go before the text of their message (Anthropic's advice); `data:`
//!   URIs become base64 sources;
//! - `response_format` has no Messages equivalent and is ignored;
//! - reasoning from earlier turns is not sent back (the canonical shape keeps
//!   no thinking signatures).
//!
//! Usage is emitted once, at `message_stop`, before the finish reason. Its
//! `input_tokens` counts cache reads and writes too, as OpenAI's
//! `prompt_tokens` does, so the two providers report alike.

use std::collections::{HashMap, VecDeque};

use async_trait::async_trait;
use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

use super::{
    ChatMessage, FinishReason, ImagePart, ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError, Role,
    Usage,
    retry::{self, Endpoint},
    sse::{Decoder, Event},
};
use crate::config::{ModelConfig, Secret};

const API_VERSION: &str = "2023-06-01";

pub struct AnthropicProvider {
    endpoint: Endpoint,
}

impl AnthropicProvider {
    pub fn new(model: &ModelConfig) -> Self {
        Self { endpoint: Endpoint::new(model, "/messages") }
    }
}

#[async_trait]
impl ModelProvider for AnthropicProvider {
    fn name(&self) -> &'static str {
        "anthropic"
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ProviderError> {
        let (model, max_tokens) = self.endpoint.model_and_limit(&request);
        let body = Bytes::from(request_body(&request, model, max_tokens).to_string());
        let model = self.endpoint.served_model(request);
        let auth = |headers: &mut HeaderMap, key: Option<&Secret>| {
            headers.insert("anthropic-version", HeaderValue::from_static(API_VERSION));
            if let Some(mut key) = key.and_then(|key| HeaderValue::from_str(key.expose()).ok()) {
                key.set_sensitive(true);
                headers.insert("x-api-key", key);
            }
        };
        self.endpoint.stream(self.name(), &model, body, auth, EventDecoder::default).await
    }
}

fn request_body(request: &ModelRequest, model: &str, max_tokens: u32) -> Value {
    let mut body = json!({
        "model": model,
        "max_tokens": max_tokens,
        "stream": true,
        "messages": messages(&request.messages),
    });
    let system: Vec<&str> = request
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .filter_map(|m| m.content.as_deref())
        .filter(|text| !text.is_empty())
        .collect();
    if !system.is_empty() {
        body["system"] = json!(system.join("\n\n"));
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        body["tools"] = Value::Array(tools);
    }
    // A prefill: the model continues the last assistant message. The API
    // refuses one that ends in whitespace.
    if let Some(prefill) = request.prefill.as_deref().map(str::trim_end).filter(|p| !p.is_empty())
        && let Some(messages) = body["messages"].as_array_mut()
    {
        messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": prefill}]}));
    }
    body
}

fn messages(list: &[ChatMessage]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    // Whether the last message pushed holds tool results (and may take more).
    let mut open_results = false;
    for m in list {
        let text = m.content.as_deref().unwrap_or_default();
        match m.role {
            Role::System => {}
            Role::User => {
                out.push(json!({"role": "user", "content": user_content(text, &m.images)}));
                open_results = false;
            }
            Role::Assistant => {
                let blocks = assistant_blocks(m);
                if !blocks.is_empty() {
                    out.push(json!({"role": "assistant", "content": blocks}));
                    open_results = false;
                }
            }
            Role::Tool => {
                let id = m.tool_call_id.as_deref().unwrap_or_default();
                let block = json!({"type": "tool_result", "tool_use_id": id, "content": text});
                match out.last_mut().and_then(|last| last["content"].as_array_mut()) {
                    Some(blocks) if open_results => blocks.push(block),
                    _ => out.push(json!({"role": "user", "content": [block]})),
                }
                open_results = true;
            }
        }
    }
    out
}

fn user_content(text: &str, images: &[ImagePart]) -> Value {
    if images.is_empty() {
        return json!(text);
    }
    let text_block = (!text.is_empty()).then(|| json!({"type": "text", "text": text}));
    let blocks: Vec<Value> = images.iter().map(image_block).chain(text_block).collect();
    Value::Array(blocks)
}

fn image_block(image: &ImagePart) -> Value {
    let source = image
        .url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(','))
        .and_then(|(header, data)| Some((header.strip_suffix(";base64")?, data)))
        .map(|(media_type, data)| {
            let media_type = match (media_type, &image.format) {
                ("", Some(format)) => format!("image/{format}"),
                (media_type, _) => media_type.to_string(),
            };
            json!({"type": "base64", "media_type": media_type, "data": data})
        })
        .unwrap_or_else(|| json!({"type": "url", "url": image.url}));
    json!({"type": "image", "source": source})
}

fn assistant_blocks(m: &ChatMessage) -> Vec<Value> {
    let text = m.content.as_deref().filter(|t| !t.is_empty()).map(|t| json!({"type": "text", "text": t}));
    let calls = m.tool_calls.iter().map(|call| {
        // The API wants an object; arguments the model garbled become `{}`.
        let input = serde_json::from_str::<Value>(&call.arguments).ok().filter(Value::is_object).unwrap_or(json!({}));
        json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input})
    });
    text.into_iter().chain(calls).collect()
}

/// Token counts as the API reports them, cumulative: later values replace.
#[derive(Default)]
struct RawUsage {
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
}

#[derive(Default)]
struct EventDecoder {
    usage: RawUsage,
    stop: Option<FinishReason>,
    /// Content block index → tool call index (tool_use blocks counted from 0).
    tool_blocks: HashMap<u64, u32>,
}

impl Decoder for EventDecoder {
    fn on_event(&mut self, event: &Event, out: &mut VecDeque<ModelEvent>) -> Result<bool, ProviderError> {
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|_| ProviderError::Protocol("a stream event is not JSON".into()))?;
        let kind = data["type"].as_str().unwrap_or(event.event.as_str());
        match kind {
            "message_start" => self.read_usage(&data["message"]["usage"]),
            "content_block_start" => self.on_block_start(&data, out)?,
            "content_block_delta" => self.on_block_delta(&data, out)?,
            "message_delta" => {
                if let Some(reason) = data["delta"]["stop_reason"].as_str() {
                    self.stop = Some(stop_reason(reason));
                }
                self.read_usage(&data["usage"]);
            }
            "message_stop" => {
                let u = &self.usage;
                out.push_back(ModelEvent::Usage(Usage {
                    input_tokens: u.input + u.cache_read + u.cache_write,
                    output_tokens: u.output,
                    cache_read_tokens: u.cache_read,
                    cache_write_tokens: u.cache_write,
                }));
                let inferred = if self.tool_blocks.is_empty() { FinishReason::Stop } else { FinishReason::ToolCalls };
                out.push_back(ModelEvent::Finish(self.stop.take().unwrap_or(inferred)));
                return Ok(true);
            }
            "error" => {
                let error = &data["error"];
                let kind = error["type"].as_str().unwrap_or_default();
                return Err(retry::stream_error(kind, None, error["message"].as_str().unwrap_or_default()));
            }
            // `ping`, `content_block_stop`, and events newer than this code.
            _ => {}
        }
        Ok(false)
    }
}

impl EventDecoder {
    fn read_usage(&mut self, usage: &Value) {
        let read = |field: &str, into: &mut u64| {
            if let Some(n) = usage[field].as_u64() {
                *into = n;
            }
        };
        read("input_tokens", &mut self.usage.input);
        read("output_tokens", &mut self.usage.output);
        read("cache_read_input_tokens", &mut self.usage.cache_read);
        read("cache_creation_input_tokens", &mut self.usage.cache_write);
    }

    fn on_block_start(&mut self, data: &Value, out: &mut VecDeque<ModelEvent>) -> Result<(), ProviderError> {
        let block = &data["content_block"];
        let non_empty = |field: &str| block[field].as_str().filter(|t| !t.is_empty()).map(str::to_string);
        match block["type"].as_str() {
            Some("text") => out.extend(non_empty("text").map(ModelEvent::TextDelta)),
            Some("thinking") => out.extend(non_empty("thinking").map(ModelEvent::ReasoningDelta)),
            Some("tool_use") => {
                let (Some(id), Some(name), Some(block_index)) =
                    (non_empty("id"), non_empty("name"), data["index"].as_u64())
                else {
                    return Err(ProviderError::Protocol("a tool_use block lacks its id, name or index".into()));
                };
                let index = self.tool_blocks.len() as u32;
                self.tool_blocks.insert(block_index, index);
                out.push_back(ModelEvent::ToolCallStart { index, id, name });
            }
            // redacted_thinking, server tools and other blocks carry nothing we relay.
            _ => {}
        }
        Ok(())
    }

    fn on_block_delta(&mut self, data: &Value, out: &mut VecDeque<ModelEvent>) -> Result<(), ProviderError> {
        let delta = &data["delta"];
        let non_empty = |field: &str| delta[field].as_str().filter(|t| !t.is_empty()).map(str::to_string);
        match delta["type"].as_str() {
            Some("text_delta") => out.extend(non_empty("text").map(ModelEvent::TextDelta)),
            Some("thinking_delta") => out.extend(non_empty("thinking").map(ModelEvent::ReasoningDelta)),
            Some("input_json_delta") => {
                let Some(fragment) = non_empty("partial_json") else { return Ok(()) };
                let block = data["index"].as_u64().and_then(|i| self.tool_blocks.get(&i));
                let Some(&index) = block else {
                    return Err(ProviderError::Protocol("arguments for a block that is not a tool call".into()));
                };
                out.push_back(ModelEvent::ToolCallDelta { index, fragment });
            }
            // signature_delta, citations_delta: nothing to relay.
            _ => {}
        }
        Ok(())
    }
}

fn stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" => FinishReason::Length,
        other => FinishReason::Other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ToolCall;

    #[test]
    fn tool_results_in_a_row_share_one_user_message() {
        let mut assistant = ChatMessage::text(Role::Assistant, "checking");
        assistant.tool_calls = vec![
            ToolCall { id: "a".into(), name: "f".into(), arguments: r#"{"x":1}"#.into() },
            ToolCall { id: "b".into(), name: "f".into(), arguments: "not json".into() },
        ];
        let list = vec![
            ChatMessage::text(Role::System, "be brief"),
            ChatMessage::text(Role::User, "go"),
            assistant,
            ChatMessage::tool_result("a", "one"),
            ChatMessage::tool_result("b", "two"),
        ];
        let out = messages(&list);
        assert_eq!(out.len(), 3);
        assert_eq!(out[1]["content"][1]["input"], json!({"x": 1}));
        assert_eq!(out[1]["content"][2]["input"], json!({}));
        assert_eq!(
            out[2],
            json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "one"},
            {"type": "tool_result", "tool_use_id": "b", "content": "two"}]})
        );
    }

    #[test]
    fn a_data_uri_becomes_a_base64_source() {
        let image = ImagePart { url: "data:image/png;base64,AAAA".into(), detail: None, format: None };
        assert_eq!(image_block(&image)["source"], json!({"type": "base64", "media_type": "image/png", "data": "AAAA"}));
        let image = ImagePart { url: "https://x/y.png".into(), detail: None, format: None };
        assert_eq!(image_block(&image)["source"], json!({"type": "url", "url": "https://x/y.png"}));
    }

    #[test]
    fn cache_tokens_count_as_input_and_are_reported_apart() {
        let mut decoder = EventDecoder::default();
        let mut out = VecDeque::new();
        let events = [
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 4,
                "cache_read_input_tokens": 10, "cache_creation_input_tokens": 2, "output_tokens": 1}}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 9}}),
            json!({"type": "message_stop"}),
        ];
        for data in events {
            decoder.on_event(&Event { data: data.to_string(), ..Event::default() }, &mut out).unwrap();
        }
        assert_eq!(
            Vec::from(out),
            vec![
                ModelEvent::Usage(Usage {
                    input_tokens: 16,
                    output_tokens: 9,
                    cache_read_tokens: 10,
                    cache_write_tokens: 2
                }),
                ModelEvent::Finish(FinishReason::Length),
            ]
        );
    }
}
