//! The session state document and its state machine.
//!
//! ```text
//! running ─▶ awaiting_relay (live wait; the stream stays open) ─▶ running
//! running ─▶ awaiting_client (pause; the stream ends)        ─▶ running (resume)
//! idle ─▶ running ─▶ completed | failed | cancelled;  completed | failed ─▶ running (next message)
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
            (Idle | Completed | Failed, Running) => true,
            (Idle | Completed | Failed, Cancelled) => false,
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
}
