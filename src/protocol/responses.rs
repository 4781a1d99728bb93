//! The OpenAI Responses API's stream (docs/protocols.md §9), as the
//! official SDKs parse it: one response is the part of a session's log
//! that one request started — a turn, or a paused turn's continuation —
//! from the event after its cursor to the `paused` or `turn_ended` that
//! ends it.
//!
//! Every frame is an SSE event named by its `type`, with a
//! `sequence_number` from 0, one per event of the response. The frames are
//! a function of the log alone (ids come from the session id and the
//! events' seqs, `created_at` from the first event's time), so a replay on
//! any replica is byte-identical to what was first sent, and a client that
//! resumes with `starting_after=N` gets the same events after `N`
//! ([`ResponsesEncoder::starting_after`]): the encoder runs over the whole
//! response and sends only those.
//!
//! Output items: the model's text is a `message` item (one `output_text`
//! part), its reasoning a `reasoning` item (one `reasoning_text` part); a
//! call of a client's function tool is a `function_call` item, shown at the
//! pause that ends the response (the client answers with
//! `function_call_output`); a server tool's call an `mcp_call` item, shown
//! with its result (its `server_label` the MCP server, `switchboard` for
//! the gateway's own tools). Which a call is, the log says only then, so a
//! replay on any replica classifies it the same. A permission ask an
//! `mcp_approval_request` item (its id the relay id) that ends the
//! response. A takeover's `step_restarted` ends the open item as it stands
//! and the regenerated step opens a new one: nothing sent is retracted.
//! Subagents' events are not shown.
//!
//! The response object carries what the log knows: `id`, `created_at`,
//! `status`, `model`, `output`, `usage`, `error`, `incomplete_details`;
//! and the request's parameters (`instructions`, `tools`, `metadata`,
//! `temperature`, …) as the request that made the response sent them
//! ([`ResponsesEncoder::echoing`]: kept beside the session, so every
//! replica echoes the same), their defaults where it sent none.

use serde_json::{Map, Value, json};

use super::{Encoder, EventKind, Frame, LogEvent, PendingCall, PendingRelay, TurnEndReason};
use crate::{
    config::mcp::server_of,
    domain::{FailureCode, Held, ToolStatus, Usage},
};

/// A response's id: `resp_<cursor>_<session>`, the cursor being the seq
/// after which its events start.
pub fn response_id(session_id: &str, cursor: u64) -> String {
    format!("resp_{cursor}_{session_id}")
}

/// The session id and cursor of a response id made by [`response_id`].
pub fn parse_response_id(id: &str) -> Option<(&str, u64)> {
    let (cursor, session) = id.strip_prefix("resp_")?.split_once('_')?;
    let cursor = cursor.parse().ok()?;
    (!session.is_empty()).then_some((session, cursor))
}

/// Where a response stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Queued,
    InProgress,
    Completed,
    Failed,
    Incomplete,
    Cancelled,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Incomplete => "incomplete",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn is_final(self) -> bool {
        !matches!(self, Self::Queued | Self::InProgress)
    }
}

/// One output item.
#[derive(Debug, Clone)]
struct Item {
    id: String,
    kind: ItemKind,
    done: bool,
}

#[derive(Debug, Clone)]
enum ItemKind {
    Message { text: String },
    Reasoning { text: String },
    FunctionCall { call_id: String, name: String, arguments: String },
    McpCall { server_label: String, name: String, arguments: String, output: Option<String>, error: Option<String> },
    ApprovalRequest { server_label: String, name: String, arguments: String },
}

pub struct ResponsesEncoder {
    response_id: String,
    session_id: String,
    model: String,
    /// Calls announced and not yet shown: a server tool's shows with its
    /// result, a client's with the pause (the log says which it is only
    /// then, so a replay shows the same).
    calls: Vec<(u64, String, String, Value)>,
    /// Frames up to this sequence number were sent before: made, not sent.
    starting_after: Option<u64>,
    next_sequence: u64,
    created_at: Option<u64>,
    status: Status,
    output: Vec<Item>,
    /// The open `message` or `reasoning` item, by index.
    open: Option<usize>,
    usage: Usage,
    error: Option<(String, String)>,
    finished: bool,
    /// Request parameters shown in the response object over its defaults.
    echo: Map<String, Value>,
}

impl ResponsesEncoder {
    pub fn new(session_id: &str, cursor: u64, model: &str) -> Self {
        Self {
            response_id: response_id(session_id, cursor),
            session_id: session_id.to_string(),
            model: model.to_string(),
            calls: Vec::new(),
            starting_after: None,
            next_sequence: 0,
            created_at: None,
            status: Status::Queued,
            output: Vec::new(),
            open: None,
            usage: Usage::default(),
            error: None,
            finished: false,
            echo: Map::new(),
        }
    }

    /// Shows the request's parameters `echo` (`instructions`, `tools`,
    /// `metadata`, …) in the response object in place of their defaults.
    pub fn echoing(mut self, echo: Map<String, Value>) -> Self {
        self.echo = echo;
        self
    }

    /// Sends only the events after sequence number `after`.
    pub fn starting_after(mut self, after: Option<u64>) -> Self {
        self.starting_after = after;
        self
    }

    pub fn status(&self) -> Status {
        self.status
    }

    /// The response as it stands (what `GET /v1/responses/{id}` answers).
    pub fn snapshot(&self) -> Value {
        let output: Vec<Value> = self.output.iter().map(Self::item_json).collect();
        let text: String = (self.output.iter())
            .filter_map(|item| match &item.kind {
                ItemKind::Message { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let error = self.error.as_ref().map(|(code, message)| json!({"code": code, "message": message}));
        let incomplete = match self.status {
            Status::Incomplete => json!({"reason": "max_output_tokens"}),
            _ => Value::Null,
        };
        let usage = self.status.is_final().then(|| {
            json!({
                "input_tokens": self.usage.input_tokens,
                "input_tokens_details": {
                    "cached_tokens": self.usage.cache_read_tokens,
                    "cache_write_tokens": self.usage.cache_write_tokens,
                },
                "output_tokens": self.usage.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": self.usage.input_tokens + self.usage.output_tokens,
            })
        });
        let mut response = json!({
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at.unwrap_or(0),
            "status": self.status.as_str(),
            "error": error,
            "incomplete_details": incomplete,
            "instructions": null,
            "max_output_tokens": null,
            "model": self.model,
            "output": output,
            "output_text": text,
            "parallel_tool_calls": true,
            "previous_response_id": null,
            "reasoning": {"effort": null, "summary": null},
            "store": true,
            "temperature": null,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": null,
            "truncation": "disabled",
            "usage": usage,
            "metadata": {},
            "background": false,
        });
        if let Some(fields) = response.as_object_mut() {
            fields.extend(self.echo.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        response
    }

    fn item_json(item: &Item) -> Value {
        let status = if item.done { "completed" } else { "in_progress" };
        match &item.kind {
            ItemKind::Message { text } => json!({
                "id": item.id, "type": "message", "status": status, "role": "assistant",
                "content": if item.done || !text.is_empty() {
                    vec![json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})]
                } else { Vec::new() },
            }),
            ItemKind::Reasoning { text } => json!({
                "id": item.id, "type": "reasoning", "status": status, "summary": [],
                "content": [{"type": "reasoning_text", "text": text}],
            }),
            ItemKind::FunctionCall { call_id, name, arguments } => json!({
                "id": item.id, "type": "function_call", "status": status,
                "call_id": call_id, "name": name, "arguments": arguments,
            }),
            ItemKind::McpCall { server_label, name, arguments, output, error } => {
                let status = match (item.done, error) {
                    (false, _) => "in_progress",
                    (true, None) => "completed",
                    (true, Some(_)) => "failed",
                };
                json!({
                    "id": item.id, "type": "mcp_call", "status": status, "server_label": server_label,
                    "name": name, "arguments": arguments, "output": output, "error": error,
                })
            }
            ItemKind::ApprovalRequest { server_label, name, arguments } => json!({
                "id": item.id, "type": "mcp_approval_request", "server_label": server_label,
                "name": name, "arguments": arguments,
            }),
        }
    }

    /// One event of the response, numbered; kept back when the client
    /// has it (at or before `starting_after`).
    fn push(&mut self, frames: &mut Vec<Frame>, kind: &'static str, fields: Map<String, Value>) {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        if self.starting_after.is_some_and(|after| sequence <= after) {
            return;
        }
        frames.push(numbered(kind, fields, sequence));
    }

    fn lifecycle(&mut self, frames: &mut Vec<Frame>, kind: &'static str) {
        let mut fields = Map::new();
        fields.insert("response".into(), self.snapshot());
        self.push(frames, kind, fields);
    }

    /// Opens the response at its first event.
    fn begin(&mut self, frames: &mut Vec<Frame>, event: &LogEvent) {
        if self.created_at.is_some() {
            return;
        }
        self.created_at = Some(event.event.ts / 1000);
        self.status = Status::InProgress;
        self.lifecycle(frames, "response.created");
        self.lifecycle(frames, "response.in_progress");
    }

    fn added(&mut self, frames: &mut Vec<Frame>, item: Item) -> usize {
        let index = self.output.len();
        self.output.push(item);
        let mut fields = Map::new();
        fields.insert("output_index".into(), index.into());
        fields.insert("item".into(), Self::item_json(&self.output[index]));
        self.push(frames, "response.output_item.added", fields);
        index
    }

    fn item_done(&mut self, frames: &mut Vec<Frame>, index: usize) {
        self.output[index].done = true;
        let mut fields = Map::new();
        fields.insert("output_index".into(), index.into());
        fields.insert("item".into(), Self::item_json(&self.output[index]));
        self.push(frames, "response.output_item.done", fields);
    }

    /// `item_id`, `output_index` and, for parts, `content_index`.
    fn at(&self, index: usize, part: bool) -> Map<String, Value> {
        let mut fields = Map::new();
        fields.insert("item_id".into(), self.output[index].id.clone().into());
        fields.insert("output_index".into(), index.into());
        if part {
            fields.insert("content_index".into(), 0.into());
        }
        fields
    }

    fn item_id(&self, prefix: &str, seq: u64) -> String {
        format!("{prefix}_{}_{seq}", self.session_id)
    }

    /// Text or reasoning: into the open item of its kind, or a new one.
    fn text(&mut self, frames: &mut Vec<Frame>, event: &LogEvent, delta: &str, reasoning: bool) {
        let open = self.open.filter(|&i| matches!(self.output[i].kind, ItemKind::Reasoning { .. }) == reasoning);
        let index = match open {
            Some(index) => index,
            None => {
                self.close_open(frames);
                let (id, kind) = if reasoning {
                    (self.item_id("rs", event.seq), ItemKind::Reasoning { text: String::new() })
                } else {
                    (self.item_id("msg", event.seq), ItemKind::Message { text: String::new() })
                };
                let index = self.added(frames, Item { id, kind, done: false });
                let mut fields = self.at(index, true);
                let part_type = if reasoning { "reasoning_text" } else { "output_text" };
                fields.insert("part".into(), part(part_type, ""));
                self.push(frames, "response.content_part.added", fields);
                self.open = Some(index);
                index
            }
        };
        if let ItemKind::Message { text } | ItemKind::Reasoning { text } = &mut self.output[index].kind {
            text.push_str(delta);
        }
        let mut fields = self.at(index, true);
        fields.insert("delta".into(), delta.into());
        if !reasoning {
            fields.insert("logprobs".into(), json!([]));
        }
        let kind = if reasoning { "response.reasoning_text.delta" } else { "response.output_text.delta" };
        self.push(frames, kind, fields);
    }

    /// Ends the open text or reasoning item with what it holds.
    fn close_open(&mut self, frames: &mut Vec<Frame>) {
        let Some(index) = self.open.take() else { return };
        let (text, reasoning) = match &self.output[index].kind {
            ItemKind::Message { text } => (text.clone(), false),
            ItemKind::Reasoning { text } => (text.clone(), true),
            _ => return,
        };
        let mut fields = self.at(index, true);
        fields.insert("text".into(), text.clone().into());
        let (done, part_type) = if reasoning {
            ("response.reasoning_text.done", "reasoning_text")
        } else {
            fields.insert("logprobs".into(), json!([]));
            ("response.output_text.done", "output_text")
        };
        self.push(frames, done, fields);
        let mut fields = self.at(index, true);
        fields.insert("part".into(), part(part_type, &text));
        self.push(frames, "response.content_part.done", fields);
        self.item_done(frames, index);
    }

    /// A server tool's call with its result: an `mcp_call` item, added
    /// and done (`server_label` its MCP server, `switchboard` for the
    /// gateway's own tools).
    fn mcp_call(&mut self, frames: &mut Vec<Frame>, call_id: &str, output: &Value, failed: bool) {
        let Some(at) = self.calls.iter().position(|(_, id, _, _)| id == call_id) else { return };
        let (seq, _, name, arguments) = self.calls.remove(at);
        self.close_open(frames);
        let arguments = arguments_text(&arguments);
        let text = super::tool_text(output);
        let kind = ItemKind::McpCall {
            server_label: server_of(&name).unwrap_or("switchboard").to_string(),
            name,
            arguments: arguments.clone(),
            output: None,
            error: None,
        };
        let index = self.added(frames, Item { id: self.item_id("mcp", seq), kind, done: false });
        let mut fields = self.at(index, false);
        fields.insert("delta".into(), arguments.clone().into());
        self.push(frames, "response.mcp_call_arguments.delta", fields);
        let mut fields = self.at(index, false);
        fields.insert("arguments".into(), arguments.into());
        self.push(frames, "response.mcp_call_arguments.done", fields);
        let fields = self.at(index, false);
        self.push(frames, "response.mcp_call.in_progress", fields);
        if let ItemKind::McpCall { output, error, .. } = &mut self.output[index].kind {
            if failed { *error = Some(text) } else { *output = Some(text) }
        }
        let fields = self.at(index, false);
        self.push(frames, if failed { "response.mcp_call.failed" } else { "response.mcp_call.completed" }, fields);
        self.item_done(frames, index);
    }

    fn function_call(&mut self, frames: &mut Vec<Frame>, seq: u64, call_id: &str, name: &str, arguments: String) {
        let kind =
            ItemKind::FunctionCall { call_id: call_id.to_string(), name: name.to_string(), arguments: String::new() };
        let index = self.added(frames, Item { id: self.item_id("fc", seq), kind, done: false });
        if let ItemKind::FunctionCall { arguments: args, .. } = &mut self.output[index].kind {
            args.clone_from(&arguments);
        }
        let mut fields = self.at(index, false);
        fields.insert("delta".into(), arguments.clone().into());
        self.push(frames, "response.function_call_arguments.delta", fields);
        let mut fields = self.at(index, false);
        fields.insert("name".into(), name.into());
        fields.insert("arguments".into(), arguments.into());
        self.push(frames, "response.function_call_arguments.done", fields);
        self.item_done(frames, index);
    }

    fn paused(&mut self, frames: &mut Vec<Frame>, seq: u64, relays: &[PendingRelay], calls: &[PendingCall]) {
        self.close_open(frames);
        for call in calls {
            let announced = self.calls.iter().position(|(_, id, _, _)| *id == call.tool_call_id);
            let seq = announced.map_or(seq, |at| self.calls.remove(at).0);
            self.function_call(frames, seq, &call.tool_call_id, &call.tool, arguments_text(&call.arguments));
        }
        for relay in relays {
            let server_label = server_of(&relay.tool).unwrap_or("switchboard").to_string();
            let kind = ItemKind::ApprovalRequest {
                server_label,
                name: relay.tool.clone(),
                arguments: arguments_text(&relay.params),
            };
            let index = self.added(frames, Item { id: relay.relay_id.clone(), kind, done: false });
            self.item_done(frames, index);
        }
        self.end(frames, Status::Completed);
    }

    fn end(&mut self, frames: &mut Vec<Frame>, status: Status) {
        self.close_open(frames);
        self.status = status;
        let kind = match status {
            Status::Completed => "response.completed",
            Status::Failed => "response.failed",
            _ => "response.incomplete",
        };
        self.lifecycle(frames, kind);
        self.finished = true;
    }
}

/// The SSE frame of event `kind`: `{type, …fields, sequence_number}`.
fn numbered(kind: &'static str, mut fields: Map<String, Value>, sequence: u64) -> Frame {
    let mut data = Map::with_capacity(fields.len() + 2);
    data.insert("type".into(), kind.into());
    data.append(&mut fields);
    data.insert("sequence_number".into(), sequence.into());
    Frame::event(kind, super::json_text(&Value::Object(data)), None)
}

fn part(kind: &str, text: &str) -> Value {
    if kind == "output_text" {
        json!({"type": kind, "text": text, "annotations": [], "logprobs": []})
    } else {
        json!({"type": kind, "text": text})
    }
}

/// A call's arguments as the JSON text OpenAI's items carry.
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(text) => text.clone(),
        Value::Null => "{}".to_string(),
        other => other.to_string(),
    }
}

impl Encoder for ResponsesEncoder {
    fn dialect(&self) -> &'static str {
        "openai-responses"
    }

    fn encode(&mut self, event: &LogEvent) -> Vec<Frame> {
        let mut frames = Vec::new();
        if self.finished || event.event.agent.parent_id.is_some() {
            return frames;
        }
        self.begin(&mut frames, event);
        match &event.event.kind {
            EventKind::TextDelta { text } => self.text(&mut frames, event, text, false),
            EventKind::ReasoningDelta { text } => self.text(&mut frames, event, text, true),
            EventKind::ToolCall { tool_call_id, name, arguments }
                if !self.calls.iter().any(|(_, id, _, _)| id == tool_call_id) =>
            {
                self.calls.push((event.seq, tool_call_id.clone(), name.clone(), arguments.clone()));
            }
            EventKind::ToolResult { tool_call_id, status, output, .. } => {
                let failed = !matches!(status, ToolStatus::Success);
                self.mcp_call(&mut frames, tool_call_id, output, failed)
            }
            EventKind::StepRestarted { .. } => self.close_open(&mut frames),
            EventKind::Usage { usage, .. } => self.usage.add(usage),
            EventKind::Error { code, message, .. } => {
                self.error = Some((failure_code(*code), message.clone()));
            }
            EventKind::Paused { pending_relays, pending_calls } => {
                self.paused(&mut frames, event.seq, pending_relays, pending_calls)
            }
            EventKind::TurnEnded { reason, .. } => {
                let status = match reason {
                    TurnEndReason::Final => Status::Completed,
                    TurnEndReason::MaxIterations => Status::Incomplete,
                    TurnEndReason::Failed => {
                        if self.error.is_none() {
                            self.error = Some(("server_error".into(), "the turn failed".into()));
                        }
                        Status::Failed
                    }
                    TurnEndReason::Cancelled => Status::Cancelled,
                };
                self.end(&mut frames, status);
            }
            _ => {}
        }
        frames
    }

    fn finished(&self) -> bool {
        self.finished
    }

    fn failure(&mut self, code: &str, message: &str) -> Vec<Frame> {
        let mut fields = Map::new();
        fields.insert("code".into(), code.into());
        fields.insert("message".into(), message.into());
        fields.insert("param".into(), Value::Null);
        // Not counted among the response's events: it is no part of the
        // response, and a resume must not skip one of them for it.
        vec![numbered("error", fields, self.next_sequence)]
    }

    fn held(&mut self, _held: &Held) -> Vec<Frame> {
        // The SDKs know no such event; SSE comments keep the line open.
        Vec::new()
    }
}

fn failure_code(code: FailureCode) -> String {
    serde_json::to_value(code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "server_error".into())
}

#[cfg(test)]
mod tests;
