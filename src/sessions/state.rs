//! The session state document and its state machine.
//!
//! ```text
//! running ─▶ awaiting_relay (live wait; the stream stays open) ─▶ running
//! running ─▶ awaiting_client (pause; the stream ends)        ─▶ running (resume)
//! idle ─▶ running ─▶ completed | failed | cancelled;  completed | failed | cancelled ─▶ running (next message)
//! ```
//!
//! Every change is a compare-and-set on the document's version in the store,
//! so of two concurrent resumes, decisions or takeovers exactly one wins.

use serde::{Deserialize, Serialize};

use crate::{
    protocol::{PendingCall, PendingRelay},
    providers::{ChatMessage, Usage},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Created; no turn has started yet.
    Idle,
    Running,
    AwaitingRelay,
    AwaitingClient,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    /// An orchestrator is (or should be) running it: it holds a lease, and a
    /// dead owner's lease means takeover.
    pub fn is_active(self) -> bool {
        matches!(self, Self::Running | Self::AwaitingRelay)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Running => "running",
            Self::AwaitingRelay => "awaiting_relay",
            Self::AwaitingClient => "awaiting_client",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether the state machine allows going from `self` to `next`.
    pub fn can_become(self, next: Status) -> bool {
        use Status::*;
        match (self, next) {
            (Running, _) => next != Running,
            (AwaitingRelay, Running | Failed | Cancelled) => true,
            (AwaitingClient, Running | Cancelled) => true,
            (Idle | Completed | Failed | Cancelled, Running) => true,
            _ => false,
        }
    }
}

/// Everything a replica needs to carry a session on. Stored as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionDoc {
    pub id: String,
    pub tenant: String,
    /// The `sub` of the token that created it.
    pub subject: String,
    pub status: Status,
    /// The replica that runs (or last ran) its orchestrator.
    pub owner: Option<String>,
    /// Model alias.
    pub model: String,
    /// The dialect it was created through (for logs and metrics).
    pub dialect: String,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// Turns started so far.
    pub turn: u32,
    /// The conversation as of the last checkpoint.
    pub messages: Vec<ChatMessage>,
    pub pending_relays: Vec<PendingRelay>,
    pub pending_calls: Vec<PendingCall>,
    pub usage: Usage,
    /// Seq of the last event appended when this document was written.
    pub last_seq: u64,
    /// W3C `traceparent` of the trace the session started in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<String>,
    /// Why the last turn failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub options: SessionOptions,
    /// The running (or paused) turn's progress.
    #[serde(default)]
    pub turn_state: TurnState,
    /// Permission decisions not yet taken up by the turn.
    #[serde(default)]
    pub decisions: Vec<RelayDecision>,
    /// Set by a cancel request; the owner stops the turn when it sees it.
    #[serde(default)]
    pub cancel_requested: bool,
}

/// What the request that started the session asked for, kept so any replica
/// runs later turns (and takeovers) the same way.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionOptions {
    #[serde(default)]
    pub frontend_tools: Vec<FrontendTool>,
    #[serde(default)]
    pub rules: PermissionRules,
    /// Allow rules added by `always: true` decisions, for the rest of the session.
    #[serde(default)]
    pub session_allow: Vec<ToolRule>,
    pub max_iterations: Option<u32>,
    pub max_depth: Option<u32>,
    pub additional_system_prompt: Option<String>,
    pub response_format: Option<serde_json::Value>,
    /// Prompt sections switched on or off (Holmes `behavior_controls`).
    #[serde(default)]
    pub behavior_controls: std::collections::BTreeMap<String, bool>,
    #[serde(default)]
    pub approval: ApprovalMode,
}

/// What happens to a tool call that needs a permission decision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    /// A relay: the stream stays open while any replica takes the decision.
    #[default]
    Relay,
    /// The turn pauses with the call pending (Holmes `enable_tool_approval`).
    Pause,
    /// No one will decide: the call fails and the model is told why
    /// (Holmes without `enable_tool_approval`).
    Refuse,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrontendTool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub parameters: Option<serde_json::Value>,
    #[serde(default)]
    pub mode: FrontendMode,
    #[serde(default)]
    pub noop_response: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrontendMode {
    #[default]
    Pause,
    Noop,
}

/// llm-gateway's permission shape: `{allowlist, allowOnce, deny}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionRules {
    /// Present (even empty) means "ask for anything not allowed here".
    #[serde(default)]
    pub allowlist: Option<Vec<ToolRule>>,
    #[serde(default)]
    pub allow_once: Vec<ToolRule>,
    #[serde(default)]
    pub deny: Vec<DenyRule>,
}

/// A tool, optionally with glob patterns its arguments must match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRule {
    pub tool: String,
    #[serde(default)]
    pub params: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DenyRule {
    pub tool_call_id: String,
    #[serde(default)]
    pub reason: Option<String>,
}

/// Where the current turn stands, checkpointed after every model response
/// and every tool result, so a takeover resumes it without re-running
/// finished tools.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnState {
    /// Model calls made in this turn.
    pub iterations: u32,
    /// The tool calls of the last model response, until all have results.
    #[serde(default)]
    pub calls: Vec<PlannedCall>,
    #[serde(default)]
    pub usage: Usage,
    #[serde(default)]
    pub truncations: Vec<Truncation>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedCall {
    pub call: crate::providers::ToolCall,
    pub plan: CallPlan,
    /// Set once the call has a result (it is then never run again).
    #[serde(default)]
    pub result: Option<CallResult>,
}

/// What was decided for a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CallPlan {
    Run,
    Deny {
        reason: String,
    },
    /// Waiting for a permission decision on relay `relay_id`.
    Ask {
        relay_id: String,
    },
    /// The client runs it (pause-mode frontend tool).
    Client,
    /// Answered at once with a canned response (noop-mode frontend tool).
    Noop {
        response: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallResult {
    /// `success`, `error` or `denied`.
    pub status: String,
    pub output: String,
}

/// A permission decision written by whichever replica received it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelayDecision {
    pub relay_id: String,
    pub approved: bool,
    #[serde(default)]
    pub always: bool,
    #[serde(default)]
    pub reason: Option<String>,
}

/// A tool result cut to fit the context window (Holmes' metadata shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Truncation {
    pub tool_call_id: String,
    pub tool_name: String,
    pub start_index: usize,
    pub end_index: usize,
    pub original_token_count: u64,
}
