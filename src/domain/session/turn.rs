//! The turn in progress and what comes into it: the plan of each tool call
//! (derived state: a call's result text is in the conversation, its status
//! here), the model's response as the orchestrator assembled it, its
//! decisions, the client's answers, relay decisions, and what a takeover
//! does with a step cut short.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::{
    codes::{ToolOutcome, ToolStatus},
    conversation::{ToolCall, Usage},
};

/// A tool result cut to fit the context window (Holmes' metadata shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Truncation {
    pub tool_call_id: String,
    pub tool_name: String,
    pub start_index: usize,
    pub end_index: usize,
    pub original_token_count: u64,
}

/// What was decided for a tool call of the current turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CallPlan {
    /// A server tool or a subagent: the owner runs it. A `Run` call without
    /// a result may have started (the plan is committed before the call is
    /// made), so a takeover treats it as in flight.
    Run,
    /// Waits for a permission decision on relay `relay_id`.
    Ask { relay_id: String },
    /// The client runs it (a pause-mode frontend tool).
    Client,
    /// Answered when it was planned or decided: denied, refused, or a
    /// noop-mode frontend tool.
    Answered,
}

/// A tool call of the current turn and where it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedCall {
    pub(super) call: ToolCall,
    pub(super) plan: CallPlan,
    /// Set once the call has a result (its text is the tool message in the
    /// conversation); it is then never run again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) result: Option<ToolStatus>,
}

impl PlannedCall {
    pub fn call(&self) -> &ToolCall {
        &self.call
    }

    pub fn plan(&self) -> &CallPlan {
        &self.plan
    }

    pub fn result(&self) -> Option<ToolStatus> {
        self.result
    }

    pub(super) fn is_open(&self) -> bool {
        self.result.is_none()
    }

    pub(super) fn arguments(&self) -> Value {
        serde_json::from_str(&self.call.arguments).unwrap_or(Value::Null)
    }
}

/// The turn in progress: model calls made, usage, the tool calls of the
/// last model response until all have results.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnState {
    /// The turn only compacts the conversation (zot's `compact`): no
    /// model step answers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) compact_only: bool,
    pub(super) iterations: u32,
    #[serde(default)]
    pub(super) usage: Usage,
    #[serde(default)]
    pub(super) calls: Vec<PlannedCall>,
    #[serde(default)]
    pub(super) truncations: Vec<Truncation>,
    /// rlm mode: the REPL loop's replies, cells and host calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) rlm: Option<crate::domain::rlm::RlmState>,
}

/// A model response, as the orchestrator assembled it from the stream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepOutput {
    pub text: String,
    pub reasoning: String,
    pub calls: Vec<ToolCall>,
    pub usage: Usage,
}

/// What the orchestrator decided for one tool call of a model response (in
/// the order of the response's calls).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallDecision {
    /// Permitted: the owner runs it now.
    Run,
    /// Answered at once (a denial, a refusal, a noop frontend tool);
    /// `announce` sends its `tool_call` event before the result.
    Answer { outcome: ToolOutcome, announce: bool },
    /// Needs a permission decision; the relay id is already indexed.
    Ask { relay_id: String },
    /// A frontend tool the client runs.
    Client,
}

/// A client's answers to a paused turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answers {
    /// Results of frontend tool calls: (tool_call_id, output).
    pub outputs: Vec<(String, String)>,
    /// Approvals of calls that needed permission, by tool call id.
    pub decisions: Vec<Decision>,
    pub rules: AnswerRules,
}

/// How a resume treats answers that do not fit the pause.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AnswerRules {
    /// Every pending call is answered exactly once, and nothing else is
    /// (the native API, AI SDK, AG-UI): anything else is refused.
    #[default]
    Strict,
    /// As HolmesGPT's server resumes: an approval left without a decision
    /// is denied for `unanswered` (the reason the model sees), a frontend
    /// call left without a result gets the error `missing_result`, and an
    /// answer for a call that is not pending (or a second one) is ignored.
    Lenient { unanswered: String, missing_result: String },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub tool_call_id: String,
    pub approved: bool,
    pub reason: Option<String>,
}

/// What a replica taking a session over does with the model step its
/// previous owner was streaming when it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepRestart {
    /// No step output was cut short.
    Nothing,
    /// Clients drop the partial output of the step; it is generated again.
    Regenerate,
    /// The step goes on from its last durable text (provider prefill).
    Continue,
}
