//! The Vercel AI SDK UI message stream, protocol v1 (docs/protocols.md §5), as
//! the npm `ai` package's `DefaultChatTransport` and `useChat` read it, in
//! ai@6 and ai@7: `data: <chunk>` frames (with our `id: <seq>`), closed by
//! `data: [DONE]`, with the `x-vercel-ai-ui-message-stream: v1` header
//! (ai@7 keeps `v1`). Both read the same chunks; ai@7 adds some, of which
//! this encoder uses one, `reset-step`, for a step a takeover cut short
//! ([`AiSdkVersion`]). A request does not say which version sent it: ai@7
//! apps say so with `X-AI-SDK-Version: 7` ([`VERSION_HEADER`]); without it
//! a stream is what ai@6 reads (which ai@7 reads too).
//!
//! | canonical event | chunks |
//! |---|---|
//! | the stream's first event | `start {messageId}` |
//! | first output of a model call | `start-step` (after `finish-step` for the call before) |
//! | `text_delta` / `reasoning_delta` | `text-start {id}` once, `text-delta {id, delta}` (`reasoning-*` likewise) |
//! | `tool_call_started` / `tool_call_args` | `tool-input-start {toolCallId, toolName}` / `tool-input-delta {toolCallId, inputTextDelta}` |
//! | `usage` (the end of a model call) | `text-end` / `reasoning-end` for open parts; `tool-input-available {toolCallId, toolName, input}` per call |
//! | `relay_requested`; a `paused` turn's pending approvals | `tool-approval-request {approvalId: relay id, toolCallId}` |
//! | `tool_result` | `tool-output-available {toolCallId, output}`; `tool-output-error {errorText}`; `tool-output-denied` for a call that was asked about (a policy denial is a `tool-output-error` with the reason) |
//! | `paused` | `finish-step`, `finish {finishReason: "tool-calls"}`: the client answers with its tool outputs and approval responses |
//! | `error` | `error {errorText}` |
//! | `turn_ended` | `finish-step`, `finish {finishReason: stop, length (iteration limit) or error, messageMetadata: {usage}}`; `abort` when cancelled |
//! | `step_restarted` (takeover), ai@6 | `text-end` / `reasoning-end` for open parts, `tool-input-error` for the cut step's calls, `data-step-restarted {id, data: {step}}`, `finish-step`: the parts of that step are void |
//! | `step_restarted` (takeover), ai@7 | `reset-step`: the client removes the step's parts (open ones included); the step goes on with the regenerated output |
//! | `answer_dropped` (a regenerated answer) | nothing: the client dropped its message itself; the turn's stream is a new message |
//!
//! The client's reducer is strict, so the encoder keeps its rules: a text
//! or reasoning part is closed before `finish-step`; no output, denial or
//! approval names a call the message does not hold (a call this stream did
//! not announce is announced with `tool-input-available` first, unless the
//! client's own message already holds it: a continuation); tool parts are
//! static (`tool-<name>`), never `dynamic`; `output` is always present.
//!
//! `messageId` is `<session>-<turn>`, so a reconnect replaying the turn and
//! a continuation after a pause name the message the client already has.
//! Not shown: compaction, and subagents' own events (the parent's `agent`
//! call and its output stand for them).
//!
//! After a takeover an ai@6 client cannot be told to drop what it has: its
//! `ai` reducer (`processUIMessageStream`, under `useChat` and
//! `readUIMessageStream`) only appends parts, a new `text-start` id makes a
//! new part, `start` resets the message only on a resumed stream and only
//! under a new message id (which the chat then adds as a second message),
//! and only `data-*` parts can be replaced by id. So the cut step's parts
//! stay, closed (a call it had started ends as `tool-input-error`), and a
//! non-transient `data-step-restarted` part follows them in the message: a
//! frontend shows the message without the parts of a step that ends with
//! one ([`live_parts`]: the parts from the `step-start` before the marker
//! up to it). The regenerated step is a step of its own, with new part ids.
//! `onData` sees the marker as it arrives. ai@7's reducer takes `reset-step`
//! (it removes the parts since the last `step-start`), so an ai@7 client is
//! sent that instead, and its message holds the answer once.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::{Encoder, EventKind, Frame, LogEvent, PendingRelay, TurnEndReason};
use crate::domain::{ToolStatus, Usage};

pub const STREAM_HEADER: (&str, &str) = ("x-vercel-ai-ui-message-stream", "v1");

/// The request header in which an app names the major version of its `ai`
/// package (`7`, or a version such as `7.0.173`): ours, as the SDK's
/// transport sends nothing that tells it. Set with the transport's
/// `headers` option, it goes with every POST and reconnect.
pub const VERSION_HEADER: &str = "x-ai-sdk-version";

/// The `ai` version a stream is encoded for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AiSdkVersion {
    /// ai@6, and any client that does not say: no chunk ai@6 lacks.
    #[default]
    V6,
    /// ai@7 or later: `reset-step` for a step cut short.
    V7,
}

impl AiSdkVersion {
    /// From [`VERSION_HEADER`]'s value: a major version (`7`, `v7`,
    /// `7.0.173`); below 7 is [`AiSdkVersion::V6`]. `None` for anything else.
    pub fn from_header(value: &str) -> Option<Self> {
        let value = value.trim();
        let value = value.strip_prefix(['v', 'V']).unwrap_or(value);
        let major: u32 = value.split('.').next()?.parse().ok()?;
        Some(if major >= 7 { Self::V7 } else { Self::V6 })
    }
}

/// The error text of a call whose step was cut by a takeover.
const VOID_CALL: &str = "not made: the step was generated again after a takeover";

/// The type of the part that ends a step a takeover voided.
pub const STEP_RESTARTED_PART: &str = "data-step-restarted";

#[derive(Default)]
pub struct AiSdkEncoder {
    version: AiSdkVersion,
    /// For `start`: given for a continuation, else `<session>-<turn>` once
    /// the first event names the turn.
    message_id: Option<String>,
    started: bool,
    /// Calls the client's message already holds (a continuation).
    known_calls: HashSet<String>,
    /// Calls this stream announced (`tool-input-start` or `-available`).
    announced: HashSet<String>,
    /// Calls whose `tool-input-available` was sent.
    available: HashSet<String>,
    /// Calls that were asked about (a relay): their denial is `tool-output-denied`.
    asked: HashSet<String>,
    approvals_sent: HashSet<String>,
    /// A `start-step` was sent and its `finish-step` not yet.
    step_open: bool,
    /// The open step's model call ended (its `usage` came).
    call_done: bool,
    /// Open text and reasoning part ids.
    text: Option<String>,
    reasoning: Option<String>,
    /// This model call's tool calls in order: id, name, argument text.
    calls: Vec<(String, String, String)>,
    /// The turn's usage so far.
    total: Option<Usage>,
}

impl AiSdkEncoder {
    /// A stream for a client of `version` that starts a new message.
    pub fn new(version: AiSdkVersion) -> Self {
        Self { version, ..Self::default() }
    }

    /// A stream that answers in the assistant message `message_id` the
    /// client already holds, with its tool calls `known_calls`.
    pub fn continuing(version: AiSdkVersion, message_id: Option<String>, known_calls: HashSet<String>) -> Self {
        Self { version, message_id, known_calls, ..Self::default() }
    }

    fn holds(&self, call: &str) -> bool {
        self.known_calls.contains(call) || self.announced.contains(call)
    }

    fn open_step(&mut self, out: &mut Vec<Value>) {
        if self.step_open && self.call_done {
            self.close_parts(out);
            out.push(json!({"type": "finish-step"}));
            self.step_open = false;
        }
        if !self.step_open {
            out.push(json!({"type": "start-step"}));
            self.step_open = true;
            self.call_done = false;
        }
    }

    fn finish_step(&mut self, out: &mut Vec<Value>) {
        self.close_parts(out);
        if std::mem::take(&mut self.step_open) {
            out.push(json!({"type": "finish-step"}));
        }
    }

    fn close_parts(&mut self, out: &mut Vec<Value>) {
        if let Some(id) = self.text.take() {
            out.push(json!({"type": "text-end", "id": id}));
        }
        if let Some(id) = self.reasoning.take() {
            out.push(json!({"type": "reasoning-end", "id": id}));
        }
    }

    /// `tool-input-available`, unless it was sent or the client's message
    /// holds the call already.
    fn make_available(&mut self, id: &str, name: &str, input: Value, out: &mut Vec<Value>) {
        if self.available.contains(id) || (self.known_calls.contains(id) && !self.announced.contains(id)) {
            return;
        }
        self.announced.insert(id.to_string());
        self.available.insert(id.to_string());
        out.push(json!({"type": "tool-input-available", "toolCallId": id, "toolName": name, "input": input}));
    }

    fn approval_request(&mut self, relay: &PendingRelay, out: &mut Vec<Value>) {
        self.asked.insert(relay.tool_call_id.clone());
        self.make_available(&relay.tool_call_id, &relay.tool, relay.params.clone(), out);
        if self.approvals_sent.insert(relay.relay_id.clone()) {
            out.push(json!({"type": "tool-approval-request", "approvalId": relay.relay_id,
                            "toolCallId": relay.tool_call_id}));
        }
    }

    fn translate(&mut self, event: &LogEvent, out: &mut Vec<Value>) {
        let seq = event.seq;
        match &event.event.kind {
            EventKind::TurnStarted { .. } | EventKind::Resumed { .. } | EventKind::MessageCompleted { .. } => {}
            EventKind::TextDelta { text } => {
                self.open_step(out);
                if let Some(id) = self.reasoning.take() {
                    out.push(json!({"type": "reasoning-end", "id": id}));
                }
                if self.text.is_none() {
                    let id = format!("text-{seq}");
                    out.push(json!({"type": "text-start", "id": id}));
                    self.text = Some(id);
                }
                out.push(json!({"type": "text-delta", "id": self.text, "delta": text}));
            }
            EventKind::ReasoningDelta { text } => {
                self.open_step(out);
                if let Some(id) = self.text.take() {
                    out.push(json!({"type": "text-end", "id": id}));
                }
                if self.reasoning.is_none() {
                    let id = format!("reasoning-{seq}");
                    out.push(json!({"type": "reasoning-start", "id": id}));
                    self.reasoning = Some(id);
                }
                out.push(json!({"type": "reasoning-delta", "id": self.reasoning, "delta": text}));
            }
            EventKind::ToolCallStarted { tool_call_id, name } => {
                self.open_step(out);
                self.close_parts(out);
                self.calls.push((tool_call_id.clone(), name.clone(), String::new()));
                self.announced.insert(tool_call_id.clone());
                out.push(json!({"type": "tool-input-start", "toolCallId": tool_call_id, "toolName": name}));
            }
            EventKind::ToolCallArgs { tool_call_id, delta } => {
                if let Some((_, _, text)) = self.calls.iter_mut().find(|(id, ..)| id == tool_call_id) {
                    text.push_str(delta);
                    out.push(json!({"type": "tool-input-delta", "toolCallId": tool_call_id, "inputTextDelta": delta}));
                }
            }
            EventKind::Usage { total, .. } => {
                self.open_step(out);
                self.close_parts(out);
                self.call_done = true;
                self.total = Some(*total);
                for (id, name, text) in std::mem::take(&mut self.calls) {
                    let input = serde_json::from_str(&text).unwrap_or_else(|_| json!({}));
                    self.make_available(&id, &name, input, out);
                }
            }
            EventKind::ToolCall { tool_call_id, name, arguments } => {
                self.make_available(tool_call_id, name, arguments.clone(), out);
            }
            EventKind::RelayRequested(relay) => self.approval_request(relay, out),
            EventKind::RelayDecided { tool_call_id, .. } => {
                self.asked.insert(tool_call_id.clone());
            }
            EventKind::ToolResult { tool_call_id, name, status, output } => {
                if !self.holds(tool_call_id) {
                    self.make_available(tool_call_id, name, json!({}), out);
                }
                out.push(match status {
                    ToolStatus::Success => json!({"type": "tool-output-available", "toolCallId": tool_call_id,
                                        "output": parsed(output)}),
                    ToolStatus::Denied if self.asked.contains(tool_call_id) => {
                        json!({"type": "tool-output-denied", "toolCallId": tool_call_id})
                    }
                    _ => json!({"type": "tool-output-error", "toolCallId": tool_call_id, "errorText": text_of(output)}),
                });
            }
            EventKind::Paused { pending_relays, pending_calls } => {
                self.close_parts(out);
                for relay in pending_relays {
                    self.approval_request(relay, out);
                }
                for call in pending_calls {
                    self.make_available(&call.tool_call_id, &call.tool, call.arguments.clone(), out);
                }
                self.finish_step(out);
                out.push(json!({"type": "finish", "finishReason": "tool-calls"}));
            }
            EventKind::StepRestarted { .. } if self.version == AiSdkVersion::V7 => {
                // A step of its own when this stream saw none of the cut
                // step's output: a reset must not take the step before.
                self.open_step(out);
                self.text = None;
                self.reasoning = None;
                for (id, ..) in std::mem::take(&mut self.calls) {
                    self.announced.remove(&id);
                }
                out.push(json!({"type": "reset-step"}));
            }
            EventKind::StepRestarted { step, .. } => {
                // The marker closes a step of its own even when this stream
                // saw none of the cut step's output.
                self.open_step(out);
                self.close_parts(out);
                for (id, name, text) in std::mem::take(&mut self.calls) {
                    self.announced.remove(&id);
                    out.push(json!({"type": "tool-input-error", "toolCallId": id, "toolName": name, "input": text,
                                    "errorText": VOID_CALL}));
                }
                out.push(json!({"type": STEP_RESTARTED_PART, "id": format!("step-restarted-{seq}"),
                                "data": {"step": step}}));
                self.finish_step(out);
            }
            EventKind::Error { message, .. } => {
                self.close_parts(out);
                out.push(json!({"type": "error", "errorText": message}));
            }
            EventKind::TurnEnded { reason, .. } => {
                self.finish_step(out);
                let finish_reason = match reason {
                    TurnEndReason::Final => "stop",
                    TurnEndReason::MaxIterations => "length",
                    TurnEndReason::Failed => "error",
                    TurnEndReason::Cancelled => {
                        out.push(json!({"type": "abort", "reason": "the turn was cancelled"}));
                        return;
                    }
                };
                let mut finish = json!({"type": "finish", "finishReason": finish_reason});
                if let Some(total) = self.total {
                    finish["messageMetadata"] = json!({"usage": {
                        "inputTokens": total.input_tokens, "outputTokens": total.output_tokens,
                        "totalTokens": total.input_tokens + total.output_tokens}});
                }
                out.push(finish);
            }
            EventKind::CompactionStarted { .. }
            | EventKind::CompactionDone { .. }
            | EventKind::AnswerDropped { .. }
            | EventKind::StateReplaced { .. }
            | EventKind::StateUpdated { .. }
            | EventKind::ToolProgress { .. }
            | EventKind::ReplInput { .. }
            | EventKind::ReplProgress { .. }
            | EventKind::ReplOutput { .. }
            | EventKind::ReplError { .. }
            | EventKind::AgentEnded { .. }
            // The UI message stream has no title part; the stream ended at `finish`.
            | EventKind::TitleUpdated { .. } => {}
        }
    }
}

impl Encoder for AiSdkEncoder {
    fn dialect(&self) -> &'static str {
        "ai-sdk"
    }

    fn headers(&self) -> &'static [(&'static str, &'static str)] {
        &[STREAM_HEADER]
    }

    fn encode(&mut self, event: &LogEvent) -> Vec<Frame> {
        let mut chunks = Vec::new();
        if !self.started {
            self.started = true;
            if self.message_id.is_none()
                && let EventKind::TurnStarted { turn, .. } | EventKind::Resumed { turn } = &event.event.kind
            {
                self.message_id = Some(format!("{}-{turn}", event.session_id));
            }
            chunks.push(match &self.message_id {
                Some(id) => json!({"type": "start", "messageId": id}),
                None => json!({"type": "start"}),
            });
        }
        if event.event.agent.parent_id.is_none() {
            self.translate(event, &mut chunks);
        }
        let id = event.seq.to_string();
        chunks
            .into_iter()
            .map(|chunk| Frame { id: Some(id.clone()), event: None, data: super::json_text(&chunk), retry: None })
            .collect()
    }

    fn failure(&mut self, _code: &str, message: &str) -> Vec<Frame> {
        vec![Frame::data(json!({"type": "error", "errorText": message}).to_string())]
    }

    /// A transient data part (`data-held`): shown by a client that looks
    /// for it, kept in no message.
    fn held(&mut self, held: &crate::domain::Held) -> Vec<Frame> {
        let mut data = held.fields();
        data["message"] = json!(held.message());
        vec![Frame::data(json!({"type": "data-held", "data": data, "transient": true}).to_string())]
    }

    fn close(&mut self) -> Vec<Frame> {
        vec![Frame::data("[DONE]")]
    }
}

/// The parts of a UI message that stand: without those of a step that a
/// `data-step-restarted` part ends (from the `step-start` before it, or the
/// message's start, up to the marker).
pub fn live_parts(parts: &[Value]) -> Vec<&Value> {
    let (mut live, mut step) = (Vec::new(), Vec::new());
    for part in parts {
        match part["type"].as_str() {
            Some("step-start") => live.append(&mut step),
            Some(STEP_RESTARTED_PART) => {
                step.clear();
                continue;
            }
            _ => {}
        }
        step.push(part);
    }
    live.append(&mut step);
    live
}

/// A tool's output as the client gets it: JSON text that holds an object or
/// an array is parsed; anything else stays as it is.
fn parsed(output: &Value) -> Value {
    match output {
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(value @ (Value::Object(_) | Value::Array(_))) => value,
            _ => output.clone(),
        },
        other => other.clone(),
    }
}

fn text_of(output: &Value) -> String {
    match output {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
