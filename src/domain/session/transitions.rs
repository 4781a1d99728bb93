//! The transitions of a [`Session`]: each checks that the session may take
//! it, changes it, and returns the events it implies. Nothing else changes
//! a session (but the title's transition, in `titling.rs`).

use serde_json::Value;

use super::{
    AnswerRules, Answers, CallDecision, CallPlan, INTERRUPTED, OUTCOME_UNKNOWN, PlannedCall, Refused, RelayDecision,
    Session, Status, StepOutput, StepRestart, Truncation, TurnError, TurnState, conflict, invalid,
};
use crate::domain::{
    codes::{FailureCode, ToolOutcome, ToolStatus},
    conversation::{ChatMessage, Role, ToolCall},
    events::{EventKind, PendingRelay, TurnEndReason, now_ms},
    options::{ApprovalMode, PermissionRules, ToolRule},
};

impl Session {
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

    /// A turn without a new message: the model answers the conversation as
    /// it was seeded (a client's history that ends with tool results or a
    /// user message). Only for a session's first turn.
    pub fn start_turn_on_history(&mut self, trace_parent: Option<String>) -> Result<Vec<EventKind>, Refused> {
        if self.status != Status::Idle || self.turn != 0 {
            return conflict("only a new, seeded session can start a turn without a message");
        }
        match self.conversation.messages.last().map(|m| m.role) {
            Some(Role::User | Role::Tool) => {}
            _ => return invalid("the conversation must end with a user message or tool results"),
        }
        self.turn = 1;
        self.turn_state = TurnState::default();
        self.trace_parent = trace_parent;
        self.become_(Status::Running);
        Ok(vec![EventKind::TurnStarted { turn: self.turn, model: self.model.clone() }])
    }

    /// The client answers a paused turn. Under [`AnswerRules::Strict`]
    /// every pending frontend call needs exactly one result and every
    /// pending approval exactly one decision; under
    /// [`AnswerRules::Lenient`] what is missing is denied or failed and what
    /// does not fit is ignored.
    pub fn resume(&mut self, answers: &Answers, trace_parent: Option<String>) -> Result<Vec<EventKind>, Refused> {
        if self.status != Status::AwaitingClient {
            return conflict(format!("the session is {}, not paused for the client", self.status.as_str()));
        }
        if let AnswerRules::Lenient { unanswered, missing_result } = &answers.rules {
            let events = self.resume_leniently(answers, unanswered, missing_result);
            self.trace_parent = trace_parent.or(self.trace_parent.take());
            self.become_(Status::Running);
            return Ok(events);
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

    /// [`AnswerRules::Lenient`]: each pending call takes the first answer
    /// given for it, or the default for a call left unanswered.
    fn resume_leniently(&mut self, answers: &Answers, unanswered: &str, missing_result: &str) -> Vec<EventKind> {
        let open: Vec<(String, CallPlan)> = self.open_calls().map(|c| (c.call.id.clone(), c.plan.clone())).collect();
        let mut events = vec![EventKind::Resumed { turn: self.turn }];
        for (id, plan) in open {
            match plan {
                CallPlan::Client => {
                    let outcome = match answers.outputs.iter().find(|(c, _)| *c == id) {
                        Some((_, output)) => ToolOutcome::Success(output.clone()),
                        None => ToolOutcome::Error(missing_result.to_string()),
                    };
                    events.extend(self.answer(&id, outcome));
                }
                CallPlan::Ask { relay_id } => {
                    let decision = match answers.decisions.iter().find(|d| d.tool_call_id == id) {
                        Some(d) => RelayDecision { approved: d.approved, always: false, reason: d.reason.clone() },
                        None => RelayDecision { approved: false, always: false, reason: Some(unanswered.to_string()) },
                    };
                    events.extend(self.apply_decision(&relay_id, &decision));
                }
                _ => {}
            }
        }
        events
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
        if !self.needs_owner() {
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
        let messages_before = self.conversation.messages.len();
        self.conversation.messages = messages.clone();
        self.conversation.rewritten = true;
        self.updated_ms = now_ms();
        Ok(vec![EventKind::CompactionDone { tokens_before, tokens_after, summary, messages_before, messages }])
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
        let mut events = self.count_step(&output);
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
    /// `truncation` says how, if it was). A tool's `state_delta` (a JSON
    /// Patch of the session's state) is applied with its result: then
    /// `state_updated` comes before the `tool_result`. A patch that does
    /// not apply changes nothing and turns the result into an error that
    /// says so, for the model.
    pub fn finish_tool(
        &mut self,
        tool_call_id: &str,
        outcome: ToolOutcome,
        truncation: Option<Truncation>,
        state_delta: Option<&json_patch::Patch>,
    ) -> Result<Vec<EventKind>, Refused> {
        if !self.status.is_active() {
            return conflict(format!("the session is {}: no tool runs", self.status.as_str()));
        }
        if !self.open_calls().any(|c| c.call.id == tool_call_id && c.plan == CallPlan::Run) {
            return invalid(format!("tool call {tool_call_id:?} is not running"));
        }
        self.turn_state.truncations.extend(truncation);
        let (mut events, outcome) = self.apply_state_delta(outcome, state_delta);
        events.extend(self.answer(tool_call_id, outcome));
        Ok(events)
    }

    /// [`Session::finish_tool`] for a tool that answers llm-gateway's
    /// `{context, result}` (`bash`, `read`, `patch`): the model reads the
    /// outcome's text (the context), the `tool_result` event's output is
    /// `{context, result}` (`result` left out when there is none).
    pub fn finish_tool_with_result(
        &mut self,
        tool_call_id: &str,
        outcome: ToolOutcome,
        truncation: Option<Truncation>,
        result: Option<Value>,
    ) -> Result<Vec<EventKind>, Refused> {
        let mut events = self.finish_tool(tool_call_id, outcome, truncation, None)?;
        for event in &mut events {
            if let EventKind::ToolResult { tool_call_id: id, output, .. } = event
                && id == tool_call_id
            {
                let mut shaped = serde_json::Map::new();
                shaped.insert("context".into(), output.take());
                if let Some(result) = result.clone() {
                    shaped.insert("result".into(), result);
                }
                *output = Value::Object(shaped);
            }
        }
        Ok(events)
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
            let denied = RelayDecision { approved: false, always: false, reason: Some(reason.to_string()) };
            if let Some(decided) = self.rlm_decide(&relay_id, &denied) {
                events.extend(decided);
                continue;
            }
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
    /// (`Final`), or the turn used its model calls (`MaxIterations`). With
    /// `titles`, a session without a title gets one due: its `turn_ended`
    /// says a title comes next.
    pub fn end(&mut self, reason: TurnEndReason, titles: bool) -> Result<Vec<EventKind>, Refused> {
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
        if titles && self.title.is_none() {
            self.title_due = true;
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

    pub(super) fn become_(&mut self, status: Status) {
        self.status = status;
        self.updated_ms = now_ms();
    }

    /// A model step's reply is in: one more iteration, its usage counted
    /// (turn and session), and its events: the completed message (when it
    /// said anything) and the usage.
    pub(super) fn count_step(&mut self, output: &StepOutput) -> Vec<EventKind> {
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
        events
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
        if let Some(events) = self.rlm_decide(relay_id, decision) {
            return events;
        }
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
    /// conversation stays one a model accepts), the status is `status`. Its
    /// `turn_ended` says whether a title comes next (one may still be due
    /// from an earlier turn whose title a new turn interrupted).
    fn close(&mut self, reason: TurnEndReason, status: Status) -> Vec<EventKind> {
        let open: Vec<String> = self.open_calls().map(|c| c.call.id.clone()).collect();
        for id in open {
            if let Some(planned) = self.planned_mut(&id) {
                planned.result = Some(ToolStatus::Error);
            }
            self.conversation.push(ChatMessage::tool_result(id, INTERRUPTED));
        }
        self.become_(status);
        vec![EventKind::TurnEnded {
            reason,
            iterations: self.turn_state.iterations,
            usage: self.turn_state.usage,
            title_pending: self.title_due,
        }]
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
