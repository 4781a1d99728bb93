//! The llm-gateway dialect (PROTOCOLS.md §2): `event: <type>` frames whose
//! `data` repeats the type and carries `runId`, `agentId` and, for
//! subagents, `parentId`. Frames keep our `id: <seq>` so a stream can be
//! rejoined with `Last-Event-ID`.
//!
//! | canonical event | llm-gateway |
//! |---|---|
//! | `turn_started` | `harness_start {depth, maxIterations?}` |
//! | first event of a subagent | `harness_start {depth, parentId}` for that agent (no `id:`) |
//! | `text_delta` / `reasoning_delta` | `text` / `reasoning {id: "evt_<seq>", content}` |
//! | `tool_call` (sent once permitted) | `tool_call {id, name, input}` |
//! | `tool_result` | `tool_result {id, name, output}`: the result (parsed when it is a JSON object or array), `{status: "denied", reason}` or `{error}` |
//! | `relay_requested` | `relay {kind: "permission", id, toolCallId, tool, params}` |
//! | `usage` | `usage {inputTokens, outputTokens, cacheReadTokens?, cacheCreationTokens?}` |
//! | `error` | `error {message, code}` |
//! | `turn_ended` | `harness_end {reason, iterations, totalUsage}` |
//! | `step_restarted` (takeover; ours) | `step_restarted {step, discard: [ids]}` |
//!
//! `harness_end.reason` is `final` or `max_iterations` as in llm-gateway, and
//! our own `cancelled` (an explicit cancel) and `error` (the turn failed; an
//! `error` event comes just before). A subagent gets no `harness_end`: its
//! end is the parent's `tool_result` for the `agent` call named by its
//! `parentId`. Everything else (tool call fragments, whole messages, relay
//! decisions, pauses, compaction) has no llm-gateway equivalent and is
//! skipped.
//!
//! After a takeover the text the cut model call streamed is void, and
//! llm-gateway has no event that takes text back: its clients append every
//! `text`. So the restart is an event of ours, `step_restarted {step,
//! discard}`, which clients that do not know it skip like any unknown
//! event: `discard` lists the ids of the `text` and `reasoning` events of
//! the cut call that this stream sent (every event has an id of its own, so
//! the regenerated text comes with new ids). A client drops those; one
//! that rejoined mid-call drops everything the main agent streamed since
//! its last `usage` (each model call ends with one), since `discard` names
//! only what this connection sent.
//!
//! `runId` is `<sessionId>:<turn>`. A stream that starts mid-turn (a rejoin
//! with `?format=llm-gateway`) has not seen the turn's `turn_started`; until
//! it sees one (or a `resumed`), its `runId` is the session id alone.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use super::{AgentRef, Encoder, EventKind, Frame, LogEvent, TurnEndReason};
use crate::domain::ToolStatus;
use crate::domain::Usage;

/// The prefix the orchestrator puts before the reason of a denied call.
const DENIED_PREFIX: &str = "Permission denied: ";

#[derive(Default)]
pub struct LlmGatewayEncoder {
    /// The `connected` frame, sent before the first event (`POST /chat` only).
    connected: Option<Frame>,
    /// The session, once known (for `runId` in failure frames).
    session_id: Option<String>,
    /// The turn being streamed, once known.
    turn: Option<u32>,
    /// The run's iteration limit, when the stream's creator knows it.
    max_iterations: Option<u32>,
    /// Subagents already announced with a `harness_start` of their own.
    subagents: HashSet<String>,
    /// Ids of the `text` / `reasoning` events of the main agent's current
    /// model call: void if a takeover cuts it.
    call_text: Vec<String>,
}

impl LlmGatewayEncoder {
    /// The encoder of a `POST /chat` stream: it opens with `connected` and
    /// knows its run before the first event.
    pub fn for_chat(session_id: &str, turn: u32, max_iterations: u32) -> Self {
        let connected = json!({"type": "connected", "sessionId": session_id});
        Self {
            connected: Some(Frame {
                id: None,
                event: Some("connected".into()),
                data: connected.to_string(),
                retry: None,
            }),
            session_id: Some(session_id.to_string()),
            turn: Some(turn),
            max_iterations: Some(max_iterations),
            ..Self::default()
        }
    }

    fn run_id(&self) -> Value {
        match (&self.session_id, self.turn) {
            (Some(session), Some(turn)) => json!(format!("{session}:{turn}")),
            (Some(session), None) => json!(session),
            (None, _) => Value::Null,
        }
    }

    /// `data` for an event of `agent`: type, run, agent fields, then `fields`.
    fn data(&self, name: &str, agent: &AgentRef, fields: Value) -> String {
        let mut object = Map::new();
        object.insert("type".into(), json!(name));
        object.insert("runId".into(), self.run_id());
        object.insert("agentId".into(), json!(agent.agent_id));
        if let Some(parent) = &agent.parent_id {
            object.insert("parentId".into(), json!(parent));
        }
        if let Value::Object(fields) = fields {
            object.extend(fields);
        }
        Value::Object(object).to_string()
    }

    /// The event's name and own fields, or `None` when it is not shown.
    fn translate(&mut self, event: &LogEvent) -> Option<(&'static str, Value)> {
        let main = event.event.agent.parent_id.is_none();
        if main
            && matches!(
                event.event.kind,
                EventKind::TurnStarted { .. } | EventKind::Resumed { .. } | EventKind::Usage { .. }
            )
        {
            self.call_text.clear();
        }
        if main && matches!(event.event.kind, EventKind::TextDelta { .. } | EventKind::ReasoningDelta { .. }) {
            self.call_text.push(format!("evt_{}", event.seq));
        }
        let translated = match &event.event.kind {
            EventKind::TurnStarted { turn, .. } => {
                self.turn = Some(*turn);
                ("harness_start", self.harness_start(&event.event.agent))
            }
            EventKind::Resumed { turn } => {
                self.turn = Some(*turn);
                return None;
            }
            EventKind::TextDelta { text } => ("text", json!({"id": format!("evt_{}", event.seq), "content": text})),
            EventKind::ReasoningDelta { text } => {
                ("reasoning", json!({"id": format!("evt_{}", event.seq), "content": text}))
            }
            EventKind::ToolCall { tool_call_id, name, arguments } => {
                ("tool_call", json!({"id": tool_call_id, "name": name, "input": arguments}))
            }
            EventKind::ToolResult { tool_call_id, name, status, output } => {
                ("tool_result", json!({"id": tool_call_id, "name": name, "output": result_output(*status, output)}))
            }
            EventKind::RelayRequested(relay) => (
                "relay",
                json!({"kind": "permission", "id": relay.relay_id, "toolCallId": relay.tool_call_id,
                    "tool": relay.tool, "params": relay.params}),
            ),
            EventKind::Usage { usage, .. } => ("usage", usage_fields(usage)),
            EventKind::Error { code, message, retry_after_secs } => {
                let mut data = json!({"message": message, "code": code});
                if let Some(secs) = retry_after_secs {
                    data["retryAfter"] = json!(secs);
                }
                ("error", data)
            }
            EventKind::StepRestarted { step, .. } if main => {
                ("step_restarted", json!({"step": step, "discard": std::mem::take(&mut self.call_text)}))
            }
            EventKind::TurnEnded { reason, iterations, usage } => (
                "harness_end",
                json!({"reason": end_reason(*reason), "iterations": iterations, "totalUsage": usage_fields(usage)}),
            ),
            EventKind::MessageCompleted { .. }
            | EventKind::ToolCallStarted { .. }
            | EventKind::ToolCallArgs { .. }
            | EventKind::RelayDecided { .. }
            | EventKind::Paused { .. }
            | EventKind::StepRestarted { .. }
            | EventKind::CompactionStarted { .. }
            | EventKind::CompactionDone { .. } => return None,
        };
        Some(translated)
    }

    fn harness_start(&self, agent: &AgentRef) -> Value {
        let mut fields = json!({"depth": agent.depth});
        if let Some(max) = self.max_iterations {
            fields["maxIterations"] = json!(max);
        }
        fields
    }
}

impl Encoder for LlmGatewayEncoder {
    fn dialect(&self) -> &'static str {
        "llm-gateway"
    }

    fn encode(&mut self, event: &LogEvent) -> Vec<Frame> {
        let mut frames: Vec<Frame> = self.connected.take().into_iter().collect();
        self.session_id = Some(event.session_id.to_string());
        let Some((name, fields)) = self.translate(event) else { return frames };
        let agent = &event.event.agent;
        if agent.parent_id.is_some() && self.subagents.insert(agent.agent_id.clone()) {
            // No `id:`: a rejoin after it would skip the event it precedes.
            let data = self.data("harness_start", agent, self.harness_start(agent));
            frames.push(Frame::event("harness_start", data, None));
        }
        let data = self.data(name, agent, fields);
        frames.push(Frame::event(name, data, Some(event.seq.to_string())));
        frames
    }

    fn failure(&mut self, code: &str, message: &str) -> Vec<Frame> {
        let mut frames: Vec<Frame> = self.connected.take().into_iter().collect();
        let main = AgentRef { agent_id: "main".into(), parent_id: None, depth: 0 };
        let data = self.data("error", &main, json!({"message": message, "code": code}));
        frames.push(Frame::event("error", data, None));
        frames
    }
}

fn end_reason(reason: TurnEndReason) -> &'static str {
    match reason {
        TurnEndReason::Final => "final",
        TurnEndReason::MaxIterations => "max_iterations",
        TurnEndReason::Cancelled => "cancelled",
        TurnEndReason::Failed => "error",
    }
}

/// llm-gateway's usage fields; the cache counts only when there are any.
fn usage_fields(usage: &Usage) -> Value {
    let mut fields = json!({"inputTokens": usage.input_tokens, "outputTokens": usage.output_tokens});
    if usage.cache_read_tokens > 0 {
        fields["cacheReadTokens"] = json!(usage.cache_read_tokens);
    }
    if usage.cache_write_tokens > 0 {
        fields["cacheCreationTokens"] = json!(usage.cache_write_tokens);
    }
    fields
}

/// A tool result as llm-gateway shows it. A successful output that is a
/// JSON object or array is sent parsed; any other text (even `42` or
/// `true`) stays the string the tool returned.
fn result_output(status: ToolStatus, output: &Value) -> Value {
    let text = output.as_str();
    match status {
        ToolStatus::Denied => {
            let reason =
                text.map(|t| json!(t.strip_prefix(DENIED_PREFIX).unwrap_or(t))).unwrap_or_else(|| output.clone());
            json!({"status": "denied", "reason": reason})
        }
        ToolStatus::Error => json!({"error": output}),
        ToolStatus::Success => match text.and_then(|t| serde_json::from_str::<Value>(t).ok()) {
            Some(parsed @ (Value::Object(_) | Value::Array(_))) => parsed,
            _ => output.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Event;

    fn event(seq: u64, kind: EventKind, agent: AgentRef) -> LogEvent {
        LogEvent { seq, session_id: "s1".into(), event: Event { kind, agent, ts: 1 } }
    }

    fn main_agent() -> AgentRef {
        AgentRef { agent_id: "main".into(), parent_id: None, depth: 0 }
    }

    fn data(frame: &Frame) -> Value {
        serde_json::from_str(&frame.data).unwrap()
    }

    #[test]
    fn a_chat_stream_opens_with_connected_then_harness_start_with_the_run() {
        let mut encoder = LlmGatewayEncoder::for_chat("s1", 1, 7);
        let frames = encoder.encode(&event(1, EventKind::TurnStarted { turn: 1, model: "m".into() }, main_agent()));
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].event.as_deref(), Some("connected"));
        assert_eq!(frames[0].id, None);
        assert_eq!(data(&frames[0]), json!({"type": "connected", "sessionId": "s1"}));
        assert_eq!(frames[1].id.as_deref(), Some("1"));
        assert_eq!(
            data(&frames[1]),
            json!({"type": "harness_start", "runId": "s1:1", "agentId": "main", "depth": 0, "maxIterations": 7})
        );
    }

    #[test]
    fn tool_results_are_parsed_json_a_denial_or_an_error() {
        let parsed = result_output(ToolStatus::Success, &json!(r#"{"a":1}"#));
        assert_eq!(parsed, json!({"a": 1}));
        assert_eq!(result_output(ToolStatus::Success, &json!("42")), json!("42"));
        assert_eq!(result_output(ToolStatus::Success, &json!("plain")), json!("plain"));
        let denied = result_output(ToolStatus::Denied, &json!("Permission denied: not today"));
        assert_eq!(denied, json!({"status": "denied", "reason": "not today"}));
        assert_eq!(result_output(ToolStatus::Error, &json!("HTTP 500")), json!({"error": "HTTP 500"}));
    }

    #[test]
    fn a_subagent_is_announced_once_and_its_events_carry_its_parent() {
        let mut encoder = LlmGatewayEncoder::default();
        encoder.encode(&event(1, EventKind::TurnStarted { turn: 3, model: "m".into() }, main_agent()));
        let sub = AgentRef { agent_id: "agent_1".into(), parent_id: Some("call_1".into()), depth: 1 };
        let frames = encoder.encode(&event(5, EventKind::TextDelta { text: "hi".into() }, sub.clone()));
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].id, None);
        assert_eq!(data(&frames[0])["type"], "harness_start");
        assert_eq!(data(&frames[0])["parentId"], "call_1");
        assert_eq!(data(&frames[0])["depth"], 1);
        let text = data(&frames[1]);
        assert_eq!(
            text,
            json!({"type": "text", "runId": "s1:3", "id": "evt_5", "agentId": "agent_1",
            "parentId": "call_1", "content": "hi"})
        );
        let again = encoder.encode(&event(6, EventKind::TextDelta { text: "!".into() }, sub));
        assert_eq!(again.len(), 1);
    }

    #[test]
    fn a_restart_names_the_text_events_it_voids_and_the_regenerated_text_has_new_ids() {
        let mut encoder = LlmGatewayEncoder::default();
        let frames: Vec<Frame> = (crate::protocol::testing::restarted_turn(1).into_iter().enumerate())
            .flat_map(|(i, kind)| encoder.encode(&event(i as u64 + 1, kind, main_agent())))
            .collect();
        let restart = frames.iter().find(|f| f.event.as_deref() == Some("step_restarted")).unwrap();
        assert_eq!(restart.id.as_deref(), Some("4"));
        assert_eq!(
            data(restart),
            json!({"type": "step_restarted", "runId": "s1:1", "agentId": "main", "step": 1,
                   "discard": ["evt_2", "evt_3"]})
        );
        // What a client that honours `discard` ends with.
        let mut text: Vec<(Value, String)> = Vec::new();
        for frame in frames.iter().map(data) {
            match frame["type"].as_str().unwrap() {
                "text" => text.push((frame["id"].clone(), frame["content"].as_str().unwrap().to_string())),
                "step_restarted" => {
                    let discard = frame["discard"].as_array().unwrap();
                    text.retain(|(id, _)| !discard.contains(id));
                }
                _ => {}
            }
        }
        let answer: String = text.into_iter().map(|(_, content)| content).collect();
        assert_eq!(answer, crate::protocol::testing::RESTARTED_ANSWER);
    }

    #[test]
    fn a_restart_voids_only_the_cut_calls_text() {
        let mut encoder = LlmGatewayEncoder::default();
        let usage = Usage { input_tokens: 1, output_tokens: 1, ..Usage::default() };
        encoder.encode(&event(1, EventKind::TextDelta { text: "done".into() }, main_agent()));
        encoder.encode(&event(2, EventKind::Usage { usage, total: usage }, main_agent()));
        let sub = AgentRef { agent_id: "agent_1".into(), parent_id: Some("call_1".into()), depth: 1 };
        encoder.encode(&event(3, EventKind::TextDelta { text: "inner".into() }, sub));
        encoder.encode(&event(4, EventKind::ReasoningDelta { text: "hm".into() }, main_agent()));
        let frames = encoder.encode(&event(5, EventKind::StepRestarted { step: 2, replica: "b".into() }, main_agent()));
        assert_eq!(data(&frames[0])["discard"], json!(["evt_4"]));
    }

    #[test]
    fn events_without_an_equivalent_are_skipped_and_cache_usage_is_named() {
        let mut encoder = LlmGatewayEncoder::default();
        let skipped = EventKind::ToolCallArgs { tool_call_id: "c".into(), delta: "{".into() };
        assert!(encoder.encode(&event(2, skipped, main_agent())).is_empty());
        let usage = Usage { input_tokens: 5, output_tokens: 2, cache_read_tokens: 3, cache_write_tokens: 0 };
        let ended = EventKind::TurnEnded { reason: TurnEndReason::Failed, iterations: 1, usage };
        let frame = &encoder.encode(&event(3, ended, main_agent()))[0];
        assert_eq!(
            data(frame),
            json!({"type": "harness_end", "runId": "s1", "agentId": "main", "reason": "error", "iterations": 1,
                "totalUsage": {"inputTokens": 5, "outputTokens": 2, "cacheReadTokens": 3}})
        );
    }
}
