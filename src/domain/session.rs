//! The session and its state machine. Its fields are private: the
//! transitions below are the only way to change it, each checks that the
//! session may take it, and each returns the events it implies, so a caller
//! cannot change the status without the events or the events without the
//! status. The sessions service commits both in one store operation.
//!
//! ```text
//! idle | completed | failed | cancelled | awaiting_client ──begin_run──▶ (same status: the run's tools, context, state)
//! idle | completed | failed | cancelled ──start_turn──▶ running
//! completed | failed | cancelled ──regenerate (the last answer dropped)──▶ running
//! running ──complete_step (asks, relay mode)──▶ awaiting_relay ──decide_relay / time_out_relays──▶ running
//! running ──pause──▶ awaiting_client ──resume──▶ running
//! running ──end──▶ completed      active ──fail──▶ failed      active | awaiting_client ──cancel──▶ cancelled
//! running | awaiting_relay ──take_over──▶ (same status, on another replica)
//! title due ──set_title──▶ titled (any status; once)
//! ```
//!
//! A session gets its title once: the first turn that ends normally marks it
//! due (`end`, when titles are on), its owner keeps the session after
//! committing that end, asks a model for a title and commits it with
//! `set_title`, giving the session up. A session whose title is due needs an
//! owner like a running one ([`Session::needs_owner`]): a takeover of a dead
//! owner's session makes the title.
//!
//! Derived data is computed, never stored twice: pending relays and pending
//! client calls come from the turn's planned calls; a call's result text is
//! only in the conversation (as its tool message), its status in the plan.
//!
//! The conversation is append-only: [`Session::conversation_change`] says
//! what to write since the last save (new messages, or after a compaction
//! or a regenerated answer the whole rewritten history), so a checkpoint's
//! cost does not grow with the conversation.

use serde::{Deserialize, Serialize};

use super::{
    codes::FailureCode,
    conversation::{ChatMessage, ToolCall, Usage},
    events::{PendingCall, PendingRelay, now_ms},
    options::{ApprovalMode, SessionOptions},
    run::{empty_state, is_empty_state},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Created; no turn has started yet.
    Idle,
    Running,
    /// Running, with the stream open, waiting for relay decisions.
    AwaitingRelay,
    /// Paused: the stream ended; the client's answers resume it.
    AwaitingClient,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    /// An orchestrator is (or should be) running it: it has an owner, and a
    /// dead owner means takeover.
    pub fn is_active(self) -> bool {
        matches!(self, Self::Running | Self::AwaitingRelay)
    }

    /// A new user message may start a turn.
    pub fn takes_messages(self) -> bool {
        matches!(self, Self::Idle | Self::Completed | Self::Failed | Self::Cancelled)
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
}

/// Why a transition was refused. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The session is not in a state that allows it (a request at the wrong
    /// time, a race lost to another request).
    #[error("{0}")]
    Conflict(String),
    /// The request names calls or relays the session does not wait for, or
    /// leaves out ones it does.
    #[error("{0}")]
    Invalid(String),
}

fn conflict<T>(message: impl Into<String>) -> Result<T, Refused> {
    Err(Refused::Conflict(message.into()))
}

fn invalid<T>(message: impl Into<String>) -> Result<T, Refused> {
    Err(Refused::Invalid(message.into()))
}

/// Who owns a new session and how it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSpec {
    pub id: String,
    pub tenant: String,
    /// The `sub` of the token that creates it.
    pub subject: String,
    /// Model alias.
    pub model: String,
    /// The dialect it comes through (for logs and metrics).
    pub dialect: String,
    pub options: SessionOptions,
}

/// Why the last turn failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnError {
    pub code: FailureCode,
    pub message: String,
}

/// What a conversation change writes to the store.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ConversationChange<'a> {
    Unchanged,
    /// These messages follow the stored ones.
    Append(&'a [ChatMessage]),
    /// The whole conversation, rewritten (compaction).
    Replace(&'a [ChatMessage]),
}

/// The conversation and what of it is stored. A session loaded without its
/// history holds only the messages added since (enough for a turn's start
/// or a resume, which only append).
#[derive(Debug, Clone, Default, PartialEq)]
struct Conversation {
    messages: Vec<ChatMessage>,
    /// Whether `messages` starts at the first message.
    full: bool,
    /// Messages in the store.
    stored: usize,
    /// Index in `messages` of the first unsaved one.
    unsaved_from: usize,
    rewritten: bool,
}

impl Conversation {
    fn push(&mut self, message: ChatMessage) {
        self.messages.push(message);
    }

    fn len(&self) -> usize {
        self.stored + self.messages.len() - self.unsaved_from
    }
}

/// A session. Serialized (without its conversation, which is stored apart
/// and append-only) it is the state document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    id: String,
    tenant: String,
    subject: String,
    model: String,
    dialect: String,
    created_ms: u64,
    updated_ms: u64,
    status: Status,
    /// Turns started so far.
    turn: u32,
    options: SessionOptions,
    /// Every turn's usage, added up.
    usage: Usage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<TurnError>,
    /// W3C `traceparent` of the request that started (or resumed) the turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trace_parent: Option<String>,
    #[serde(default)]
    turn_state: TurnState,
    /// The state the client and the agent share (AG-UI): the client's
    /// runs replace it, tools patch it.
    #[serde(default = "empty_state", skip_serializing_if = "is_empty_state")]
    state: serde_json::Value,
    /// Set once, after the first exchange (see [`super::title`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    title: Option<String>,
    /// A turn ended normally and the title is not made yet: the owner makes it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    title_due: bool,
    #[serde(skip)]
    conversation: Conversation,
}

/// The text a tool message gets for a call its turn ended without.
const INTERRUPTED: &str = "The turn ended before this call finished; its outcome is unknown.";
/// The text of a call whose run a takeover cut short, for tools that must not run twice.
pub const OUTCOME_UNKNOWN: &str = "The replica running this tool call stopped while it ran; the call may or may not have taken effect, \
     and it is not run again. Check its effect before retrying it.";

impl Session {
    /// A new idle session.
    pub fn new(spec: SessionSpec) -> Self {
        let now = now_ms();
        Self {
            id: spec.id,
            tenant: spec.tenant,
            subject: spec.subject,
            model: spec.model,
            dialect: spec.dialect,
            created_ms: now,
            updated_ms: now,
            status: Status::Idle,
            turn: 0,
            options: spec.options,
            usage: Usage::default(),
            error: None,
            trace_parent: None,
            turn_state: TurnState::default(),
            state: empty_state(),
            title: None,
            title_due: false,
            conversation: Conversation { full: true, ..Conversation::default() },
        }
    }

    /// A session read back: its state document plus what is known of its
    /// conversation — `stored` messages in the store, and `history`, all of
    /// them, when they were read too.
    pub fn restored(mut self, stored: usize, history: Option<Vec<ChatMessage>>) -> Self {
        self.conversation = match history {
            Some(messages) => {
                let unsaved_from = messages.len();
                Conversation { stored: unsaved_from, messages, full: true, unsaved_from, rewritten: false }
            }
            None => Conversation { stored, ..Conversation::default() },
        };
        self
    }

    // ---- reading ----

    pub fn id(&self) -> &str {
        &self.id
    }
    pub fn tenant(&self) -> &str {
        &self.tenant
    }
    pub fn subject(&self) -> &str {
        &self.subject
    }
    /// The running turn only compacts the conversation.
    pub fn compacting_only(&self) -> bool {
        self.turn_state.compact_only
    }

    pub fn model(&self) -> &str {
        &self.model
    }
    pub fn dialect(&self) -> &str {
        &self.dialect
    }
    pub fn status(&self) -> Status {
        self.status
    }
    pub fn turn(&self) -> u32 {
        self.turn
    }
    pub fn created_ms(&self) -> u64 {
        self.created_ms
    }
    pub fn updated_ms(&self) -> u64 {
        self.updated_ms
    }
    pub fn options(&self) -> &SessionOptions {
        &self.options
    }
    /// Every turn's usage so far.
    pub fn usage(&self) -> Usage {
        self.usage
    }
    pub fn error(&self) -> Option<&TurnError> {
        self.error.as_ref()
    }
    pub fn trace_parent(&self) -> Option<&str> {
        self.trace_parent.as_deref()
    }
    /// The state the client and the agent share (`{}` until one is given).
    pub fn state(&self) -> &serde_json::Value {
        &self.state
    }

    /// The session's title, once made.
    pub fn title(&self) -> Option<&str> {
        self.title.as_deref()
    }
    /// A turn ended normally and the title is still to be made.
    pub fn title_pending(&self) -> bool {
        self.title_due
    }
    /// An owner should be running it: a turn, or the title after one. A dead
    /// owner means takeover.
    pub fn needs_owner(&self) -> bool {
        self.status.is_active() || self.title_due
    }
    /// Model calls made in the current (or last) turn.
    pub fn iterations(&self) -> u32 {
        self.turn_state.iterations
    }
    /// The current (or last) turn's usage.
    pub fn turn_usage(&self) -> Usage {
        self.turn_state.usage
    }
    pub fn truncations(&self) -> &[Truncation] {
        &self.turn_state.truncations
    }
    /// The tool calls of the turn's last model response.
    pub fn calls(&self) -> &[PlannedCall] {
        &self.turn_state.calls
    }
    pub fn call(&self, tool_call_id: &str) -> Option<&PlannedCall> {
        self.turn_state.calls.iter().find(|c| c.call.id == tool_call_id)
    }

    /// The whole conversation, when it was loaded.
    pub fn history(&self) -> Option<&[ChatMessage]> {
        self.conversation.full.then_some(self.conversation.messages.as_slice())
    }

    /// How many messages the conversation has.
    pub fn message_count(&self) -> usize {
        self.conversation.len()
    }

    /// Whether `tenant`'s `subject` may see it (`admin`: the tenant's
    /// sessions admin scope).
    pub fn visible_to(&self, tenant: &str, subject: &str, admin: bool) -> bool {
        self.tenant == tenant && (self.subject == subject || admin)
    }

    /// Calls waiting for a permission decision (by relay, or in a pause).
    pub fn pending_relays(&self) -> Vec<PendingRelay> {
        (self.open_calls())
            .filter_map(|c| match &c.plan {
                CallPlan::Ask { relay_id } => Some(PendingRelay {
                    relay_id: relay_id.clone(),
                    tool_call_id: c.call.id.clone(),
                    tool: c.call.name.clone(),
                    params: c.arguments(),
                }),
                _ => None,
            })
            .chain(self.rlm_pending_relay())
            .collect()
    }

    /// Frontend calls waiting for the client's result.
    pub fn pending_calls(&self) -> Vec<PendingCall> {
        (self.open_calls())
            .filter(|c| c.plan == CallPlan::Client)
            .map(|c| PendingCall {
                tool_call_id: c.call.id.clone(),
                tool: c.call.name.clone(),
                arguments: c.arguments(),
            })
            .collect()
    }

    /// Relays any replica may decide now (relay mode, not yet decided).
    pub fn live_relays(&self) -> Vec<String> {
        if self.options.approval != ApprovalMode::Relay || !self.status.is_active() {
            return Vec::new();
        }
        self.pending_relays().into_iter().map(|r| r.relay_id).collect()
    }

    /// Permitted calls without a result: the owner runs them.
    pub fn runnable(&self) -> Vec<ToolCall> {
        self.open_calls().filter(|c| c.plan == CallPlan::Run).map(|c| c.call.clone()).collect()
    }

    /// Whether the turn's calls all have results (the next step may run).
    pub fn calls_done(&self) -> bool {
        self.open_calls().next().is_none()
    }

    /// Whether the turn waits for the client: frontend calls, or approvals
    /// in pause mode, and nothing left for the owner to run.
    pub fn waits_for_client(&self) -> bool {
        let open: Vec<&PlannedCall> = self.open_calls().collect();
        !open.is_empty()
            && open.iter().all(|c| c.plan != CallPlan::Run)
            && open.iter().all(|c| match c.plan {
                CallPlan::Client => true,
                CallPlan::Ask { .. } => self.options.approval == ApprovalMode::Pause,
                _ => false,
            })
    }

    fn open_calls(&self) -> impl Iterator<Item = &PlannedCall> {
        self.turn_state.calls.iter().filter(|c| c.is_open())
    }

    // ---- persistence bookkeeping ----

    /// What of the conversation must be written since the last save.
    pub fn conversation_change(&self) -> ConversationChange<'_> {
        let c = &self.conversation;
        if c.rewritten {
            ConversationChange::Replace(&c.messages)
        } else if c.unsaved_from < c.messages.len() {
            ConversationChange::Append(&c.messages[c.unsaved_from..])
        } else {
            ConversationChange::Unchanged
        }
    }

    /// The change was written.
    pub fn conversation_saved(&mut self) {
        let c = &mut self.conversation;
        c.stored = c.len();
        c.unsaved_from = c.messages.len();
        c.rewritten = false;
    }
}

mod between;
mod chat;
mod rlm;
mod run;
mod titling;
mod transitions;
mod turn;

pub use self::rlm::{EXEC_TOOL, Reply as RlmReply};
pub use self::turn::{
    AnswerRules, Answers, CallDecision, CallPlan, Decision, PlannedCall, StepOutput, StepRestart, Truncation, TurnState,
};
pub use super::events::RelayDecision;

#[cfg(test)]
mod rlm_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod title_tests;
