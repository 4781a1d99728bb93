//! The llm-gateway dialect (docs/protocols.md §2): `event: <type>` frames whose
//! `data` repeats the type and carries `runId`, `agentId` and, for
//! subagents, `parentId`. Frames keep our `id: <seq>` so a stream can be
//! rejoined with `Last-Event-ID`. `summary.rs` renders `POST /summarize`,
//! which is not a session.
//!
//! | canonical event | llm-gateway |
//! |---|---|
//! | `turn_started` | `harness_start {depth, maxIterations?}` |
//! | first event of a subagent | `harness_start {depth, parentId}` for that agent's run (no `id:`) |
//! | `text_delta` / `reasoning_delta` | `text` / `reasoning {id, content}`, one `id` per block (`blocks.rs`) |
//! | `tool_call` (sent once permitted) | `tool_call {id, name, input}` |
//! | `tool_result` | `tool_result {id, name, output}`: the result (parsed when it is a JSON object or array), `{status: "denied", reason}` or `{error}`; the workspace tools' `{context, result?}` as it is, whatever the status |
//! | `tool_progress` | `tool_progress {id: "<toolCallId>:progress", toolCallId, name, content: {channel: "stdout" \| "stderr", data}}` (the shape of the RLM's exec progress) |
//! | `tool_result` of an `agent` call | first `harness_end {reason}` of each subagent run it started (no `id:`) |
//! | `relay_requested` | `relay {kind: "permission", id, toolCallId, tool, params}` |
//! | `usage` | `usage {inputTokens, outputTokens, cacheReadTokens?, cacheCreationTokens?}` |
//! | `error` | `error {message, code}` |
//! | `turn_ended` | `harness_end {reason, iterations, totalUsage}` |
//! | `step_restarted` (takeover; ours) | `step_restarted {step, discard: [ids]}` |
//! | `repl_input` / `repl_progress` / `repl_output` (rlm) | the same, camelCased |
//! | `repl_error` (rlm: a reply without a runnable cell) | `error {error, message}`; the loop goes on |
//! | `agent_ended` (an rlm `llm_query` child) | `harness_end {reason, iterations, totalUsage}` of its run |
//!
//! `harness_end.reason` is `final` or `max_iterations` as in llm-gateway, and
//! our own `cancelled` (an explicit cancel) and `error` (the turn failed; an
//! `error` event comes just before). A subagent's run ends when the parent's
//! `tool_result` for its `agent` call arrives: `final`, or `error` when the
//! call failed. Everything else (tool call fragments, whole messages, relay
//! decisions, pauses, compaction) has no llm-gateway equivalent and is
//! skipped.
//!
//! Runs: the main agent's is `<sessionId>:<turn>`, a subagent's
//! `<sessionId>:<turn>:<agentId>` with `parentId` the spawning `agent`
//! call's id (llm-gateway's clients draw a subagent for a new `runId` that
//! has a `parentId`, hung under the event whose id is that `parentId`: the
//! `tool_call`).
//!
//! After a takeover the text the cut model call streamed is void, and
//! llm-gateway has no event that takes text back: its clients append every
//! `text`. So the restart is an event of ours, `step_restarted {step,
//! discard}`, which clients that do not know it skip like any unknown
//! event: `discard` lists the ids of the cut call's `text` and `reasoning`
//! blocks; the regenerated call opens blocks with new ids.
//!
//! A stream that starts mid-turn (a rejoin with `?format=llm-gateway`) asks
//! for the turn's context ([`Encoder::wants_turn_context`]): the events of
//! the turn before its cursor pass through [`Encoder::context`] first, so
//! the `runId`, the block ids, the subagents announced and a later
//! `discard` are the same as on the stream it rejoins. A cursor in an
//! earlier turn gets no context for that turn's tail: its `runId` is the
//! session id alone until the next `turn_started`, and a block it joins
//! mid-way takes the id of the first delta it sees.

mod blocks;
pub mod summary;
#[cfg(test)]
mod tests;

use std::{borrow::Cow, collections::HashMap};

use serde_json::{Map, Value, json};

use self::blocks::{BlockKind, Blocks};
use super::{AgentRef, Encoder, EventKind, Frame, LogEvent, TurnEndReason};
use crate::domain::{ToolStatus, Usage};

/// The prefix the orchestrator puts before the reason of a denied call.
const DENIED_PREFIX: &str = "Permission denied: ";

/// The tool whose calls start subagents (see `orchestrator/subagent.rs`).
const AGENT_TOOL: &str = "agent";

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
    /// Subagents announced with a `harness_start` and not yet ended: agent
    /// id → the subagent as its events name it.
    subagents: HashMap<String, AgentRef>,
    blocks: Blocks,
    /// The main agent's run id as last made, with the turn it was made for
    /// (of `session_id`: [`Self::set_session`] forgets it).
    main_run: Option<(Option<u32>, String)>,
}

/// What one event becomes: frames before its own (a subagent's start or
/// end), and its own name and fields, if it is shown.
#[derive(Default)]
struct Translated {
    before: Vec<(&'static str, AgentRef, Value)>,
    shown: Option<(&'static str, Value)>,
}

impl LlmGatewayEncoder {
    /// The encoder of a `POST /chat` stream: it opens with `connected` and
    /// knows its run before the first event.
    pub fn for_chat(session_id: &str, turn: u32, max_iterations: u32) -> Self {
        let connected = json!({"type": "connected", "sessionId": session_id});
        Self {
            connected: Some(Frame::event("connected", super::json_text(&connected), None)),
            session_id: Some(session_id.to_string()),
            turn: Some(turn),
            max_iterations: Some(max_iterations),
            ..Self::default()
        }
    }

    /// The run `agent`'s events belong to (see the module docs).
    fn run_id(&self, agent: &AgentRef) -> Value {
        self.run(agent).map_or(Value::Null, Value::String)
    }

    /// The run `agent`'s events belong to (`None` before any event).
    fn run(&self, agent: &AgentRef) -> Option<String> {
        let session = self.session_id.as_ref()?;
        // Plain copies: a few runs are named per chat.
        let run = match self.turn {
            Some(turn) => [session, ":", itoa::Buffer::new().format(turn)].concat(),
            None => session.clone(),
        };
        Some(match agent.parent_id {
            None => run,
            Some(_) => [&*run, ":", &agent.agent_id].concat(),
        })
    }

    /// Notes the session the events are of; the main run's id made for
    /// another goes with it.
    fn set_session(&mut self, id: &str) {
        if self.session_id.as_deref() != Some(id) {
            self.session_id = Some(id.to_string());
            self.main_run = None;
        }
    }

    /// `data` for an event of `agent`: type, run, agent fields, then `fields`.
    fn data(&self, name: &str, agent: &AgentRef, fields: Value) -> String {
        let mut object = Map::new();
        object.insert("type".into(), json!(name));
        object.insert("runId".into(), self.run_id(agent));
        object.insert("agentId".into(), json!(agent.agent_id));
        if let Some(parent) = &agent.parent_id {
            object.insert("parentId".into(), json!(parent));
        }
        if let Value::Object(fields) = fields {
            object.extend(fields);
        }
        super::json_text(&Value::Object(object))
    }

    /// A text or reasoning delta, the most frequent frames by far, written
    /// in one go: the same bytes as [`Self::data`] makes of them (keys in
    /// its sorted order), without building a JSON object per token. `None`
    /// for any other event.
    fn delta(&mut self, event: &LogEvent) -> Option<Frame> {
        let (name, kind, content) = match &event.event.kind {
            EventKind::TextDelta { text } => ("text", BlockKind::Text, text),
            EventKind::ReasoningDelta { text } => ("reasoning", BlockKind::Reasoning, text),
            _ => return None,
        };
        let agent = &event.event.agent;
        // A subagent's first shown event opens its run first.
        if agent.parent_id.is_some() && !self.subagents.contains_key(&agent.agent_id) {
            return None;
        }
        self.set_session(&event.session_id);
        let run_id = match agent.parent_id {
            None => {
                if self.main_run.as_ref().is_none_or(|(turn, _)| *turn != self.turn) {
                    self.main_run = Some((self.turn, self.run(agent)?));
                }
                Cow::Borrowed(self.main_run.as_ref().map(|(_, run)| run.as_str())?)
            }
            Some(_) => Cow::Owned(self.run(agent)?),
        };
        let id = self.blocks.id(&agent.agent_id, kind, event.seq);
        // Written directly: the keys are constants in their sorted order,
        // only the values need escaping (serde's struct serializer escaped
        // every key too). Sized for the whole frame at once.
        let mut data = Vec::with_capacity(content.len() + run_id.len() + id.len() + 96);
        let mut field = |key: &[u8], value: &str| {
            data.extend_from_slice(key);
            serde_json::to_writer(&mut data, value).ok()
        };
        field(b"{\"agentId\":", &agent.agent_id)?;
        field(b",\"content\":", content)?;
        field(b",\"id\":", id)?;
        if let Some(parent) = &agent.parent_id {
            field(b",\"parentId\":", parent)?;
        }
        field(b",\"runId\":", &run_id)?;
        field(b",\"type\":", name)?;
        data.push(b'}');
        // serde_json writes UTF-8 only.
        let data = String::from_utf8(data).ok()?;
        Some(Frame::event(name, data, Some(itoa::Buffer::new().format(event.seq).to_string())))
    }

    /// Follows `event` (turn, blocks, subagents) and says what it becomes.
    fn translate(&mut self, event: &LogEvent) -> Translated {
        self.set_session(&event.session_id);
        let agent = &event.event.agent;
        let main = agent.parent_id.is_none();
        let mut translated = Translated::default();
        let shown = match &event.event.kind {
            EventKind::TurnStarted { turn, .. } => {
                self.turn = Some(*turn);
                self.blocks.clear();
                self.subagents.clear();
                Some(("harness_start", self.harness_start(agent)))
            }
            EventKind::Resumed { turn } => {
                self.turn = Some(*turn);
                self.blocks.clear();
                None
            }
            EventKind::TextDelta { text } => {
                let id = self.blocks.id(&agent.agent_id, BlockKind::Text, event.seq);
                Some(("text", json!({"id": id, "content": text})))
            }
            EventKind::ReasoningDelta { text } => {
                let id = self.blocks.id(&agent.agent_id, BlockKind::Reasoning, event.seq);
                Some(("reasoning", json!({"id": id, "content": text})))
            }
            EventKind::MessageCompleted { .. } => {
                self.blocks.end(&agent.agent_id);
                None
            }
            EventKind::Usage { usage, .. } => {
                self.blocks.end(&agent.agent_id);
                Some(("usage", usage_fields(usage)))
            }
            EventKind::ToolCall { tool_call_id, name, arguments } => {
                Some(("tool_call", json!({"id": tool_call_id, "name": name, "input": arguments})))
            }
            EventKind::ToolResult { tool_call_id, name, status, output } => {
                if name == AGENT_TOOL {
                    translated.before = self.end_subagents(tool_call_id, *status);
                }
                let output = result_output(*status, output);
                Some(("tool_result", json!({"id": tool_call_id, "name": name, "output": output})))
            }
            EventKind::ToolProgress { tool_call_id, name, stream, text } => Some((
                "tool_progress",
                json!({"id": format!("{tool_call_id}:progress"), "toolCallId": tool_call_id, "name": name,
                    "content": {"channel": stream.as_str(), "data": text}}),
            )),
            EventKind::RelayRequested(relay) => Some((
                "relay",
                json!({"kind": "permission", "id": relay.relay_id, "toolCallId": relay.tool_call_id,
                    "tool": relay.tool, "params": relay.params}),
            )),
            EventKind::Error { code, message, retry_after_secs } => {
                let mut data = json!({"message": message, "code": code});
                if let Some(secs) = retry_after_secs {
                    data["retryAfter"] = json!(secs);
                }
                Some(("error", data))
            }
            EventKind::StepRestarted { step, .. } if main => {
                let discard = self.blocks.end(&agent.agent_id);
                Some(("step_restarted", json!({"step": step, "discard": discard})))
            }
            EventKind::TurnEnded { reason, iterations, usage, .. } => Some((
                "harness_end",
                json!({"reason": end_reason(*reason), "iterations": iterations, "totalUsage": usage_fields(usage)}),
            )),
            EventKind::ReplInput { id, code, iteration } => {
                self.blocks.end(&agent.agent_id);
                Some(("repl_input", json!({"id": id, "code": code, "iteration": iteration})))
            }
            EventKind::ReplProgress { id, chunk, stream } => {
                Some(("repl_progress", json!({"id": id, "chunk": chunk, "stream": stream})))
            }
            EventKind::ReplOutput { id, stdout, error, done, iteration, duration_ms, truncated } => {
                self.blocks.end(&agent.agent_id);
                let mut fields = json!({"id": id, "stdout": stdout, "done": done, "iteration": iteration,
                    "durationMs": duration_ms});
                if let Some(error) = error {
                    fields["error"] = json!(error);
                }
                if *truncated {
                    fields["truncated"] = json!(true);
                }
                Some(("repl_output", fields))
            }
            EventKind::ReplError { message } => {
                self.blocks.end(&agent.agent_id);
                Some(("error", json!({"error": message, "message": message})))
            }
            EventKind::AgentEnded { reason, iterations, usage } => {
                self.blocks.end(&agent.agent_id);
                self.subagents.remove(&agent.agent_id);
                let fields =
                    json!({"reason": end_reason(*reason), "iterations": iterations, "totalUsage": usage_fields(usage)});
                translated.shown = Some(("harness_end", fields));
                return translated;
            }
            EventKind::ToolCallStarted { .. }
            | EventKind::ToolCallArgs { .. }
            | EventKind::RelayDecided { .. }
            | EventKind::Paused { .. }
            | EventKind::StepRestarted { .. }
            | EventKind::CompactionStarted { .. }
            | EventKind::CompactionDone { .. }
            | EventKind::AnswerDropped { .. }
            | EventKind::StateReplaced { .. }
            | EventKind::StateUpdated { .. }
            | EventKind::TitleUpdated { .. } => None,
        };
        if shown.is_some() && !main && !self.subagents.contains_key(&agent.agent_id) {
            self.subagents.insert(agent.agent_id.clone(), agent.clone());
            translated.before.insert(0, ("harness_start", agent.clone(), self.harness_start(agent)));
        }
        translated.shown = shown;
        translated
    }

    /// The `harness_end` of every subagent run started by the `agent` call
    /// `call_id`, which just ended with `status`.
    fn end_subagents(&mut self, call_id: &str, status: ToolStatus) -> Vec<(&'static str, AgentRef, Value)> {
        let reason = if status == ToolStatus::Success { "final" } else { "error" };
        let mut ended: Vec<AgentRef> =
            self.subagents.values().filter(|a| a.parent_id.as_deref() == Some(call_id)).cloned().collect();
        ended.sort_by(|a, b| a.agent_id.cmp(&b.agent_id));
        for agent in &ended {
            self.subagents.remove(&agent.agent_id);
            self.blocks.end(&agent.agent_id);
        }
        ended.into_iter().map(|agent| ("harness_end", agent, json!({"reason": reason}))).collect()
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
        if let Some(frame) = self.delta(event) {
            frames.push(frame);
            return frames;
        }
        let Translated { before, shown } = self.translate(event);
        // No `id:` on a subagent's start or end: a rejoin after one would
        // skip the event it goes with.
        for (name, agent, fields) in before {
            frames.push(Frame::event(name, self.data(name, &agent, fields), None));
        }
        if let Some((name, fields)) = shown {
            let data = self.data(name, &event.event.agent, fields);
            frames.push(Frame::event(name, data, Some(event.seq.to_string())));
        }
        frames
    }

    fn failure(&mut self, code: &str, message: &str) -> Vec<Frame> {
        let mut frames: Vec<Frame> = self.connected.take().into_iter().collect();
        let main = AgentRef { agent_id: "main".into(), parent_id: None, depth: 0 };
        let data = self.data("error", &main, json!({"message": message, "code": code}));
        frames.push(Frame::event("error", data, None));
        frames
    }

    /// `event: held` of the main agent, without an id.
    fn held(&mut self, held: &crate::domain::Held) -> Vec<Frame> {
        let mut frames: Vec<Frame> = self.connected.take().into_iter().collect();
        let main = AgentRef { agent_id: "main".into(), parent_id: None, depth: 0 };
        let mut fields = held.fields();
        fields["message"] = json!(held.message());
        frames.push(Frame::event("held", self.data("held", &main, fields), None));
        frames
    }

    fn wants_turn_context(&self) -> bool {
        true
    }

    fn context(&mut self, event: &LogEvent) {
        self.translate(event);
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
pub(crate) fn usage_fields(usage: &Usage) -> Value {
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
    if output.get("context").is_some() {
        return output.clone();
    }
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
