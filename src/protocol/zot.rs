//! The zot dialect (docs/protocols.md §4): NDJSON, one bare event object per
//! line, as zot's agent writes them and Colibri's Glasspane reads them.
//!
//! zot's `turn` is one model call, our *step*; our turn is its run up to
//! `done`. So a step opens with `turn_start {step}` + `assistant_start` at
//! its first output, and a step that asked for tools closes with
//! `turn_end {stop: "tool_use"}` before its results:
//!
//! | canonical event | zot |
//! |---|---|
//! | first output of a step | `turn_start {step}`, `assistant_start` |
//! | `text_delta` | `text_delta {delta}` |
//! | `tool_call_started` / `tool_call_args` | `tool_use_start {id, name}` / `tool_use_args {id, delta}` |
//! | `usage` (every model call ends with one) | `tool_use_end {id}` per call, `usage {input, output, reasoning, cache_read, cache_write, cost_usd, cumulative}`, `assistant_message {content, time}` (the step's text from `message_completed`, and `tool_call` blocks), then for a step that asked for tools a standalone `tool_call {id, name, args}` per call (Glasspane skips it: `tool_use_start` opened the call) and `turn_end {stop: "tool_use"}` |
//! | `tool_call` (permitted, about to run) | nothing: announced at the end of its step |
//! | `tool_progress` (a command's live output) | `tool_progress {id, text}`, a piece at a time |
//! | `tool_result` | `tool_result {id, is_error, content}` (the text the model read) |
//! | `error` | `turn_start {step}` if no step is open (a turn that failed before any output), `turn_end {stop: "error", error}`; `error {message}` |
//! | `compaction_done` | `compact_done {summary}` |
//! | `turn_ended` | `turn_end {stop: "end"}` (`"aborted"` when cancelled) if a step is open; `done` |
//! | `paused` | `turn_end {stop: "tool_use"}` if owed; `done {paused: true}` |
//! | `step_restarted` (takeover) | for the cut step, if open: `tool_use_end {id}` per call it started, `assistant_message {content: []}`, `turn_end {stop: "aborted", restarted: true}`; then the step starts again under its own number |
//!
//! After a takeover the cut step's streamed text is void. zot has no event
//! that takes text back, so its message ends empty: a consumer that
//! finishes a message with `assistant_message`'s content (Glasspane's
//! `message_end`) ends with nothing from it; one that keeps the streamed
//! deltas sees an aborted step (`restarted: true` is ours: the step is
//! generated again, not stopped by the user) and can drop its text. The
//! step then starts again with a `turn_start` of the same number, and its
//! `assistant_message` holds only the regenerated text.
//!
//! Ours on every line: `seq`, so a consumer can rejoin with `?after=<seq>`
//! (a stream that starts mid-turn is given the turn's events before its
//! cursor first, so its step numbers and open calls are right); and when
//! nothing happens for a while, a `{"type":"heartbeat"}` line.
//! `usage.cost_usd` comes from the model's configured `prices` (0 without);
//! `usage.reasoning` is null (providers do not report it apart). Not from
//! the log: `user_message`, which the request that starts the turn sends
//! (`api/zot.rs`), reasoning text, relays (the call's `tool_result` comes
//! once decided), and subagents' own events (the parent's `agent` call
//! stands for them).

use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use super::{Encoder, EventKind, Frame, LogEvent, ModelLimits, Transport, TurnEndReason};
use crate::{
    config::Prices,
    domain::{ToolStatus, Usage},
};

#[derive(Default)]
pub struct ZotEncoder {
    /// Every model's limits and prices; `prices` once the turn names its model.
    models: ModelLimits,
    prices: Option<Prices>,
    /// The last step number shown.
    step: u32,
    /// A `turn_start` was sent and its `turn_end` not yet.
    in_step: bool,
    /// This step's tool calls, in order: id, name, argument text.
    calls: Vec<(String, String, String)>,
    /// This step's text, from its `message_completed`.
    text: Option<String>,
    /// The step asked for tools: `turn_end {stop: "tool_use"}` is owed
    /// before what the tools bring.
    tool_use_end_due: bool,
}

impl ZotEncoder {
    /// An encoder that reports costs from the models' prices.
    pub fn for_models(models: ModelLimits) -> Self {
        Self { models, ..Self::default() }
    }

    fn line(seq: u64, kind: &str, fields: Value) -> Frame {
        let mut object = Map::new();
        object.insert("type".into(), json!(kind));
        if let Value::Object(fields) = fields {
            object.extend(fields);
        }
        object.insert("seq".into(), json!(seq));
        Frame { id: Some(seq.to_string()), event: None, data: super::json_text(&Value::Object(object)), retry: None }
    }

    /// Opens a step if none is open.
    fn start_step(&mut self, seq: u64, out: &mut Vec<Frame>) {
        if !self.in_step {
            self.step += 1;
            self.in_step = true;
            out.push(Self::line(seq, "turn_start", json!({"step": self.step})));
            out.push(Self::line(seq, "assistant_start", json!({})));
        }
    }

    fn end_step(&mut self, seq: u64, fields: Value, out: &mut Vec<Frame>) {
        if self.in_step {
            self.in_step = false;
            out.push(Self::line(seq, "turn_end", fields));
        }
    }

    /// Sends the owed `turn_end {stop: "tool_use"}`.
    fn settle_tool_use(&mut self, seq: u64, out: &mut Vec<Frame>) {
        if std::mem::take(&mut self.tool_use_end_due) {
            self.end_step(seq, json!({"stop": "tool_use"}), out);
        }
    }

    /// The end of a model call, in zot's order: its tool uses end, its
    /// usage, its whole message.
    fn end_of_call(&mut self, seq: u64, ts: u64, usage: &Usage, total: &Usage, out: &mut Vec<Frame>) {
        self.start_step(seq, out);
        let mut blocks = Vec::new();
        if let Some(text) = self.text.take().filter(|t| !t.is_empty()) {
            blocks.push(json!({"type": "text", "text": text}));
        }
        let mut calls = Vec::new();
        for (id, name, text) in std::mem::take(&mut self.calls) {
            out.push(Self::line(seq, "tool_use_end", json!({"id": id})));
            let args: Value = serde_json::from_str(&text).unwrap_or_else(|_| json!({}));
            calls.push(json!({"id": id, "name": name, "args": args}));
            blocks.push(json!({"type": "tool_call", "id": id, "name": name, "args": args}));
        }
        let mut fields = self.usage_fields(usage);
        fields["cumulative"] = self.usage_fields(total);
        out.push(Self::line(seq, "usage", fields));
        out.push(Self::line(seq, "assistant_message", json!({"content": blocks, "time": iso_time(ts)})));
        // zot announces each call about to run, then ends the step.
        if !calls.is_empty() {
            for call in calls {
                out.push(Self::line(seq, "tool_call", call));
            }
            self.tool_use_end_due = true;
            self.settle_tool_use(seq, out);
        }
    }

    /// zot's usage fields; `cost_usd` from the model's prices.
    fn usage_fields(&self, usage: &Usage) -> Value {
        let cost = self.prices.map_or(0.0, |p| p.cost(usage.input_tokens, usage.output_tokens));
        json!({"input": usage.input_tokens, "output": usage.output_tokens, "reasoning": null,
               "cache_read": usage.cache_read_tokens, "cache_write": usage.cache_write_tokens,
               "cost_usd": (cost * 1e9).round() / 1e9})
    }
}

impl Encoder for ZotEncoder {
    fn dialect(&self) -> &'static str {
        "zot"
    }

    fn transport(&self) -> Transport {
        Transport::Ndjson
    }

    fn encode(&mut self, event: &LogEvent) -> Vec<Frame> {
        if event.event.agent.parent_id.is_some() {
            return Vec::new();
        }
        let seq = event.seq;
        let mut out = Vec::new();
        match &event.event.kind {
            EventKind::TextDelta { text } => {
                self.start_step(seq, &mut out);
                out.push(Self::line(seq, "text_delta", json!({"delta": text})));
            }
            EventKind::ReasoningDelta { .. } => self.start_step(seq, &mut out),
            EventKind::ToolCallStarted { tool_call_id, name } => {
                self.start_step(seq, &mut out);
                self.calls.push((tool_call_id.clone(), name.clone(), String::new()));
                out.push(Self::line(seq, "tool_use_start", json!({"id": tool_call_id, "name": name})));
            }
            EventKind::ToolCallArgs { tool_call_id, delta } => {
                if let Some((_, _, text)) = self.calls.iter_mut().find(|(id, ..)| id == tool_call_id) {
                    text.push_str(delta);
                }
                out.push(Self::line(seq, "tool_use_args", json!({"id": tool_call_id, "delta": delta})));
            }
            EventKind::MessageCompleted { content, .. } => self.text.clone_from(content),
            EventKind::Usage { usage, total } => self.end_of_call(seq, event.event.ts, usage, total, &mut out),
            EventKind::ToolResult { tool_call_id, status, output, .. } => {
                self.settle_tool_use(seq, &mut out);
                let text = super::tool_text(output);
                out.push(Self::line(
                    seq,
                    "tool_result",
                    json!({"id": tool_call_id, "is_error": *status != ToolStatus::Success,
                           "content": [{"type": "text", "text": text}]}),
                ));
            }
            EventKind::ToolProgress { tool_call_id, text, .. } => {
                out.push(Self::line(seq, "tool_progress", json!({"id": tool_call_id, "text": text})));
            }
            EventKind::RelayRequested(_) => self.settle_tool_use(seq, &mut out),
            EventKind::StepRestarted { step, .. } => {
                if self.in_step {
                    for (id, ..) in std::mem::take(&mut self.calls) {
                        out.push(Self::line(seq, "tool_use_end", json!({"id": id})));
                    }
                    let time = iso_time(event.event.ts);
                    out.push(Self::line(seq, "assistant_message", json!({"content": [], "time": time})));
                }
                self.end_step(seq, json!({"stop": "aborted", "restarted": true}), &mut out);
                self.calls.clear();
                self.text = None;
                self.tool_use_end_due = false;
                self.step = step.saturating_sub(1);
            }
            EventKind::Error { message, .. } => {
                self.settle_tool_use(seq, &mut out);
                if !self.in_step {
                    // As zot: a failed turn still has its step.
                    self.step += 1;
                    self.in_step = true;
                    out.push(Self::line(seq, "turn_start", json!({"step": self.step})));
                }
                self.end_step(seq, json!({"stop": "error", "error": message}), &mut out);
                out.push(Self::line(seq, "error", json!({"message": message})));
            }
            EventKind::Paused { .. } => {
                self.settle_tool_use(seq, &mut out);
                out.push(Self::line(seq, "done", json!({"paused": true})));
            }
            EventKind::TurnEnded { reason, .. } => {
                self.settle_tool_use(seq, &mut out);
                let stop = if *reason == TurnEndReason::Cancelled { "aborted" } else { "end" };
                self.end_step(seq, json!({"stop": stop}), &mut out);
                out.push(Self::line(seq, "done", json!({})));
            }
            EventKind::CompactionDone { summary, .. } => {
                out.push(Self::line(seq, "compact_done", json!({"summary": summary})));
            }
            // zot counts steps per prompt.
            EventKind::TurnStarted { model, .. } => {
                self.step = 0;
                self.prices = self.models.get(model).and_then(|l| l.prices);
            }
            EventKind::ToolCall { .. }
            | EventKind::Resumed { .. }
            | EventKind::RelayDecided { .. }
            | EventKind::CompactionStarted { .. }
            | EventKind::AnswerDropped { .. }
            | EventKind::StateReplaced { .. }
            | EventKind::StateUpdated { .. }
            | EventKind::ReplInput { .. }
            | EventKind::ReplProgress { .. }
            | EventKind::ReplOutput { .. }
            | EventKind::ReplError { .. }
            | EventKind::AgentEnded { .. }
            | EventKind::TitleUpdated { .. } => {}
        }
        out
    }

    fn failure(&mut self, code: &str, message: &str) -> Vec<Frame> {
        let data = json!({"type": "error", "message": message, "code": code});
        vec![Frame { id: None, event: None, data: data.to_string(), retry: None }]
    }

    /// A `held` line (consumers skip types they do not know).
    fn held(&mut self, held: &crate::domain::Held) -> Vec<Frame> {
        let mut data = held.fields();
        data["type"] = json!("held");
        data["message"] = json!(held.message());
        vec![Frame { id: None, event: None, data: data.to_string(), retry: None }]
    }

    /// Step numbers and a step's open calls span the cursor of a rejoin.
    fn wants_turn_context(&self) -> bool {
        true
    }
}

/// Unix milliseconds as zot writes times: `2026-06-21T22:36:06.817Z`.
pub fn iso_time(ms: u64) -> String {
    let format =
        time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&format).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
