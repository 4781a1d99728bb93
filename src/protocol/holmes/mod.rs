//! The HolmesGPT dialect (docs/protocols.md §1): canonical events as Holmes' SSE
//! events, `event: <name>` + `data: <json>`, plus the `id: <seq>` of the
//! event each frame comes from (Holmes clients ignore it; a rejoin uses it).
//!
//! | canonical | Holmes |
//! |---|---|
//! | `message_completed` | `ai_message {content, reasoning, metadata}` |
//! | `tool_call_started` | `start_tool_calling {tool_name, id}` |
//! | `tool_result` | `tool_calling_result {…, result: {status, data, error, params}}` (`denied` → `error`) |
//! | `usage` | `token_count {metadata}` |
//! | `paused` | one `tool_calling_result` (`approval_required`) per pending approval, then, from [`Encoder::finish`], `approval_required` |
//! | `turn_ended` final / max_iterations | `ai_answer_end` from [`Encoder::finish`] |
//! | `compaction_*` | `conversation_history_compaction_start` / `conversation_history_compacted` |
//! | `error` | `error {description, error_code, msg, success: false}` |
//! | `step_restarted` (takeover) | nothing: the cut call's held `start_tool_calling`s are dropped |
//!
//! Holmes sends one whole message per model call, then the calls it starts,
//! then (after the tools ran) the iteration's token count. Canonical events
//! come in stream order instead (calls open while the text streams; usage
//! right after the model call), so the encoder holds a step's frames until
//! its `usage` event and its `token_count` until the next step or the end.
//! A held frame goes out with the id of the event that releases it, so a
//! rejoin after that id has seen it. A stream rejoined mid-turn is given
//! the turn's events before its cursor first ([`Encoder::wants_turn_context`]),
//! so what was held then (a step's calls, an owed `token_count`) is still
//! sent, once. Only the main agent's events are
//! shown: Holmes has no subagents (the `agent` tool is one tool call).
//!
//! After a takeover nothing needs taking back: Holmes streams no text, and
//! the cut model call never completed, so it sent no `ai_message`; the
//! calls it had started were held, and are dropped. The regenerated call's
//! `ai_message` holds its own text only, and `ai_answer_end.analysis` is
//! the last completed message's.
//!
//! `conversation_history` is the stored conversation in OpenAI format; the
//! `approval_required` and `ai_answer_end` events carry `session_id` too.

use std::collections::HashMap;

mod finish;
pub mod investigation;

use serde_json::{Value, json};

pub use self::finish::render_history;
use self::finish::{describe, metadata};
use super::{Encoder, EventKind, Frame, Limits, LogEvent, ModelLimits, PendingCall, PendingRelay, TurnEndReason};
use crate::domain::{FailureCode, Session, ToolStatus, Usage};

/// The prefix the orchestrator puts before the reason of a denied call
/// (the model reads it; Holmes clients get the reason alone).
const DENIED_PREFIX: &str = "Permission denied: ";

/// Holmes' error code for a rate limit; everything else is 1.
const RATE_LIMIT_CODE: u32 = 5204;

/// How the stream's turn stopped, for [`Encoder::finish`].
#[derive(Debug, Clone)]
enum Ending {
    Paused { relays: Vec<PendingRelay>, calls: Vec<PendingCall> },
    Answered,
}

#[derive(Default)]
pub struct HolmesEncoder {
    /// Known from the start for `/api/chat`; for `?format=holmes` on a
    /// native stream, looked up in `models` once an event or the stored
    /// session names the model (`null` in `metadata` until then).
    limits: Option<Limits>,
    models: ModelLimits,
    /// Arguments by tool call id: from `tool_call` events, or seeded by the
    /// handler from the stored calls of a resumed turn.
    params: HashMap<String, Value>,
    /// Argument fragments by tool call id, for calls that never get a
    /// `tool_call` event (denied ones).
    fragments: HashMap<String, String>,
    /// This step's message and call starts, held until its `usage` event.
    held_message: Option<(Option<String>, Option<String>)>,
    held_starts: Vec<(String, String)>,
    /// A `token_count` is owed for the last `usage`.
    token_count_due: bool,
    /// The turn's usage so far, and the last model call's.
    total: Usage,
    last_call: Usage,
    /// The last `message_completed` content: Holmes' `analysis`.
    analysis: Option<String>,
    ending: Option<Ending>,
    /// The turn was resumed (HolmesGPT then offers no follow-ups).
    resumed: bool,
    last_seq: u64,
}

impl HolmesEncoder {
    pub fn new(limits: Option<Limits>) -> Self {
        Self { limits, ..Self::default() }
    }

    /// For a stream whose model is not known yet.
    pub fn for_models(models: ModelLimits) -> Self {
        Self { models, ..Self::default() }
    }

    fn learn_model(&mut self, alias: &str) {
        if self.limits.is_none() {
            self.limits = self.models.get(alias);
        }
    }

    /// Remembers a call's arguments, for `params` of results this stream
    /// shows without having seen the call (a resumed turn's pending calls).
    pub fn remember_call(&mut self, tool_call_id: &str, arguments: Value) {
        self.params.insert(tool_call_id.to_string(), arguments);
    }

    fn frame(&self, name: &'static str, data: Value) -> Frame {
        Frame {
            id: Some(self.last_seq.to_string()),
            event: Some(name.into()),
            data: crate::protocol::json_text(&data),
            retry: None,
        }
    }

    fn params_of(&self, tool_call_id: &str) -> Value {
        if let Some(params) = self.params.get(tool_call_id) {
            return params.clone();
        }
        self.fragments.get(tool_call_id).and_then(|text| serde_json::from_str(text).ok()).unwrap_or_else(|| json!({}))
    }

    /// `metadata` as known during the stream: usage from the events, and the
    /// conversation size as the provider last counted it.
    fn metadata(&self) -> Value {
        let tokens = json!({"total_tokens": self.last_call.input_tokens + self.last_call.output_tokens});
        metadata(&self.total, tokens, self.limits)
    }

    /// Sends the held message and call starts of the current step.
    fn release_step(&mut self, out: &mut Vec<Frame>) {
        if let Some((content, reasoning)) = self.held_message.take() {
            let data = json!({"content": content, "reasoning": reasoning, "metadata": self.metadata()});
            out.push(self.frame("ai_message", data));
        }
        for (id, name) in std::mem::take(&mut self.held_starts) {
            out.push(self.frame("start_tool_calling", json!({"tool_name": name, "id": id})));
        }
    }

    /// Sends the `token_count` owed for the previous model call.
    fn release_token_count(&mut self, out: &mut Vec<Frame>) {
        if std::mem::take(&mut self.token_count_due) {
            out.push(self.frame("token_count", json!({"metadata": self.metadata()})));
        }
    }

    fn release_all(&mut self, out: &mut Vec<Frame>) {
        self.release_step(out);
        self.release_token_count(out);
    }

    fn tool_result(&self, tool_call_id: &str, name: &str, status: ToolStatus, output: &Value) -> Frame {
        let params = self.params_of(tool_call_id);
        let text = match output {
            Value::String(s) => Value::String(s.clone()),
            other => other.clone(),
        };
        let (status, data, error) = match status {
            ToolStatus::Success => ("success", text, Value::Null),
            ToolStatus::Error => ("error", Value::Null, text),
            // HolmesGPT reports a denial as an error with the reason.
            ToolStatus::Denied => {
                let reason = text.as_str().map(|t| t.strip_prefix(DENIED_PREFIX).unwrap_or(t));
                ("error", Value::Null, reason.map_or(text.clone(), |r| json!(r)))
            }
        };
        let data = json!({
            "tool_call_id": tool_call_id,
            "role": "tool",
            "description": describe(name, &params),
            "name": name,
            "result": {"status": status, "data": data, "error": error, "params": params},
        });
        self.frame("tool_calling_result", data)
    }

    fn error_frame(&self, code: &str, message: &str, retry_after_secs: Option<u64>) -> Frame {
        let error_code = if code == FailureCode::RateLimited.as_str() { RATE_LIMIT_CODE } else { 1 };
        // `code` and `retry_after` are ours (Holmes clients ignore them);
        // they keep the cause machine-readable for the non-stream answer.
        let mut data =
            json!({"description": message, "error_code": error_code, "msg": message, "success": false, "code": code});
        if let Some(secs) = retry_after_secs {
            data["retry_after"] = json!(secs);
        }
        self.frame("error", data)
    }
}

impl Encoder for HolmesEncoder {
    fn dialect(&self) -> &'static str {
        "holmes"
    }

    fn encode(&mut self, event: &LogEvent) -> Vec<Frame> {
        if event.event.agent.depth > 0 {
            return Vec::new();
        }
        self.last_seq = event.seq;
        let mut out = Vec::new();
        match &event.event.kind {
            EventKind::ToolCallStarted { tool_call_id, name } => {
                self.release_token_count(&mut out);
                self.held_starts.push((tool_call_id.clone(), name.clone()));
            }
            EventKind::ToolCallArgs { tool_call_id, delta } => {
                self.fragments.entry(tool_call_id.clone()).or_default().push_str(delta);
            }
            EventKind::ToolCall { tool_call_id, arguments, .. } => {
                self.params.insert(tool_call_id.clone(), arguments.clone());
            }
            EventKind::MessageCompleted { content, reasoning } => {
                self.release_token_count(&mut out);
                if content.is_some() {
                    self.analysis.clone_from(content);
                }
                self.held_message = Some((content.clone(), reasoning.clone()));
            }
            EventKind::Usage { usage, total } => {
                self.last_call = *usage;
                self.total = *total;
                self.release_all(&mut out);
                self.token_count_due = true;
            }
            EventKind::ToolResult { tool_call_id, name, status, output } => {
                self.release_step(&mut out);
                out.push(self.tool_result(tool_call_id, name, *status, output));
            }
            EventKind::Paused { pending_relays, pending_calls } => {
                self.release_step(&mut out);
                for relay in pending_relays {
                    self.params.entry(relay.tool_call_id.clone()).or_insert_with(|| relay.params.clone());
                    let params = relay.params.clone();
                    let data = json!({
                        "tool_call_id": relay.tool_call_id,
                        "role": "tool",
                        "description": describe(&relay.tool, &params),
                        "name": relay.tool,
                        "result": {"status": "approval_required", "data": null, "error": null, "params": params},
                    });
                    out.push(self.frame("tool_calling_result", data));
                }
                self.release_token_count(&mut out);
                self.ending = Some(Ending::Paused { relays: pending_relays.clone(), calls: pending_calls.clone() });
            }
            EventKind::TurnEnded { reason, .. } => {
                self.release_all(&mut out);
                match reason {
                    TurnEndReason::Final | TurnEndReason::MaxIterations => self.ending = Some(Ending::Answered),
                    TurnEndReason::Cancelled => out.push(self.error_frame("cancelled", "the turn was cancelled", None)),
                    // The `error` event before it said why.
                    TurnEndReason::Failed => {}
                }
            }
            EventKind::Error { code, message, retry_after_secs } => {
                self.release_all(&mut out);
                out.push(self.error_frame(code.as_str(), message, *retry_after_secs));
            }
            EventKind::CompactionStarted { tokens, messages } => {
                self.release_all(&mut out);
                let data = json!({
                    "content": format!("Compacting conversation history ({tokens} tokens, {messages} messages)..."),
                    "metadata": {
                        "initial_tokens": tokens,
                        "num_messages": messages,
                        "max_context_size": self.limits.map(|l| l.max_tokens),
                        "threshold_pct": crate::orchestrator::context::COMPACTION_THRESHOLD_PCT,
                    },
                });
                out.push(self.frame("conversation_history_compaction_start", data));
            }
            EventKind::CompactionDone { tokens_before, tokens_after, summary, messages_before, messages } => {
                self.release_all(&mut out);
                let saved = if *tokens_before == 0 {
                    0.0
                } else {
                    let pct = 100.0 * (*tokens_before as f64 - *tokens_after as f64) / *tokens_before as f64;
                    (pct * 10.0).round() / 10.0
                };
                let data = json!({
                    "content": format!(
                        "The conversation history has been compacted from {tokens_before} to {tokens_after} tokens"
                    ),
                    "compaction_summary": summary,
                    "messages": render_history(messages),
                    "metadata": {
                        "initial_tokens": tokens_before,
                        "compacted_tokens": tokens_after,
                        "compression_ratio_pct": saved,
                        "num_messages_before": messages_before,
                        "num_messages_after": messages.len(),
                        "max_context_size": self.limits.map(|l| l.max_tokens),
                        "threshold_pct": crate::orchestrator::context::COMPACTION_THRESHOLD_PCT,
                    },
                });
                out.push(self.frame("conversation_history_compacted", data));
            }
            EventKind::TurnStarted { model, .. } => self.learn_model(model),
            // The cut call never completed (no message held); the calls it
            // started are void, their argument fragments too (a regenerated
            // call may reuse an id).
            EventKind::StepRestarted { .. } => {
                for (id, _) in std::mem::take(&mut self.held_starts) {
                    self.fragments.remove(&id);
                }
            }
            EventKind::Resumed { .. } => self.resumed = true,
            EventKind::TextDelta { .. }
            | EventKind::ReasoningDelta { .. }
            | EventKind::RelayRequested(_)
            | EventKind::RelayDecided { .. }
            | EventKind::AnswerDropped { .. }
            | EventKind::StateReplaced { .. }
            | EventKind::StateUpdated { .. }
            | EventKind::ToolProgress { .. }
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
        let mut frame = self.error_frame(code, message, None);
        frame.id = None;
        vec![frame]
    }

    /// `event: held`, without an id, its sentence as `description`.
    fn held(&mut self, held: &crate::domain::Held) -> Vec<Frame> {
        let mut data = held.fields();
        data["description"] = json!(held.message());
        let mut frame = self.frame("held", data);
        frame.id = None;
        vec![frame]
    }

    fn wants_finish(&self) -> bool {
        true
    }

    /// A rejoin mid-turn needs what the turn held back before its cursor (a
    /// step's calls until its `usage`, a `token_count` owed) and whether it
    /// was resumed (no follow-up actions then).
    fn wants_turn_context(&self) -> bool {
        true
    }

    fn finish(&mut self, session: &Session) -> Vec<Frame> {
        self.ending_frames(session)
    }
}

#[cfg(test)]
mod tests;
