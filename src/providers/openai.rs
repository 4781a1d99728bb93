//! OpenAI-compatible Chat Completions, streamed (`POST {base}/chat/completions`
//! with `stream: true`): OpenAI, vLLM, Ollama, llama.cpp, LiteLLM and most
//! other servers.
//!
//! This file owns the wire format only: the request body and the mapping of
//! `data:` chunks to [`ModelEvent`]s. Retries and timeouts are `retry.rs`'s,
//! reading SSE is `sse.rs`'s.
//!
//! Choices other than index 0 are ignored (we never ask for `n > 1`). Usage
//! and the finish reason are held back and emitted once, in that order, at
//! `[DONE]`. A body that ends cleanly without `[DONE]` after a finish reason
//! counts as complete (some servers omit it); without a finish reason it is a
//! lost connection.

use std::{
    borrow::Cow,
    collections::{BTreeMap, VecDeque},
};

use async_trait::async_trait;
use bytes::Bytes;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde::Deserialize;
use serde_json::Value;

use super::{
    ChatMessage, FinishReason, ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError, Role, Usage,
    retry::{self, Endpoint},
    sse::{Decoder, Event},
};
use crate::config::{ModelConfig, Secret};

pub struct OpenAiProvider {
    endpoint: Endpoint,
}

impl OpenAiProvider {
    pub fn new(model: &ModelConfig) -> Self {
        Self { endpoint: Endpoint::new(model, "/chat/completions") }
    }
}

#[async_trait]
impl ModelProvider for OpenAiProvider {
    fn name(&self) -> &'static str {
        "openai"
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ProviderError> {
        let (model, max_tokens) = self.endpoint.model_and_limit(&request);
        let body = Bytes::from(request_body(&request, model, max_tokens));
        let model = self.endpoint.served_model(request);
        // Marked sensitive, so it is never logged.
        let auth = |headers: &mut HeaderMap, key: Option<&Secret>| {
            if let Some(mut value) = key.and_then(|key| HeaderValue::try_from(format!("Bearer {}", key.expose())).ok())
            {
                value.set_sensitive(true);
                headers.insert(AUTHORIZATION, value);
            }
        };
        self.endpoint.stream(self.name(), &model, body, auth, ChunkDecoder::default).await
    }
}

/// OpenAI's `reasoning_effort` for a zot reasoning level (`off`: none sent).
fn reasoning_effort(level: &str) -> Option<&'static str> {
    match level {
        "minimum" | "minimal" => Some("minimal"),
        "low" => Some("low"),
        "medium" => Some("medium"),
        "high" | "xhigh" | "max" => Some("high"),
        _ => None,
    }
}

/// The request's JSON, written straight from the request's own fields (no
/// intermediate JSON value, so nothing of the history is copied).
fn request_body(request: &ModelRequest, model: &str, max_tokens: u32) -> Vec<u8> {
    let prefill = request.prefill.as_deref();
    let body = body::Body {
        model,
        messages: body::Messages { history: &request.messages, prefill },
        stream: true,
        stream_options: body::StreamOptions { include_usage: true },
        max_tokens,
        tools: request.tools.iter().map(body::Tool::from).collect(),
        response_format: request.response_format.as_ref(),
        reasoning_effort: request.reasoning.as_deref().and_then(reasoning_effort),
        // vLLM's (and others') way to continue an answer instead of starting one.
        continue_final_message: prefill.map(|_| true),
        add_generation_prompt: prefill.map(|_| false),
    };
    // Trimmed: the body is held for as long as the call streams, and the
    // buffer's doubling leaves up to half of it spare, memory per chat.
    let mut out = serde_json::to_vec(&body).expect("a request body always serializes");
    out.shrink_to_fit();
    out
}

/// Chat Completions' request body, borrowing from the [`ModelRequest`].
mod body {
    use serde::{Serialize, Serializer, ser::SerializeSeq};
    use serde_json::Value;

    use super::{ChatMessage, Role};
    use crate::providers::ToolSpec;

    #[derive(Serialize)]
    pub(super) struct Body<'a> {
        pub model: &'a str,
        pub messages: Messages<'a>,
        pub stream: bool,
        pub stream_options: StreamOptions,
        pub max_tokens: u32,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub tools: Vec<Tool<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub response_format: Option<&'a Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub reasoning_effort: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub continue_final_message: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub add_generation_prompt: Option<bool>,
    }

    #[derive(Serialize)]
    pub(super) struct StreamOptions {
        pub include_usage: bool,
    }

    #[derive(Serialize)]
    pub(super) struct Tool<'a> {
        r#type: &'static str,
        function: Function<'a>,
    }

    #[derive(Serialize)]
    struct Function<'a> {
        name: &'a str,
        description: &'a str,
        parameters: &'a Value,
    }

    impl<'a> From<&'a ToolSpec> for Tool<'a> {
        fn from(t: &'a ToolSpec) -> Self {
            Tool {
                r#type: "function",
                function: Function { name: &t.name, description: &t.description, parameters: &t.parameters },
            }
        }
    }

    /// The history, then the prefill as an assistant message to continue.
    pub(super) struct Messages<'a> {
        pub history: &'a [ChatMessage],
        pub prefill: Option<&'a str>,
    }

    impl Serialize for Messages<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut seq = serializer.serialize_seq(Some(self.history.len() + usize::from(self.prefill.is_some())))?;
            for m in self.history {
                seq.serialize_element(&Message(m))?;
            }
            if let Some(prefill) = self.prefill {
                seq.serialize_element(&Plain { role: "assistant", content: prefill })?;
            }
            seq.end()
        }
    }

    #[derive(Serialize)]
    struct Plain<'a> {
        role: &'static str,
        content: &'a str,
    }

    /// One message in OpenAI's shape.
    struct Message<'a>(&'a ChatMessage);

    impl Serialize for Message<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let m = self.0;
            let text = m.content.as_deref().unwrap_or_default();
            match m.role {
                Role::System => Plain { role: "system", content: text }.serialize(serializer),
                Role::User if m.images.is_empty() => Plain { role: "user", content: text }.serialize(serializer),
                Role::User => {
                    let text_part = (!text.is_empty()).then_some(Part::Text { text });
                    let images = m.images.iter().map(|image| Part::ImageUrl {
                        image_url: ImageUrl { url: &image.url, detail: image.detail.as_deref() },
                    });
                    let content: Vec<Part<'_>> = text_part.into_iter().chain(images).collect();
                    Parts { role: "user", content }.serialize(serializer)
                }
                Role::Assistant => Assistant {
                    role: "assistant",
                    content: (!text.is_empty() || m.tool_calls.is_empty()).then_some(text),
                    tool_calls: m
                        .tool_calls
                        .iter()
                        .map(|c| Call {
                            id: &c.id,
                            r#type: "function",
                            function: CallFunction { name: &c.name, arguments: &c.arguments },
                        })
                        .collect(),
                }
                .serialize(serializer),
                Role::Tool => ToolResult {
                    role: "tool",
                    tool_call_id: m.tool_call_id.as_deref().unwrap_or_default(),
                    content: text,
                }
                .serialize(serializer),
            }
        }
    }

    #[derive(Serialize)]
    struct Parts<'a> {
        role: &'static str,
        content: Vec<Part<'a>>,
    }

    #[derive(Serialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Part<'a> {
        Text { text: &'a str },
        ImageUrl { image_url: ImageUrl<'a> },
    }

    #[derive(Serialize)]
    struct ImageUrl<'a> {
        url: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<&'a str>,
    }

    /// `content` is `null` for a message that only calls tools.
    #[derive(Serialize)]
    struct Assistant<'a> {
        role: &'static str,
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<Call<'a>>,
    }

    #[derive(Serialize)]
    struct Call<'a> {
        id: &'a str,
        r#type: &'static str,
        function: CallFunction<'a>,
    }

    #[derive(Serialize)]
    struct CallFunction<'a> {
        name: &'a str,
        arguments: &'a str,
    }

    #[derive(Serialize)]
    struct ToolResult<'a> {
        role: &'static str,
        tool_call_id: &'a str,
        content: &'a str,
    }
}

/// A tool call being streamed: its start waits for both id and name.
#[derive(Default)]
struct PendingCall {
    id: Option<String>,
    name: Option<String>,
    started: bool,
    /// Argument fragments that arrived before the start could be emitted.
    buffered: String,
}

#[derive(Default)]
struct ChunkDecoder {
    calls: BTreeMap<u32, PendingCall>,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
}

impl Decoder for ChunkDecoder {
    fn on_event(&mut self, event: &Event, out: &mut VecDeque<ModelEvent>) -> Result<bool, ProviderError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.complete(out)?;
            return Ok(true);
        }
        // The usual chunk is read in place (its strings borrowed); one with
        // a field of an unusual type is read as a JSON value, leniently.
        let value;
        let chunk = match serde_json::from_str::<Chunk<'_>>(data) {
            Ok(chunk) => chunk,
            Err(_) => {
                value = serde_json::from_str::<Value>(data)
                    .map_err(|_| ProviderError::Protocol("a stream chunk is not JSON".into()))?;
                Chunk::from_value(&value)
            }
        };
        if let Some(error) = chunk.error.filter(|e| !e.is_null()) {
            let kind = error["type"].as_str().or_else(|| error["code"].as_str()).unwrap_or_default();
            let code = error["code"].as_u64().and_then(|c| u16::try_from(c).ok());
            let message = error["message"].as_str().or_else(|| error.as_str()).unwrap_or_default();
            return Err(retry::stream_error(kind, code, message));
        }
        if let Some(usage) = chunk.usage.filter(|u| u.is_object()) {
            self.usage = Some(Usage {
                input_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
                output_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
                cache_read_tokens: usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0),
                cache_write_tokens: 0,
            });
        }
        for choice in chunk.choices.into_iter().flatten().filter(|c| c.index.unwrap_or(0) == 0) {
            self.on_delta(choice.delta.unwrap_or_default(), out);
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(finish_reason(&reason));
            }
        }
        Ok(false)
    }

    fn on_eof(&mut self, out: &mut VecDeque<ModelEvent>) -> Result<(), ProviderError> {
        if self.finish.is_none() {
            return Err(ProviderError::Disconnected("stream ended before [DONE]".into()));
        }
        self.complete(out)
    }
}

/// A chunk as OpenAI-compatible servers send it, read in place: its
/// strings borrowed from the event's data, the fields the gateway does not
/// use (`id`, `object`, `model`, …) skipped, and read straight into the
/// shape the decoder walks (no second copy of the choices).
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
struct Delta<'a> {
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<CallDelta<'a>>>,
}

#[derive(Deserialize)]
struct CallDelta<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<Function<'a>>,
}

#[derive(Deserialize)]
struct Function<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

/// A string where one is expected, anything else as absent.
fn text(value: &Value) -> Option<Cow<'_, str>> {
    value.as_str().map(Cow::Borrowed)
}

/// The same shapes read from a JSON value, for a chunk with a field of an
/// unusual type: strings where strings are expected, anything else as
/// absent (an index that is not a number counts as 0).
impl<'a> Chunk<'a> {
    fn from_value(chunk: &'a Value) -> Self {
        let choices = chunk["choices"].as_array().map(Vec::as_slice).unwrap_or_default();
        Self {
            error: chunk.get("error").cloned(),
            usage: chunk.get("usage").cloned(),
            choices: Some(choices.iter().map(Choice::from_value).collect()),
        }
    }
}

impl<'a> Choice<'a> {
    fn from_value(choice: &'a Value) -> Self {
        let delta = &choice["delta"];
        let calls = delta["tool_calls"].as_array().map(Vec::as_slice).unwrap_or_default();
        Self {
            index: Some(choice["index"].as_u64().unwrap_or(0)),
            finish_reason: text(&choice["finish_reason"]),
            delta: Some(Delta {
                reasoning_content: text(&delta["reasoning_content"]),
                reasoning: text(&delta["reasoning"]),
                content: text(&delta["content"]),
                tool_calls: Some(calls.iter().map(CallDelta::from_value).collect()),
            }),
        }
    }
}

impl<'a> CallDelta<'a> {
    fn from_value(call: &'a Value) -> Self {
        let function = &call["function"];
        Self {
            index: call["index"].as_u64(),
            id: text(&call["id"]),
            function: Some(Function { name: text(&function["name"]), arguments: text(&function["arguments"]) }),
        }
    }
}

impl ChunkDecoder {
    fn on_delta(&mut self, delta: Delta<'_>, out: &mut VecDeque<ModelEvent>) {
        if let Some(text) = delta.reasoning_content.or(delta.reasoning).filter(|t| !t.is_empty()) {
            out.push_back(ModelEvent::ReasoningDelta(text.into_owned()));
        }
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            out.push_back(ModelEvent::TextDelta(text.into_owned()));
        }
        for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
            let index = call.index.and_then(|i| u32::try_from(i).ok()).unwrap_or(position as u32);
            let pending = self.calls.entry(index).or_default();
            let non_empty = |v: Option<Cow<'_, str>>| v.filter(|s| !s.is_empty()).map(Cow::into_owned);
            let (name, arguments) = call.function.map_or((None, None), |f| (f.name, f.arguments));
            pending.id = pending.id.take().or_else(|| non_empty(call.id));
            pending.name = pending.name.take().or_else(|| non_empty(name));
            if let (false, Some(id), Some(name)) = (pending.started, &pending.id, &pending.name) {
                let (id, name) = (id.clone(), name.clone());
                start(index, id, name, pending, out);
            }
            if let Some(fragment) = arguments.filter(|f| !f.is_empty()) {
                if pending.started {
                    out.push_back(ModelEvent::ToolCallDelta { index, fragment: fragment.into_owned() });
                } else {
                    pending.buffered.push_str(&fragment);
                }
            }
        }
    }

    /// The response is complete: open any call still waiting for its id (some
    /// servers never send one), then emit usage and the finish reason.
    fn complete(&mut self, out: &mut VecDeque<ModelEvent>) -> Result<(), ProviderError> {
        for (index, pending) in self.calls.iter_mut().filter(|(_, p)| !p.started) {
            let Some(name) = pending.name.clone() else {
                return Err(ProviderError::Protocol(format!("tool call {index} has no name")));
            };
            let id = pending.id.clone().unwrap_or_else(|| format!("call_{index}"));
            start(*index, id, name, pending, out);
        }
        if let Some(usage) = self.usage {
            out.push_back(ModelEvent::Usage(usage));
        }
        let inferred = if self.calls.is_empty() { FinishReason::Stop } else { FinishReason::ToolCalls };
        out.push_back(ModelEvent::Finish(self.finish.take().unwrap_or(inferred)));
        Ok(())
    }
}

/// Emits a call's start, then whatever arguments were waiting for it.
fn start(index: u32, id: String, name: String, pending: &mut PendingCall, out: &mut VecDeque<ModelEvent>) {
    pending.started = true;
    out.push_back(ModelEvent::ToolCallStart { index, id, name });
    if !pending.buffered.is_empty() {
        out.push_back(ModelEvent::ToolCallDelta { index, fragment: std::mem::take(&mut pending.buffered) });
    }
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "length" => FinishReason::Length,
        other => FinishReason::Other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::providers::{ImagePart, ToolCall, ToolSpec};

    fn decode(chunks: &[Value]) -> Vec<ModelEvent> {
        let mut decoder = ChunkDecoder::default();
        let mut out = VecDeque::new();
        for chunk in chunks {
            let event = Event { data: chunk.to_string(), ..Event::default() };
            assert!(!decoder.on_event(&event, &mut out).unwrap());
        }
        let done = Event { data: "[DONE]".into(), ..Event::default() };
        assert!(decoder.on_event(&done, &mut out).unwrap());
        out.into()
    }

    fn call(index: u32, id: Option<&str>, name: Option<&str>, args: &str) -> Value {
        let mut call = json!({"index": index, "function": {"arguments": args}});
        if let Some(id) = id {
            call["id"] = json!(id);
        }
        if let Some(name) = name {
            call["function"]["name"] = json!(name);
        }
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
    }

    #[test]
    fn a_chunk_with_fields_of_unusual_types_is_read_leniently() {
        // Read as a value (content parts, a null delta, an index as a string,
        // which counts as 0), as before there was a reading in place.
        let unusual = [
            json!({"choices": [{"index": 0, "delta": {"content": [{"type": "text"}], "reasoning": "r"}}]}),
            json!({"choices": [{"index": 0, "delta": null}, {"index": "1", "delta": {"content": "x"}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "Hi \"there\" é"}, "finish_reason": "stop"}]}),
        ];
        assert_eq!(
            decode(&unusual),
            vec![
                ModelEvent::ReasoningDelta("r".into()),
                ModelEvent::TextDelta("x".into()),
                ModelEvent::TextDelta("Hi \"there\" é".into()),
                ModelEvent::Finish(FinishReason::Stop),
            ]
        );
    }

    #[test]
    fn a_name_arriving_after_the_id_delays_the_start_and_keeps_early_fragments() {
        let events = decode(&[
            call(0, Some("call_1"), None, "{\"a\""),
            call(0, None, Some("lookup"), ":1"),
            call(0, None, None, "}"),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ]);
        assert_eq!(
            events,
            vec![
                ModelEvent::ToolCallStart { index: 0, id: "call_1".into(), name: "lookup".into() },
                ModelEvent::ToolCallDelta { index: 0, fragment: "{\"a\"".into() },
                ModelEvent::ToolCallDelta { index: 0, fragment: ":1".into() },
                ModelEvent::ToolCallDelta { index: 0, fragment: "}".into() },
                ModelEvent::Finish(FinishReason::ToolCalls),
            ]
        );
    }

    #[test]
    fn a_call_without_an_id_gets_one_at_the_end() {
        let events = decode(&[call(0, None, Some("lookup"), "{}")]);
        assert_eq!(events[0], ModelEvent::ToolCallStart { index: 0, id: "call_0".into(), name: "lookup".into() });
        assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::ToolCalls)));
    }

    #[test]
    fn reasoning_is_read_from_either_field_and_usage_comes_before_finish() {
        let events = decode(&[
            json!({"choices": [{"index": 0, "delta": {"reasoning": "hmm"}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "length"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2,
                "prompt_tokens_details": {"cached_tokens": 3}}}),
        ]);
        assert_eq!(
            events,
            vec![
                ModelEvent::ReasoningDelta("hmm".into()),
                ModelEvent::TextDelta("hi".into()),
                ModelEvent::Usage(Usage {
                    input_tokens: 5,
                    output_tokens: 2,
                    cache_read_tokens: 3,
                    cache_write_tokens: 0
                }),
                ModelEvent::Finish(FinishReason::Length),
            ]
        );
    }

    #[test]
    fn the_body_carries_tools_images_and_prior_tool_calls() {
        let mut user = ChatMessage::text(Role::User, "look");
        user.images = vec![ImagePart { url: "https://x/y.png".into(), detail: Some("low".into()), format: None }];
        let mut assistant = ChatMessage { content: None, ..ChatMessage::text(Role::Assistant, "") };
        assistant.tool_calls = vec![ToolCall { id: "c1".into(), name: "f".into(), arguments: "{}".into() }];
        let request = ModelRequest {
            model: "m".into(),
            messages: vec![user, assistant, ChatMessage::tool_result("c1", "ok")],
            tools: vec![ToolSpec { name: "f".into(), description: "d".into(), parameters: json!({}) }],
            max_output_tokens: 7,
            response_format: Some(json!({"type": "json_object"})),
            prefill: None,
            reasoning: None,
        };
        let body: Value = serde_json::from_slice(&request_body(&request, "m", 7)).unwrap();
        assert_eq!(
            body["messages"][0]["content"][1],
            json!({"type": "image_url",
            "image_url": {"url": "https://x/y.png", "detail": "low"}})
        );
        assert_eq!(body["messages"][1]["content"], Value::Null);
        assert_eq!(body["messages"][1]["tool_calls"][0]["function"]["name"], "f");
        assert_eq!(body["messages"][2], json!({"role": "tool", "tool_call_id": "c1", "content": "ok"}));
        assert_eq!(body["tools"][0]["type"], "function");
        assert_eq!(body["response_format"]["type"], "json_object");
        assert_eq!(body["max_tokens"], 7);
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        for absent in ["reasoning_effort", "continue_final_message", "add_generation_prompt"] {
            assert!(body.get(absent).is_none(), "{absent} sent unasked");
        }
    }

    #[test]
    fn the_body_continues_a_prefill_and_carries_the_reasoning_effort() {
        let request = ModelRequest {
            model: "m".into(),
            messages: vec![ChatMessage::text(Role::System, "s"), ChatMessage::text(Role::User, "hi")],
            tools: vec![],
            max_output_tokens: 7,
            response_format: None,
            prefill: Some("Half an ans".into()),
            reasoning: Some("xhigh".into()),
        };
        let body: Value = serde_json::from_slice(&request_body(&request, "served", 9)).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "served",
                "messages": [
                    {"role": "system", "content": "s"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "Half an ans"},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_tokens": 9,
                "reasoning_effort": "high",
                "continue_final_message": true,
                "add_generation_prompt": false,
            })
        );
    }
}
