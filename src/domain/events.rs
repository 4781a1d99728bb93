//! Canonical session events: what a session's transitions and its model
//! steps imply, what the event log stores, and what every dialect encoder
//! translates.
//!
//! An event is stored as JSON without its sequence number (the log assigns
//! it); [`LogEvent`] is an event read back, with `seq`, ready to send.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    codes::{FailureCode, ToolStatus},
    conversation::{ChatMessage, Usage},
};

/// Which agent emitted an event: the session's main agent (depth 0) or a
/// subagent started by the `agent` tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRef {
    pub agent_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    #[serde(default)]
    pub depth: u32,
}

/// Which output of a command a [`EventKind::ToolProgress`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

impl OutputStream {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

/// A permission decision on a live relay, written by whichever replica
/// received it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayDecision {
    pub approved: bool,
    #[serde(default)]
    pub always: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A tool call waiting for a permission decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingRelay {
    pub relay_id: String,
    pub tool_call_id: String,
    pub tool: String,
    pub params: Value,
}

/// A tool call waiting for the client (a frontend tool, or an approval in a
/// pause-style dialect).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingCall {
    pub tool_call_id: String,
    pub tool: String,
    pub arguments: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnEndReason {
    /// The model answered without asking for more tools.
    Final,
    MaxIterations,
    Failed,
    Cancelled,
}

/// What happened. Serialized with `"type": "<snake_case name>"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// A turn began: the user's message (or a resume) started the agent loop.
    TurnStarted {
        turn: u32,
        model: String,
    },
    TextDelta {
        text: String,
    },
    ReasoningDelta {
        text: String,
    },
    /// The model's complete message of one step (for dialects that send
    /// whole messages).
    MessageCompleted {
        content: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
    },
    /// A tool call opened in the model's stream; arguments follow.
    ToolCallStarted {
        tool_call_id: String,
        name: String,
    },
    ToolCallArgs {
        tool_call_id: String,
        delta: String,
    },
    /// A complete tool call, permitted and about to run (or handed to the client).
    ToolCall {
        tool_call_id: String,
        name: String,
        arguments: Value,
    },
    /// A call's result. `output` is the text the model read, or for the
    /// workspace tools llm-gateway's `{context, result?}` (the model read
    /// `context`).
    ToolResult {
        tool_call_id: String,
        name: String,
        status: ToolStatus,
        output: Value,
    },
    /// Live output of a running call (a command's stdout or stderr), a
    /// piece at a time, coalesced; its whole output is in its `tool_result`.
    ToolProgress {
        tool_call_id: String,
        name: String,
        stream: OutputStream,
        text: String,
    },
    RelayRequested(PendingRelay),
    RelayDecided {
        relay_id: String,
        tool_call_id: String,
        approved: bool,
        always: bool,
    },
    /// The turn stopped for the client: the stream ends here.
    Paused {
        pending_relays: Vec<PendingRelay>,
        pending_calls: Vec<PendingCall>,
    },
    /// The client answered a pause; the turn goes on.
    Resumed {
        turn: u32,
    },
    Usage {
        usage: Usage,
        total: Usage,
    },
    /// The client asked for the last answer again (the AI SDK's
    /// `regenerate()`): the `messages` assistant and tool messages that
    /// answered turn `turn` left the conversation. It follows the
    /// `turn_started` of the turn that answers the same user message again.
    AnswerDropped {
        turn: u32,
        messages: usize,
    },
    /// After a takeover: the partial output of `step` is void and is generated again.
    StepRestarted {
        step: u32,
        replica: String,
    },
    CompactionStarted {
        tokens: u64,
        messages: usize,
    },
    CompactionDone {
        tokens_before: u64,
        tokens_after: u64,
        summary: String,
        /// How many messages the conversation had before.
        #[serde(default)]
        messages_before: usize,
        /// The conversation after compaction (a few messages: the system
        /// prompt, the summary, the last exchange).
        #[serde(default)]
        messages: Vec<ChatMessage>,
    },
    TurnEnded {
        reason: TurnEndReason,
        iterations: u32,
        usage: Usage,
        /// The session's title is due and comes next, in a `title_updated`
        /// (made after the turn's end is committed: it never delays it).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        title_pending: bool,
    },
    /// The session got its title (once, after its first exchange).
    TitleUpdated {
        title: String,
    },
    Error {
        code: FailureCode,
        message: String,
        /// When retrying makes sense, how long to wait first (a rate limit).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_secs: Option<u64>,
    },
    /// A client's run replaced the session's state with its own (AG-UI's
    /// `RunAgentInput.state`).
    StateReplaced {
        state: Value,
    },
    /// A tool changed the session's state: `delta` is the JSON Patch (RFC
    /// 6902) that was applied, in the same commit as the tool's result.
    StateUpdated {
        delta: Value,
    },
    /// rlm mode: the model's reply held this cell, which runs now.
    ReplInput {
        id: String,
        code: String,
        /// 0-based.
        iteration: u32,
    },
    /// rlm mode: live output of the running cell (`console.*`, `exec`'s
    /// streams, `llm_query`'s notes); `stream` is `stdout` or `stderr`.
    ReplProgress {
        id: String,
        chunk: String,
        stream: String,
    },
    /// rlm mode: the cell `id` ran to its end.
    ReplOutput {
        id: String,
        stdout: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        done: bool,
        iteration: u32,
        duration_ms: u64,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        truncated: bool,
    },
    /// rlm mode: the model's reply had no runnable cell; the loop tells
    /// the model and goes on (the turn does not fail).
    ReplError {
        message: String,
    },
    /// A nested run (an rlm `llm_query` child) ended.
    AgentEnded {
        reason: TurnEndReason,
        iterations: u32,
        usage: Usage,
    },
}

impl EventKind {
    /// The `type` string, as serialized.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::TurnStarted { .. } => "turn_started",
            Self::TextDelta { .. } => "text_delta",
            Self::ReasoningDelta { .. } => "reasoning_delta",
            Self::MessageCompleted { .. } => "message_completed",
            Self::ToolCallStarted { .. } => "tool_call_started",
            Self::ToolCallArgs { .. } => "tool_call_args",
            Self::ToolCall { .. } => "tool_call",
            Self::ToolResult { .. } => "tool_result",
            Self::ToolProgress { .. } => "tool_progress",
            Self::RelayRequested(_) => "relay_requested",
            Self::RelayDecided { .. } => "relay_decided",
            Self::Paused { .. } => "paused",
            Self::Resumed { .. } => "resumed",
            Self::Usage { .. } => "usage",
            Self::AnswerDropped { .. } => "answer_dropped",
            Self::StepRestarted { .. } => "step_restarted",
            Self::CompactionStarted { .. } => "compaction_started",
            Self::CompactionDone { .. } => "compaction_done",
            Self::TurnEnded { .. } => "turn_ended",
            Self::TitleUpdated { .. } => "title_updated",
            Self::Error { .. } => "error",
            Self::StateReplaced { .. } => "state_replaced",
            Self::StateUpdated { .. } => "state_updated",
            Self::ReplInput { .. } => "repl_input",
            Self::ReplProgress { .. } => "repl_progress",
            Self::ReplOutput { .. } => "repl_output",
            Self::ReplError { .. } => "repl_error",
            Self::AgentEnded { .. } => "agent_ended",
        }
    }

    /// A live stream of the session ends after this event.
    pub fn ends_stream(&self) -> bool {
        matches!(self, Self::Paused { .. } | Self::TurnEnded { .. })
    }

    /// The session waits for a client after this event (a turn's end, a
    /// pause, or the title that follows a turn's end): a replay whose newest
    /// event it is has nothing live to wait for.
    pub fn at_rest(&self) -> bool {
        self.ends_stream() || matches!(self, Self::TitleUpdated { .. })
    }
}

/// An event as appended: what happened, by which agent, when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    #[serde(flatten)]
    pub kind: EventKind,
    #[serde(flatten)]
    pub agent: AgentRef,
    /// Unix milliseconds.
    pub ts: u64,
}

impl Event {
    /// The event as stored: its JSON, the same bytes `serde_json` makes of
    /// it. Text and reasoning deltas, one per streamed token, are written
    /// directly (keys are constants; only the values need escaping), which
    /// costs a fraction of serde's flattened map; everything else goes
    /// through serde.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        let (EventKind::TextDelta { text } | EventKind::ReasoningDelta { text }) = &self.kind else {
            return serde_json::to_string(self);
        };
        let agent = &self.agent;
        let mut out = Vec::with_capacity(text.len() + agent.agent_id.len() + 80);
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(self.kind.type_name().as_bytes());
        out.extend_from_slice(b"\",\"text\":");
        serde_json::to_writer(&mut out, text)?;
        out.extend_from_slice(b",\"agent_id\":");
        serde_json::to_writer(&mut out, &agent.agent_id)?;
        if let Some(parent) = &agent.parent_id {
            out.extend_from_slice(b",\"parent_id\":");
            serde_json::to_writer(&mut out, parent)?;
        }
        out.extend_from_slice(b",\"depth\":");
        out.extend_from_slice(itoa::Buffer::new().format(agent.depth).as_bytes());
        out.extend_from_slice(b",\"ts\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.ts).as_bytes());
        out.push(b'}');
        // Only UTF-8 went in: constants, and serde_json's escaped strings.
        Ok(String::from_utf8(out).expect("JSON written from UTF-8 strings is UTF-8"))
    }
}

/// An event read back from the log, with its sequence number. Shared
/// (`Arc`) between every follower of the session on this replica.
#[derive(Debug, Clone, PartialEq)]
pub struct LogEvent {
    pub seq: u64,
    pub session_id: Arc<str>,
    pub event: Event,
}

impl LogEvent {
    pub fn from_stored(session_id: Arc<str>, seq: u64, payload: &str) -> Result<Self, serde_json::Error> {
        Ok(Self { seq, session_id, event: serde_json::from_str(payload)? })
    }
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(kind: fn(String) -> EventKind, text: &str, parent: Option<&str>, depth: u32) -> Event {
        Event {
            kind: kind(text.to_string()),
            agent: AgentRef { agent_id: "agent \"7\"".into(), parent_id: parent.map(str::to_string), depth },
            ts: 1_764_000_000_123,
        }
    }

    #[test]
    fn a_delta_is_written_as_the_same_bytes_serde_makes_of_it() {
        let texts = ["", "tok ", "quote \" back \\ slash", "line\nbreak\ttab\r\u{1}\u{1f}", "é ü 中文 🦀", "</script>"];
        let kinds: [fn(String) -> EventKind; 2] =
            [|text| EventKind::TextDelta { text }, |text| EventKind::ReasoningDelta { text }];
        for text in texts {
            for kind in kinds {
                for (parent, depth) in [(None, 0), (Some("main"), 1), (Some("sub \\ 1"), 2)] {
                    let event = delta(kind, text, parent, depth);
                    let fast = event.to_json().unwrap();
                    assert_eq!(fast, serde_json::to_string(&event).unwrap(), "{event:?}");
                    assert_eq!(serde_json::from_str::<Event>(&fast).unwrap(), event);
                }
            }
        }
    }

    #[test]
    fn other_events_are_serialized_by_serde() {
        let event = Event {
            kind: EventKind::TurnStarted { turn: 3, model: "m".into() },
            agent: AgentRef { agent_id: "main".into(), parent_id: None, depth: 0 },
            ts: 5,
        };
        assert_eq!(event.to_json().unwrap(), serde_json::to_string(&event).unwrap());
    }
}
