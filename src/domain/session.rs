//! The session and its state machine. Its fields are private: the
//! transitions below are the only way to change it, each checks that the
//! session may take it, and each returns the events it implies, so a caller
//! cannot change the status without the events or the events without the
//! status. The sessions service commits both in one store operation.
//!
//! ```text
//! idle | completed | failed | cancelled ──start_turn──▶ running
//! running ──complete_step (asks, relay mode)──▶ awaiting_relay ──decide_relay / time_out_relays──▶ running
//! running ──pause──▶ awaiting_client ──resume──▶ running
//! running ──end──▶ completed      active ──fail──▶ failed      active | awaiting_client ──cancel──▶ cancelled
//! running | awaiting_relay ──take_over──▶ (same status, on another replica)
//! ```
//!
//! Derived data is computed, never stored twice: pending relays and pending
//! client calls come from the turn's planned calls; a call's result text is
//! only in the conversation (as its tool message), its status in the plan.
//!
//! The conversation is append-only: [`Session::conversation_change`] says
//! what to write since the last save (new messages, or after a compaction
//! the whole rewritten history), so a checkpoint's cost does not grow with
//! the conversation.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    codes::{FailureCode, ToolOutcome, ToolStatus},
    conversation::{ChatMessage, Role, ToolCall, Usage},
    events::{EventKind, PendingCall, PendingRelay, TurnEndReason, now_ms},
    options::{ApprovalMode, PermissionRules, SessionOptions, ToolRule},
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
    call: ToolCall,
    plan: CallPlan,
    /// Set once the call has a result (its text is the tool message in the
    /// conversation); it is then never run again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<ToolStatus>,
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

    fn is_open(&self) -> bool {
        self.result.is_none()
    }

    fn arguments(&self) -> Value {
        serde_json::from_str(&self.call.arguments).unwrap_or(Value::Null)
    }
}

/// The turn in progress: model calls made, usage, the tool calls of the
/// last model response until all have results.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnState {
    iterations: u32,
    #[serde(default)]
    usage: Usage,
    #[serde(default)]
    calls: Vec<PlannedCall>,
    #[serde(default)]
    truncations: Vec<Truncation>,
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

/// A client's answers to a paused turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answers {
    /// Results of frontend tool calls: (tool_call_id, output).
    pub outputs: Vec<(String, String)>,
    /// Approvals of calls that needed permission, by tool call id.
    pub decisions: Vec<Decision>,
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

    // ---- transitions ----

    /// Seeds a new session with the conversation the client holds (the
    /// dialects whose requests carry the whole history).
    pub fn seed(&mut self, history: Vec<ChatMessage>) -> Result<(), Refused> {
        if self.status != Status::Idle || self.turn != 0 || self.conversation.len() != 0 {
            return conflict("only a new session can be seeded with a conversation");
        }
        for message in history {
            self.conversation.push(message);
        }
        Ok(())
    }

    /// A user message starts a turn.
    pub fn start_turn(
        &mut self,
        message: ChatMessage,
        trace_parent: Option<String>,
    ) -> Result<Vec<EventKind>, Refused> {
        if !self.status.takes_messages() {
            return conflict(format!("the session is {}: it cannot take a new message now", self.status.as_str()));
        }
        self.turn += 1;
        self.conversation.push(message);
        self.error = None;
        self.turn_state = TurnState::default();
        self.trace_parent = trace_parent.or(self.trace_parent.take());
        self.become_(Status::Running);
        Ok(vec![EventKind::TurnStarted { turn: self.turn, model: self.model.clone() }])
    }

    /// The client answers a paused turn: every pending frontend call needs
    /// exactly one result and every pending approval exactly one decision.
    pub fn resume(&mut self, answers: &Answers, trace_parent: Option<String>) -> Result<Vec<EventKind>, Refused> {
        if self.status != Status::AwaitingClient {
            return conflict(format!("the session is {}, not paused for the client", self.status.as_str()));
        }
        for (call_id, _) in &answers.outputs {
            if !self.open_calls().any(|c| c.call.id == *call_id && c.plan == CallPlan::Client) {
                return invalid(format!("tool call {call_id:?} is not waiting for a client result"));
            }
        }
        for decision in &answers.decisions {
            let asks = |c: &&PlannedCall| c.call.id == decision.tool_call_id && matches!(c.plan, CallPlan::Ask { .. });
            if !self.open_calls().any(|c| asks(&c)) {
                return invalid(format!("tool call {:?} is not waiting for an approval", decision.tool_call_id));
            }
        }
        let open: Vec<(String, CallPlan)> = self.open_calls().map(|c| (c.call.id.clone(), c.plan.clone())).collect();
        for (id, plan) in &open {
            let count = match plan {
                CallPlan::Client => answers.outputs.iter().filter(|(c, _)| c == id).count(),
                CallPlan::Ask { .. } => answers.decisions.iter().filter(|d| d.tool_call_id == *id).count(),
                _ => 1,
            };
            if count != 1 {
                let what = if *plan == CallPlan::Client { "result" } else { "decision" };
                return invalid(format!("tool call {id:?} needs exactly one {what}"));
            }
        }
        let mut events = vec![EventKind::Resumed { turn: self.turn }];
        for (id, plan) in open {
            match plan {
                CallPlan::Client => {
                    let output = answers.outputs.iter().find(|(c, _)| *c == id).map(|(_, o)| o.clone());
                    events.extend(self.answer(&id, ToolOutcome::Success(output.unwrap_or_default())));
                }
                CallPlan::Ask { relay_id } => {
                    let Some(decision) = answers.decisions.iter().find(|d| d.tool_call_id == id) else { continue };
                    let decision =
                        RelayDecision { approved: decision.approved, always: false, reason: decision.reason.clone() };
                    events.extend(self.apply_decision(&relay_id, &decision));
                }
                _ => {}
            }
        }
        self.trace_parent = trace_parent.or(self.trace_parent.take());
        self.become_(Status::Running);
        Ok(events)
    }

    /// Another replica (`replica`) carries the turn on from its last commit.
    /// Permitted calls without a result may have been running when the
    /// previous owner stopped: those `rerun` accepts run again (at least
    /// once, with the same idempotency key); the others get an "outcome
    /// unknown" error result and never run twice.
    pub fn take_over(
        &mut self,
        replica: &str,
        restart: StepRestart,
        rerun: &dyn Fn(&ToolCall) -> bool,
    ) -> Result<Vec<EventKind>, Refused> {
        if !self.status.is_active() {
            return conflict(format!("the session is {}: nothing runs to take over", self.status.as_str()));
        }
        let mut events = Vec::new();
        if restart == StepRestart::Regenerate {
            events
                .push(EventKind::StepRestarted { step: self.turn_state.iterations + 1, replica: replica.to_string() });
        }
        let cut: Vec<String> = (self.open_calls())
            .filter(|c| c.plan == CallPlan::Run && !rerun(&c.call))
            .map(|c| c.call.id.clone())
            .collect();
        for id in cut {
            events.extend(self.answer(&id, ToolOutcome::Error(OUTCOME_UNKNOWN.to_string())));
        }
        self.updated_ms = now_ms();
        Ok(events)
    }

    /// The history is about to be compacted (a model call summarises it).
    pub fn begin_compaction(&self, tokens: u64) -> Result<Vec<EventKind>, Refused> {
        self.require_running("compact")?;
        Ok(vec![EventKind::CompactionStarted { tokens, messages: self.conversation.len() }])
    }

    /// The history was replaced by its compacted form.
    pub fn compacted(
        &mut self,
        messages: Vec<ChatMessage>,
        summary: String,
        tokens_before: u64,
        tokens_after: u64,
    ) -> Result<Vec<EventKind>, Refused> {
        self.require_running("compact")?;
        if !self.conversation.full {
            return conflict("the history must be loaded to compact it");
        }
        self.conversation.messages = messages;
        self.conversation.rewritten = true;
        self.updated_ms = now_ms();
        Ok(vec![EventKind::CompactionDone { tokens_before, tokens_after, summary }])
    }

    /// A model response arrived whole: it joins the conversation and its
    /// tool calls are planned as `decisions` say (one per call, in order);
    /// `rules` are the request rules after the decisions used some up.
    pub fn complete_step(
        &mut self,
        output: StepOutput,
        decisions: Vec<CallDecision>,
        rules: PermissionRules,
    ) -> Result<Vec<EventKind>, Refused> {
        self.require_running("complete a model step")?;
        if self.status != Status::Running || !self.calls_done() {
            return conflict("a model step cannot complete while tool calls are open");
        }
        if decisions.len() != output.calls.len() {
            return invalid(format!("{} calls, {} decisions", output.calls.len(), decisions.len()));
        }
        if decisions.iter().any(|d| matches!(d, CallDecision::Ask { .. }))
            && self.options.approval == ApprovalMode::Refuse
        {
            return invalid("this session refuses approvals: a call cannot wait for one");
        }
        let mut events = Vec::new();
        if !output.text.is_empty() || !output.reasoning.is_empty() {
            events.push(EventKind::MessageCompleted {
                content: (!output.text.is_empty()).then(|| output.text.clone()),
                reasoning: (!output.reasoning.is_empty()).then(|| output.reasoning.clone()),
            });
        }
        self.turn_state.iterations += 1;
        self.turn_state.usage.add(&output.usage);
        self.usage.add(&output.usage);
        events.push(EventKind::Usage { usage: output.usage, total: self.turn_state.usage });
        self.conversation.push(ChatMessage {
            tool_calls: output.calls.clone(),
            content: (!output.text.is_empty()).then_some(output.text),
            ..ChatMessage::text(Role::Assistant, "")
        });
        self.options.rules = rules;
        self.turn_state.calls.clear();
        for (call, decision) in output.calls.into_iter().zip(decisions) {
            let announce = announcement(&call);
            let id = call.id.clone();
            let (plan, answer) = match decision {
                CallDecision::Run => {
                    events.push(announce);
                    (CallPlan::Run, None)
                }
                CallDecision::Client => {
                    events.push(announce);
                    (CallPlan::Client, None)
                }
                CallDecision::Ask { relay_id } => {
                    if self.options.approval == ApprovalMode::Relay {
                        let params = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
                        events.push(EventKind::RelayRequested(PendingRelay {
                            relay_id: relay_id.clone(),
                            tool_call_id: call.id.clone(),
                            tool: call.name.clone(),
                            params,
                        }));
                    }
                    (CallPlan::Ask { relay_id }, None)
                }
                CallDecision::Answer { outcome, announce: and_announce } => {
                    if and_announce {
                        events.push(announce);
                    }
                    (CallPlan::Answered, Some(outcome))
                }
            };
            self.turn_state.calls.push(PlannedCall { call, plan, result: None });
            if let Some(outcome) = answer {
                events.extend(self.answer(&id, outcome));
            }
        }
        if !self.live_relays().is_empty() {
            self.become_(Status::AwaitingRelay);
        }
        self.updated_ms = now_ms();
        Ok(events)
    }

    /// A permitted call finished (its output already cut to fit the window;
    /// `truncation` says how, if it was).
    pub fn finish_tool(
        &mut self,
        tool_call_id: &str,
        outcome: ToolOutcome,
        truncation: Option<Truncation>,
    ) -> Result<Vec<EventKind>, Refused> {
        if !self.status.is_active() {
            return conflict(format!("the session is {}: no tool runs", self.status.as_str()));
        }
        if !self.open_calls().any(|c| c.call.id == tool_call_id && c.plan == CallPlan::Run) {
            return invalid(format!("tool call {tool_call_id:?} is not running"));
        }
        self.turn_state.truncations.extend(truncation);
        Ok(self.answer(tool_call_id, outcome))
    }

    /// A decision on a live relay, taken on any replica.
    pub fn decide_relay(&mut self, relay_id: &str, decision: &RelayDecision) -> Result<Vec<EventKind>, Refused> {
        if self.status != Status::AwaitingRelay {
            return conflict(format!("the session is {}, not waiting for relay decisions", self.status.as_str()));
        }
        if !self.live_relays().iter().any(|r| r == relay_id) {
            return conflict(format!("relay {relay_id:?} is not waiting for a decision"));
        }
        let events = self.apply_decision(relay_id, decision);
        if self.live_relays().is_empty() {
            self.become_(Status::Running);
        }
        Ok(events)
    }

    /// No decision came in time: every live relay is denied for `reason`.
    pub fn time_out_relays(&mut self, reason: &str) -> Result<Vec<EventKind>, Refused> {
        if self.status != Status::AwaitingRelay {
            return conflict(format!("the session is {}, not waiting for relay decisions", self.status.as_str()));
        }
        let mut events = Vec::new();
        for relay_id in self.live_relays() {
            let Some(call_id) = self.asking(&relay_id) else { continue };
            if let Some(planned) = self.planned_mut(&call_id) {
                planned.plan = CallPlan::Answered;
            }
            events.extend(self.answer(&call_id, ToolOutcome::Denied { reason: reason.to_string() }));
        }
        self.become_(Status::Running);
        Ok(events)
    }

    /// The stream ends for the client; the session waits for its answers.
    pub fn pause(&mut self) -> Result<Vec<EventKind>, Refused> {
        self.require_running("pause")?;
        if !self.waits_for_client() {
            return conflict("nothing waits for the client");
        }
        self.become_(Status::AwaitingClient);
        Ok(vec![EventKind::Paused { pending_relays: self.pending_relays(), pending_calls: self.pending_calls() }])
    }

    /// The turn ends normally: the model answered without more tool calls
    /// (`Final`), or the turn used its model calls (`MaxIterations`).
    pub fn end(&mut self, reason: TurnEndReason) -> Result<Vec<EventKind>, Refused> {
        self.require_running("end")?;
        match reason {
            TurnEndReason::Final | TurnEndReason::MaxIterations if self.calls_done() => {}
            TurnEndReason::Final | TurnEndReason::MaxIterations => {
                return conflict("the turn cannot end while tool calls are open");
            }
            TurnEndReason::Failed | TurnEndReason::Cancelled => {
                return invalid("failing or cancelling a turn has transitions of its own");
            }
        }
        Ok(self.close(reason, Status::Completed))
    }

    /// The turn is cancelled: while it runs, or while it is paused.
    pub fn cancel(&mut self) -> Result<Vec<EventKind>, Refused> {
        if !self.status.is_active() && self.status != Status::AwaitingClient {
            return conflict(format!("the session is {}: no turn to cancel", self.status.as_str()));
        }
        Ok(self.close(TurnEndReason::Cancelled, Status::Cancelled))
    }

    /// The turn fails with an error its clients see.
    pub fn fail(
        &mut self,
        code: FailureCode,
        message: &str,
        retry_after_secs: Option<u64>,
    ) -> Result<Vec<EventKind>, Refused> {
        if !self.status.is_active() {
            return conflict(format!("the session is {}: no turn to fail", self.status.as_str()));
        }
        let mut events = vec![EventKind::Error { code, message: message.to_string(), retry_after_secs }];
        events.extend(self.close(TurnEndReason::Failed, Status::Failed));
        self.error = Some(TurnError { code, message: message.to_string() });
        Ok(events)
    }

    // ---- helpers ----

    fn become_(&mut self, status: Status) {
        self.status = status;
        self.updated_ms = now_ms();
    }

    fn require_running(&self, what: &str) -> Result<(), Refused> {
        if self.status.is_active() {
            Ok(())
        } else {
            conflict(format!("the session is {}: it cannot {what}", self.status.as_str()))
        }
    }

    fn planned_mut(&mut self, tool_call_id: &str) -> Option<&mut PlannedCall> {
        self.turn_state.calls.iter_mut().find(|c| c.call.id == tool_call_id)
    }

    /// The open call waiting on `relay_id`.
    fn asking(&self, relay_id: &str) -> Option<String> {
        self.open_calls()
            .find(|c| matches!(&c.plan, CallPlan::Ask { relay_id: r } if r == relay_id))
            .map(|c| c.call.id.clone())
    }

    /// Gives an open call its result: the tool message joins the
    /// conversation, the plan records the status.
    fn answer(&mut self, tool_call_id: &str, outcome: ToolOutcome) -> Vec<EventKind> {
        let Some(planned) = self.planned_mut(tool_call_id) else { return Vec::new() };
        planned.result = Some(outcome.status());
        let name = planned.call.name.clone();
        let output = outcome.output();
        self.conversation.push(ChatMessage::tool_result(tool_call_id, output.clone()));
        self.updated_ms = now_ms();
        vec![EventKind::ToolResult {
            tool_call_id: tool_call_id.to_string(),
            name,
            status: outcome.status(),
            output: Value::String(output),
        }]
    }

    /// Approves (the call becomes runnable; `always` adds a session rule)
    /// or denies the call waiting on `relay_id`.
    fn apply_decision(&mut self, relay_id: &str, decision: &RelayDecision) -> Vec<EventKind> {
        let Some(call_id) = self.asking(relay_id) else { return Vec::new() };
        let Some(planned) = self.planned_mut(&call_id) else { return Vec::new() };
        let call = planned.call.clone();
        let mut events = vec![EventKind::RelayDecided {
            relay_id: relay_id.to_string(),
            tool_call_id: call.id.clone(),
            approved: decision.approved,
            always: decision.always,
        }];
        if decision.approved {
            planned.plan = CallPlan::Run;
            if decision.always {
                let arguments = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
                self.options.session_allow.push(ToolRule::always(&call.name, &arguments));
            }
            events.push(announcement(&call));
        } else {
            planned.plan = CallPlan::Answered;
            let reason = decision.reason.clone().unwrap_or_else(|| "the user denied this tool call".into());
            events.extend(self.answer(&call.id, ToolOutcome::Denied { reason }));
        }
        events
    }

    /// Ends the turn: calls it leaves open get a tool message (so the
    /// conversation stays one a model accepts), the status is `status`.
    fn close(&mut self, reason: TurnEndReason, status: Status) -> Vec<EventKind> {
        let open: Vec<String> = self.open_calls().map(|c| c.call.id.clone()).collect();
        for id in open {
            if let Some(planned) = self.planned_mut(&id) {
                planned.result = Some(ToolStatus::Error);
            }
            self.conversation.push(ChatMessage::tool_result(id, INTERRUPTED));
        }
        self.become_(status);
        vec![EventKind::TurnEnded { reason, iterations: self.turn_state.iterations, usage: self.turn_state.usage }]
    }
}

/// The `tool_call` event that announces a call about to run (or handed to
/// the client).
fn announcement(call: &ToolCall) -> EventKind {
    EventKind::ToolCall {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        arguments: serde_json::from_str(&call.arguments).unwrap_or(Value::Null),
    }
}

#[cfg(test)]
mod tests;
