//! AG-UI (docs/protocols.md §6), protocol 1.0 as `@ag-ui/client`'s `HttpAgent`
//! reads it: `data: <event>` frames (with our `id: <seq>`, which it
//! ignores), LF line ends, no `[DONE]`. Every event carries `timestamp`
//! (integer milliseconds).
//!
//! | canonical event | AG-UI |
//! |---|---|
//! | the stream's first event | `RUN_STARTED {threadId, runId}`; a run that continues its thread, and a client joining a running thread, get more first ([`restate`]) |
//! | the first output of a model call (`text_delta`, `reasoning_delta`, `tool_call_started`, …, or its `usage`) | `STEP_STARTED {stepName: "model"}` ([`steps`]) |
//! | `text_delta` | `TEXT_MESSAGE_START {messageId, role: "assistant"}` once per model call, `TEXT_MESSAGE_CONTENT {messageId, delta}` |
//! | `reasoning_delta` | `REASONING_MESSAGE_START {messageId, role: "reasoning"}` once, `REASONING_MESSAGE_CONTENT` |
//! | `tool_call_started` / `tool_call_args` | `TOOL_CALL_START {toolCallId, toolCallName, parentMessageId}` / `TOOL_CALL_ARGS {toolCallId, delta}` |
//! | `usage` (the end of a model call) | `TEXT_MESSAGE_END`, `REASONING_MESSAGE_END`, `TOOL_CALL_END` for what is open, `STEP_FINISHED {stepName: "model"}` |
//! | `tool_call` of a server tool (about to run) | `STEP_STARTED {stepName: <tool>}` (frontend tools' calls: none) |
//! | `state_updated` (a tool changed the state) | `STATE_DELTA {delta}` (the JSON Patch), inside the tool's step |
//! | `tool_result` | `TOOL_CALL_RESULT {messageId, toolCallId, content, role: "tool"}` (not for results the client itself sent in this request), `STEP_FINISHED` of its step |
//! | `state_replaced` (the run brought a state) | `STATE_SNAPSHOT {snapshot}` |
//! | `relay_requested` (a live relay) | `CUSTOM {name: "relay_requested", value: {relayId, toolCallId, tool, params}}` |
//! | `paused` with approvals pending | `RUN_FINISHED {outcome: {type: "interrupt", interrupts: [{id: relay id, reason: "tool_approval", toolCallId, message, responseSchema}]}}`: the next run answers with `resume` |
//! | `paused` for frontend tools only | `RUN_FINISHED {outcome: {type: "success", pendingToolCallIds}}`: the next run carries `role: "tool"` messages |
//! | `step_restarted` (takeover) | `TEXT_MESSAGE_END` / `TOOL_CALL_END` for what the cut step left open, `STEP_FINISHED` of its step, `CUSTOM {name: "step_restarted", value: {step}}`, `MESSAGES_SNAPSHOT {messages}`: the stored conversation up to the cut step, without its void output; the regenerated step is a new message |
//! | `error` | `RUN_ERROR {message, code}` (nothing follows it) |
//! | `turn_ended` | `RUN_FINISHED {outcome: success, or cancelled, usage: [{model, inputTokens, outputTokens, totalTokens}]}` |
//!
//! The client's `verifyEvents` is strict, so the encoder keeps its rules:
//! `RUN_STARTED` first; nothing after `RUN_FINISHED` or `RUN_ERROR`; every
//! message, tool call and step that was opened is closed before
//! `RUN_FINISHED` (a pause or the turn's end finishes the steps still
//! open). One model call's text and tool calls share one assistant message
//! id, so the client's reducer puts them in one message. A call the
//! client's history does not hold and this stream did not open is opened
//! and closed before its result. Not shown: compaction, relay decisions,
//! and subagents' own events (the parent's `agent` call and result stand
//! for them).
//!
//! After a takeover, `MESSAGES_SNAPSHOT` is the client's reset: its reducer
//! keeps the messages the snapshot lists (updated), drops the others and
//! appends the listed ones it lacks, so the partial message of the cut step
//! goes and the regenerated text comes in a new message (a new
//! `TEXT_MESSAGE_START`). The snapshot is the stored conversation cut where
//! the step began ([`snapshot`]), in AG-UI shapes with ids of its own
//! (`history-<n>`): the client's earlier messages come back with these ids
//! and the text the store kept (what a new thread was seeded with). Two
//! things it cannot undo: a reasoning message of the cut step stays (the
//! client keeps reasoning messages when a snapshot lists none, and the
//! store keeps no reasoning), and a turn compacted away since (a replay of
//! an old turn) gets no snapshot, only the `CUSTOM` event. Streams of
//! `POST /v1/ag-ui` rarely see a restart: the replica that runs the turn is
//! the one streaming it, so its death ends the stream too; readers of
//! `GET /v1/sessions/{id}/events?format=ag-ui` (a rejoin, a replay) do.

mod restate;
mod snapshot;
mod steps;

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use self::{restate::Restatement, steps::Steps};
use super::{Encoder, EventKind, Frame, LogEvent, PendingCall, PendingRelay, TurnEndReason, json_text};
use crate::domain::{Session, Usage};

#[derive(Default)]
pub struct AgUiEncoder {
    /// The request's thread and run; for a native stream, the session and
    /// `<session>-<turn>`.
    thread_id: Option<String>,
    run_id: Option<String>,
    started: bool,
    /// `RUN_FINISHED` or `RUN_ERROR` was sent: nothing may follow.
    over: bool,
    /// Calls the client's history holds: never opened again.
    known_calls: HashSet<String>,
    /// Calls whose results the client sent in this request: not echoed.
    answered: HashSet<String>,
    /// Calls this stream opened.
    opened: HashSet<String>,
    /// Tool calls opened and not yet ended.
    open_calls: Vec<String>,
    /// This model call's assistant message id.
    message: Option<String>,
    text_open: bool,
    /// The open reasoning message id.
    reasoning: Option<String>,
    model: Option<String>,
    /// The turn of the events, once one named it (for a restart's snapshot).
    turn: Option<u32>,
    /// The frontend tools' names: the client runs their calls (no step).
    frontend: HashSet<String>,
    steps: Steps,
    /// What the stream restates before its first event.
    restatement: Option<Restatement>,
}

/// An AG-UI event: `type`, the fields, `timestamp`.
fn event(ts: u64, kind: &str, fields: Value) -> Value {
    let mut object = Map::new();
    object.insert("type".into(), json!(kind));
    if let Value::Object(fields) = fields {
        object.extend(fields);
    }
    object.insert("timestamp".into(), json!(ts));
    Value::Object(object)
}

impl AgUiEncoder {
    /// The stream of run `run_id` on thread `thread_id`, whose history
    /// holds `known_calls` and answers `answered` in this request.
    pub fn for_run(thread_id: String, run_id: String, known_calls: HashSet<String>, answered: HashSet<String>) -> Self {
        Self { thread_id: Some(thread_id), run_id: Some(run_id), known_calls, answered, ..Self::default() }
    }

    /// The run's frontend tools, by name: their calls get no step.
    pub fn frontend_tools(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.frontend = names.into_iter().collect();
        self
    }

    fn run_fields(&self) -> Value {
        json!({"threadId": self.thread_id, "runId": self.run_id})
    }

    /// The model call's assistant message id.
    fn message_id(&mut self, seq: u64) -> String {
        self.message.get_or_insert_with(|| format!("msg-{seq}")).clone()
    }

    /// Opens the model step, unless it is open.
    fn start_model_step(&mut self, ts: u64, out: &mut Vec<Value>) {
        if let Some(name) = self.steps.start_model() {
            out.push(event(ts, "STEP_STARTED", json!({"stepName": name})));
        }
    }

    fn start_tool_step(&mut self, ts: u64, call_id: &str, tool: &str, out: &mut Vec<Value>) {
        if let Some(name) = self.steps.start_tool(call_id, tool) {
            out.push(event(ts, "STEP_STARTED", json!({"stepName": name})));
        }
    }

    fn finish_steps(&mut self, ts: u64, names: impl IntoIterator<Item = String>, out: &mut Vec<Value>) {
        out.extend(names.into_iter().map(|name| event(ts, "STEP_FINISHED", json!({"stepName": name}))));
    }

    /// Ends what the model call left open, then its step.
    fn close(&mut self, ts: u64, out: &mut Vec<Value>) {
        if let Some(id) = self.reasoning.take() {
            out.push(event(ts, "REASONING_MESSAGE_END", json!({"messageId": id})));
        }
        if std::mem::take(&mut self.text_open)
            && let Some(id) = &self.message
        {
            out.push(event(ts, "TEXT_MESSAGE_END", json!({"messageId": id})));
        }
        for id in std::mem::take(&mut self.open_calls) {
            out.push(event(ts, "TOOL_CALL_END", json!({"toolCallId": id})));
        }
        self.message = None;
        let model = self.steps.finish_model();
        self.finish_steps(ts, model, out);
    }

    /// Opens and closes a call the client does not hold, with its arguments.
    fn whole_call(&mut self, seq: u64, ts: u64, id: &str, name: &str, arguments: &Value, out: &mut Vec<Value>) {
        if self.known_calls.contains(id) || !self.opened.insert(id.to_string()) {
            return;
        }
        let parent = format!("msg-{seq}");
        out.push(event(
            ts,
            "TOOL_CALL_START",
            json!({"toolCallId": id, "toolCallName": name, "parentMessageId": parent}),
        ));
        out.push(event(ts, "TOOL_CALL_ARGS", json!({"toolCallId": id, "delta": arguments.to_string()})));
        out.push(event(ts, "TOOL_CALL_END", json!({"toolCallId": id})));
    }

    fn relay_requested(&self, ts: u64, relay: &PendingRelay) -> Value {
        event(
            ts,
            "CUSTOM",
            json!({"name": "relay_requested", "value": {"relayId": relay.relay_id,
                   "toolCallId": relay.tool_call_id, "tool": relay.tool, "params": relay.params}}),
        )
    }

    fn paused(&mut self, seq: u64, ts: u64, relays: &[PendingRelay], calls: &[PendingCall], out: &mut Vec<Value>) {
        self.close(ts, out);
        for relay in relays {
            self.whole_call(seq, ts, &relay.tool_call_id, &relay.tool, &relay.params, out);
        }
        for call in calls {
            self.whole_call(seq, ts, &call.tool_call_id, &call.tool, &call.arguments, out);
        }
        let open = self.steps.finish_all();
        self.finish_steps(ts, open, out);
        let outcome = if relays.is_empty() {
            let pending: Vec<&str> = calls.iter().map(|c| c.tool_call_id.as_str()).collect();
            json!({"type": "success", "pendingToolCallIds": pending})
        } else {
            let interrupts: Vec<Value> = relays
                .iter()
                .map(|r| {
                    json!({"id": r.relay_id, "reason": "tool_approval", "toolCallId": r.tool_call_id,
                           "message": format!("{} needs approval", r.tool),
                           "responseSchema": {"type": "object", "required": ["approved"],
                               "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}}}})
                })
                .collect();
            json!({"type": "interrupt", "interrupts": interrupts})
        };
        let mut fields = self.run_fields();
        fields["outcome"] = outcome;
        out.push(event(ts, "RUN_FINISHED", fields));
        self.over = true;
    }

    /// After a takeover: what the cut step opened is closed, and with the
    /// stored `session`, the conversation before the step replaces the
    /// client's.
    fn restart_step(&mut self, ts: u64, step: u32, session: Option<&Session>, out: &mut Vec<Value>) {
        self.close(ts, out);
        out.push(event(ts, "CUSTOM", json!({"name": "step_restarted", "value": {"step": step}})));
        let Some(session) = session else { return };
        let turns_since = session.turn().saturating_sub(self.turn.unwrap_or(session.turn()));
        let Some(messages) = session.history().and_then(|h| snapshot::before_step(h, turns_since, step)) else {
            return;
        };
        // The calls the client now holds are not opened again.
        self.known_calls.extend(messages.iter().flat_map(|m| m.tool_calls.iter().map(|c| c.id.clone())));
        out.push(event(ts, "MESSAGES_SNAPSHOT", json!({"messages": snapshot::render(messages)})));
    }

    fn translate(&mut self, event_: &LogEvent, session: Option<&Session>, out: &mut Vec<Value>) {
        let (seq, ts) = (event_.seq, event_.event.ts);
        match &event_.event.kind {
            EventKind::TurnStarted { model, turn } => {
                self.model = Some(model.clone());
                self.turn = Some(*turn);
            }
            EventKind::Resumed { turn } => self.turn = Some(*turn),
            EventKind::TextDelta { text } => {
                self.start_model_step(ts, out);
                let id = self.message_id(seq);
                if !std::mem::replace(&mut self.text_open, true) {
                    out.push(event(ts, "TEXT_MESSAGE_START", json!({"messageId": id, "role": "assistant"})));
                }
                out.push(event(ts, "TEXT_MESSAGE_CONTENT", json!({"messageId": id, "delta": text})));
            }
            EventKind::ReasoningDelta { text } => {
                self.start_model_step(ts, out);
                let id = match &self.reasoning {
                    Some(id) => id.clone(),
                    None => {
                        let id = format!("reasoning-{seq}");
                        self.reasoning = Some(id.clone());
                        out.push(event(ts, "REASONING_MESSAGE_START", json!({"messageId": id, "role": "reasoning"})));
                        id
                    }
                };
                out.push(event(ts, "REASONING_MESSAGE_CONTENT", json!({"messageId": id, "delta": text})));
            }
            EventKind::ToolCallStarted { tool_call_id, name } => {
                self.start_model_step(ts, out);
                let parent = self.message_id(seq);
                self.opened.insert(tool_call_id.clone());
                self.open_calls.push(tool_call_id.clone());
                out.push(event(
                    ts,
                    "TOOL_CALL_START",
                    json!({"toolCallId": tool_call_id, "toolCallName": name, "parentMessageId": parent}),
                ));
            }
            EventKind::ToolCallArgs { tool_call_id, delta } if self.open_calls.contains(tool_call_id) => {
                out.push(event(ts, "TOOL_CALL_ARGS", json!({"toolCallId": tool_call_id, "delta": delta})));
            }
            EventKind::Usage { .. } => {
                // A call that streamed nothing still was a step.
                self.start_model_step(ts, out);
                self.close(ts, out);
            }
            EventKind::ToolCall { tool_call_id, name, arguments } => {
                self.whole_call(seq, ts, tool_call_id, name, arguments, out);
                if !self.frontend.contains(name) {
                    self.start_tool_step(ts, tool_call_id, name, out);
                }
            }
            EventKind::ToolResult { tool_call_id, name, output, .. } => {
                if !self.answered.contains(tool_call_id) {
                    self.whole_call(seq, ts, tool_call_id, name, &json!({}), out);
                    let content = match output {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    };
                    out.push(event(
                        ts,
                        "TOOL_CALL_RESULT",
                        json!({"messageId": format!("result-{tool_call_id}"), "toolCallId": tool_call_id,
                               "content": content, "role": "tool"}),
                    ));
                }
                let step = self.steps.finish_tool(tool_call_id);
                self.finish_steps(ts, step, out);
            }
            EventKind::StateReplaced { state } => {
                out.push(event(ts, "STATE_SNAPSHOT", json!({"snapshot": state})));
            }
            EventKind::StateUpdated { delta } => out.push(event(ts, "STATE_DELTA", json!({"delta": delta}))),
            // AG-UI has no event for a tool's live output.
            EventKind::ToolProgress { .. } => {}
            // rlm mode is llm-gateway's; AG-UI has no REPL events.
            EventKind::ReplInput { .. }
            | EventKind::ReplProgress { .. }
            | EventKind::ReplOutput { .. }
            | EventKind::ReplError { .. }
            | EventKind::AgentEnded { .. } => {}
            EventKind::RelayRequested(relay) => out.push(self.relay_requested(ts, relay)),
            EventKind::Paused { pending_relays, pending_calls } => {
                self.paused(seq, ts, pending_relays, pending_calls, out);
            }
            EventKind::StepRestarted { step, .. } => self.restart_step(ts, *step, session, out),
            EventKind::Error { code, message, .. } => {
                out.push(event(ts, "RUN_ERROR", json!({"message": message, "code": code})));
                self.over = true;
            }
            EventKind::TurnEnded { reason, usage, .. } => {
                self.close(ts, out);
                let open = self.steps.finish_all();
                self.finish_steps(ts, open, out);
                if *reason == TurnEndReason::Failed {
                    out.push(event(ts, "RUN_ERROR", json!({"message": "the turn failed", "code": "failed"})));
                } else {
                    let outcome = if *reason == TurnEndReason::Cancelled { "cancelled" } else { "success" };
                    let mut fields = self.run_fields();
                    fields["outcome"] = json!({"type": outcome});
                    fields["usage"] = json!([self.usage(usage)]);
                    out.push(event(ts, "RUN_FINISHED", fields));
                }
                self.over = true;
            }
            EventKind::ToolCallArgs { .. }
            | EventKind::MessageCompleted { .. }
            | EventKind::RelayDecided { .. }
            | EventKind::CompactionStarted { .. }
            | EventKind::CompactionDone { .. }
            // AG-UI clients do not regenerate: a dropped answer is the AI SDK's.
            | EventKind::AnswerDropped { .. }
            // Titles are not part of a run.
            | EventKind::TitleUpdated { .. } => {}
        }
    }

    fn usage(&self, usage: &Usage) -> Value {
        let mut entry = json!({"inputTokens": usage.input_tokens, "outputTokens": usage.output_tokens,
                               "totalTokens": usage.input_tokens + usage.output_tokens});
        if let Some(model) = &self.model {
            entry["model"] = json!(model);
        }
        if usage.cache_read_tokens > 0 {
            entry["cachedInputTokens"] = json!(usage.cache_read_tokens);
        }
        entry
    }

    /// The frames of one event; `session` is the stored session given with
    /// a `step_restarted`.
    fn frames(&mut self, event_: &LogEvent, session: Option<&Session>) -> Vec<Frame> {
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            self.thread_id.get_or_insert_with(|| event_.session_id.to_string());
            if self.run_id.is_none() {
                self.run_id = Some(match &event_.event.kind {
                    EventKind::TurnStarted { turn, .. } | EventKind::Resumed { turn } => {
                        format!("{}-{turn}", event_.session_id)
                    }
                    _ => event_.session_id.to_string(),
                });
            }
            out.push(event(event_.event.ts, "RUN_STARTED", self.run_fields()));
        }
        if !self.over && event_.event.agent.parent_id.is_none() {
            self.translate(event_, session, &mut out);
        }
        let id = event_.seq.to_string();
        out.into_iter()
            .map(|data| Frame { id: Some(id.clone()), event: None, data: json_text(&data), retry: None })
            .collect()
    }
}

impl Encoder for AgUiEncoder {
    fn dialect(&self) -> &'static str {
        "ag-ui"
    }

    fn opening(&mut self) -> Vec<Frame> {
        self.restatement_frames()
    }

    fn encode(&mut self, event: &LogEvent) -> Vec<Frame> {
        self.frames(event, None)
    }

    fn restates_on_join(&self) -> bool {
        true
    }

    fn joined(&mut self, session: &Session) {
        self.join(session);
    }

    fn wants_history_on_restart(&self) -> bool {
        true
    }

    fn restarted(&mut self, event: &LogEvent, session: &Session) -> Vec<Frame> {
        self.frames(event, Some(session))
    }

    fn failure(&mut self, code: &str, message: &str) -> Vec<Frame> {
        if std::mem::replace(&mut self.over, true) {
            return Vec::new();
        }
        let now = crate::domain::now_ms();
        vec![Frame::data(event(now, "RUN_ERROR", json!({"message": message, "code": code})).to_string())]
    }

    /// `CUSTOM {name: "held", value}`, while the run is open.
    fn held(&mut self, held: &crate::domain::Held) -> Vec<Frame> {
        if self.over {
            return Vec::new();
        }
        let mut value = held.fields();
        value["message"] = json!(held.message());
        let now = crate::domain::now_ms();
        vec![Frame::data(event(now, "CUSTOM", json!({"name": "held", "value": value})).to_string())]
    }
}

#[cfg(test)]
mod run_tests;
#[cfg(test)]
mod tests;
