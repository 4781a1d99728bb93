//! The Cosmo dialect (docs/protocols.md §3): one JSON `ChatEvent` per SSE frame,
//! `data: {sessionId, type, …}` with our `id: <seq>` (no `event:` line, so
//! `EventSource.onmessage` sees every frame).
//!
//! | canonical event | Cosmo |
//! |---|---|
//! | `turn_started`; the last open tool call's `tool_result` (the next model call begins) | `thinking` |
//! | `text_delta` | `text {text}` |
//! | `usage` (the end of a model call) that asked for tools | `tool_call {toolName, toolCallId, toolArgs}` per call, denied ones included (their result says so) |
//! | `tool_result` | `tool_result {toolCallId, toolName, toolResult}`: a preview of at most 200 characters |
//! | `step_restarted` (takeover; `restartedStep` is ours) | `thinking {restartedStep}` |
//! | `error` | `error {error}` |
//! | `turn_ended` cancelled | `error {error: "the turn was cancelled"}` |
//! | the stream's end after `turn_ended` final or max_iterations, or `paused` | `done {contextUsage?}` |
//! | `title_updated` (after the first exchange's `turn_ended`, which says it comes) | `title-updated {title}` |
//!
//! `contextUsage` is the last model call's input plus output tokens against
//! the model's context window. Ours: `done` carries `stopReason` when the
//! turn did not simply finish (`max_iterations`, or `paused` when it waits
//! for the client's tool results or approvals, given over the native API),
//! and a `thinking` after a takeover carries `restartedStep`.
//!
//! After a takeover the text the cut model call streamed is void. Cosmo's
//! `text` only appends, and a client joins its text segments at `done`, so
//! the closest signal is the one that separates segments: a `thinking`,
//! which every model call starts after (the turn's, or the one after the
//! last tool result). A client that knows `restartedStep` drops the text
//! since the previous `thinking` (the cut call's segment), and the
//! regenerated text follows as a new segment; one that does not shows the
//! void text before the answer. The cut call's tool calls were never shown
//! (calls are announced when their call ends).
//!
//! Not shown: reasoning (the `thinking` indicator stands for it), argument
//! fragments, relays and decisions, usage, compaction, and subagents' own
//! events (the parent's `agent` tool call and result stand for them).
//!
//! `title-updated` arrives after `done`, as seed 003 has it ("asynchronously
//! after first exchange"): the turn's end is committed first and its
//! `turn_ended` says a title comes; the stream sends `done` at once and
//! stays open until the title (see `api/stream.rs`, [`Encoder::wants_title`]).

use std::collections::HashSet;

use serde_json::{Value, json};

use super::{Encoder, EventKind, Frame, Limits, LogEvent, ModelLimits, TurnEndReason};
use crate::domain::{Session, Usage};

/// Cosmo's limit on a `tool_result` preview, in characters.
const PREVIEW_CHARS: usize = 200;

/// How the stream's turn stopped, for the `done` sent at its end.
enum Ending {
    Done {
        stop_reason: Option<&'static str>,
    },
    /// An `error` was sent: no `done`.
    Errored,
}

pub struct CosmoEncoder {
    models: ModelLimits,
    session_id: String,
    /// This step's tool calls in the order they opened: id, name, argument text.
    step_calls: Vec<(String, String, String)>,
    /// Calls shown with `tool_call` whose result is still to come.
    open_calls: HashSet<String>,
    /// Every call shown with `tool_call` on this stream.
    shown_calls: HashSet<String>,
    last_call: Option<Usage>,
    ending: Option<Ending>,
}

impl CosmoEncoder {
    pub fn new(models: ModelLimits) -> Self {
        Self {
            models,
            session_id: String::new(),
            step_calls: Vec::new(),
            open_calls: HashSet::new(),
            shown_calls: HashSet::new(),
            last_call: None,
            ending: None,
        }
    }

    fn frame(&self, seq: Option<u64>, kind: &str, fields: Value) -> Frame {
        let mut data = json!({"sessionId": self.session_id, "type": kind});
        if let (Value::Object(data), Value::Object(fields)) = (&mut data, fields) {
            data.extend(fields);
        }
        Frame { id: seq.map(|s| s.to_string()), event: None, data: super::json_text(&data), retry: None }
    }

    fn tool_call(&mut self, seq: u64, id: &str, name: &str, arguments: Value) -> Frame {
        self.shown_calls.insert(id.to_string());
        self.open_calls.insert(id.to_string());
        self.frame(Some(seq), "tool_call", json!({"toolName": name, "toolCallId": id, "toolArgs": arguments}))
    }

    fn context_usage(&self, session: &Session) -> Option<Value> {
        let Limits { max_tokens, .. } = self.models.get(session.model())?;
        let used = match self.last_call {
            Some(usage) => usage.input_tokens + usage.output_tokens,
            // A stream that joined after the last model call.
            None => crate::orchestrator::context::estimate(session.history().unwrap_or_default()),
        };
        let percentage = (used as f64 / f64::from(max_tokens.max(1)) * 10_000.0).round() / 100.0;
        Some(json!({"usedTokens": used, "maxTokens": max_tokens, "percentage": percentage}))
    }
}

impl Encoder for CosmoEncoder {
    fn dialect(&self) -> &'static str {
        "cosmo"
    }

    fn encode(&mut self, event: &LogEvent) -> Vec<Frame> {
        if self.session_id.is_empty() {
            self.session_id = event.session_id.to_string();
        }
        if event.event.agent.parent_id.is_some() {
            return Vec::new();
        }
        let seq = event.seq;
        match &event.event.kind {
            EventKind::TurnStarted { .. } => vec![self.frame(Some(seq), "thinking", json!({}))],
            EventKind::TextDelta { text } => vec![self.frame(Some(seq), "text", json!({"text": text}))],
            EventKind::ToolCallStarted { tool_call_id, name } => {
                self.step_calls.push((tool_call_id.clone(), name.clone(), String::new()));
                Vec::new()
            }
            EventKind::ToolCallArgs { tool_call_id, delta } => {
                if let Some((_, _, text)) = self.step_calls.iter_mut().find(|(id, ..)| id == tool_call_id) {
                    text.push_str(delta);
                }
                Vec::new()
            }
            EventKind::Usage { usage, .. } => {
                self.last_call = Some(*usage);
                let calls = std::mem::take(&mut self.step_calls);
                calls
                    .into_iter()
                    .map(|(id, name, text)| {
                        let arguments = serde_json::from_str(&text).unwrap_or_else(|_| json!({}));
                        self.tool_call(seq, &id, &name, arguments)
                    })
                    .collect()
            }
            EventKind::ToolCall { tool_call_id, name, arguments } if !self.shown_calls.contains(tool_call_id) => {
                vec![self.tool_call(seq, tool_call_id, name, arguments.clone())]
            }
            EventKind::ToolResult { tool_call_id, name, output, .. } => {
                let mut frames = Vec::new();
                if !self.shown_calls.contains(tool_call_id) {
                    // A stream that joined after the call was announced: its
                    // arguments were in events this stream did not see.
                    frames.push(self.tool_call(seq, tool_call_id, name, json!({})));
                }
                let preview = preview(output);
                frames.push(self.frame(
                    Some(seq),
                    "tool_result",
                    json!({"toolCallId": tool_call_id, "toolName": name, "toolResult": preview}),
                ));
                if self.open_calls.remove(tool_call_id) && self.open_calls.is_empty() {
                    frames.push(self.frame(Some(seq), "thinking", json!({})));
                }
                frames
            }
            EventKind::StepRestarted { step, .. } => {
                self.step_calls.clear();
                vec![self.frame(Some(seq), "thinking", json!({"restartedStep": step}))]
            }
            EventKind::Paused { .. } => {
                self.ending = Some(Ending::Done { stop_reason: Some("paused") });
                Vec::new()
            }
            EventKind::Error { message, .. } => {
                self.ending = Some(Ending::Errored);
                vec![self.frame(Some(seq), "error", json!({"error": message}))]
            }
            EventKind::TurnEnded { reason, .. } => match reason {
                TurnEndReason::Final => {
                    self.ending.get_or_insert(Ending::Done { stop_reason: None });
                    Vec::new()
                }
                TurnEndReason::MaxIterations => {
                    self.ending.get_or_insert(Ending::Done { stop_reason: Some("max_iterations") });
                    Vec::new()
                }
                TurnEndReason::Cancelled => {
                    self.ending = Some(Ending::Errored);
                    vec![self.frame(Some(seq), "error", json!({"error": "the turn was cancelled"}))]
                }
                TurnEndReason::Failed => {
                    self.ending.get_or_insert(Ending::Errored);
                    Vec::new()
                }
            },
            EventKind::TitleUpdated { title } => {
                vec![self.frame(Some(seq), "title-updated", json!({"title": title}))]
            }
            EventKind::ToolCall { .. }
            | EventKind::MessageCompleted { .. }
            | EventKind::ReasoningDelta { .. }
            | EventKind::RelayRequested(_)
            | EventKind::RelayDecided { .. }
            | EventKind::Resumed { .. }
            | EventKind::CompactionStarted { .. }
            | EventKind::CompactionDone { .. }
            | EventKind::AnswerDropped { .. }
            | EventKind::StateReplaced { .. }
            | EventKind::StateUpdated { .. }
            | EventKind::ToolProgress { .. }
            | EventKind::ReplInput { .. }
            | EventKind::ReplProgress { .. }
            | EventKind::ReplOutput { .. }
            | EventKind::ReplError { .. }
            | EventKind::AgentEnded { .. } => Vec::new(),
        }
    }

    fn wants_title(&self) -> bool {
        true
    }

    fn failure(&mut self, _code: &str, message: &str) -> Vec<Frame> {
        self.ending = Some(Ending::Errored);
        vec![self.frame(None, "error", json!({"error": message}))]
    }

    /// Cosmo's one shape, type `held`, with the sentence as its text.
    fn held(&mut self, held: &crate::domain::Held) -> Vec<Frame> {
        vec![self.frame(None, "held", json!({"text": held.message(), "held": held.fields()}))]
    }

    fn wants_finish(&self) -> bool {
        matches!(self.ending, Some(Ending::Done { .. }))
    }

    fn finish(&mut self, session: &Session) -> Vec<Frame> {
        let Some(Ending::Done { stop_reason }) = self.ending.take() else { return Vec::new() };
        if self.session_id.is_empty() {
            self.session_id = session.id().to_string();
        }
        let mut fields = json!({});
        if let Some(usage) = self.context_usage(session) {
            fields["contextUsage"] = usage;
        }
        if let Some(reason) = stop_reason {
            fields["stopReason"] = json!(reason);
        }
        vec![self.frame(None, "done", fields)]
    }
}

/// A tool output as text, cut to [`PREVIEW_CHARS`] characters.
fn preview(output: &Value) -> String {
    let text = match output {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    match text.char_indices().nth(PREVIEW_CHARS) {
        Some((cut, _)) => text[..cut].to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests;
