//! The transitions of an rlm turn (see [`crate::domain::rlm`]): a model
//! reply with its cell (or without one), the host calls a running cell made
//! so far, the cell's end (with `FINAL`'s answer, the turn's answer), an
//! `exec` that asks for permission, and a replay that diverged.
//!
//! Each is committed with its events, so a replica that takes the turn over
//! knows which replies, cells and host calls it must not make again.

use super::{Refused, Session, Status, StepOutput, conflict, invalid};
use crate::domain::{
    conversation::{ChatMessage, Role},
    events::{EventKind, PendingRelay, RelayDecision, now_ms},
    options::ToolRule,
    rlm::{Cell, CellOutput, ExecAsk, RlmState, Tape, feedback},
};

/// What a model reply held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// One cell to run, with its `repl_input` id.
    Cell { id: String, code: String },
    /// No runnable cell: the model is told why.
    NoCell(String),
}

impl Session {
    /// The rlm loop's state for the turn in progress (`None` before its
    /// first reply).
    pub fn rlm(&self) -> Option<&RlmState> {
        self.turn_state.rlm.as_ref()
    }

    fn rlm_running(&mut self, what: &str) -> Result<&mut RlmState, Refused> {
        if self.status != Status::Running {
            return conflict(format!("the session is {}: it cannot {what}", self.status.as_str()));
        }
        if self.options.rlm.is_none() {
            return invalid("the session does not run in rlm mode");
        }
        Ok(self.turn_state.rlm.get_or_insert_with(RlmState::default))
    }

    /// The model replied (`output`, its usage counted): the reply joins the
    /// REPL's history, and its cell (if it had one) starts.
    pub fn rlm_reply(&mut self, output: StepOutput, reply: Reply) -> Result<Vec<EventKind>, Refused> {
        let rlm = self.rlm_running("take a model reply")?;
        if rlm.open_cell().is_some() {
            return conflict("a cell is still running");
        }
        let history_len = rlm.messages.len();
        rlm.messages.push(ChatMessage::text(Role::Assistant, output.text.clone()));
        let iteration = self.turn_state.iterations;
        let mut events = self.count_step(&output);
        let rlm = self.turn_state.rlm.get_or_insert_with(RlmState::default);
        match reply {
            Reply::Cell { id, code } => {
                rlm.cells.push(Cell {
                    id: id.clone(),
                    iteration,
                    code: code.clone(),
                    tape: Vec::new(),
                    output: None,
                    history_len,
                });
                events.push(EventKind::ReplInput { id, code, iteration });
            }
            Reply::NoCell(message) => {
                rlm.messages.push(ChatMessage::text(Role::User, format!("error: {message}")));
                events.push(EventKind::ReplError { message });
            }
        }
        self.updated_ms = now_ms();
        Ok(events)
    }

    /// The running cell's host calls so far (committed after each call
    /// that must not run twice), and the usage of the model calls they
    /// made (counted in the turn's usage).
    pub fn rlm_progress(&mut self, tape: Tape, usage: crate::domain::Usage) -> Result<Vec<EventKind>, Refused> {
        let rlm = self.rlm_running("record a cell's progress")?;
        let Some(cell) = rlm.open_cell_mut() else { return conflict("no cell is running") };
        if tape.len() < cell.tape.len() || tape[..cell.tape.len()] != cell.tape[..] {
            return invalid("a cell's host calls only grow");
        }
        cell.tape = tape;
        // Counted, not announced: the calls' own runs sent their usage.
        self.turn_state.usage.add(&usage);
        self.usage.add(&usage);
        self.updated_ms = now_ms();
        Ok(Vec::new())
    }

    /// The running cell ended with `output` (its full `tape`). After
    /// `FINAL`, its answer is the turn's: it joins the conversation as the
    /// assistant's message.
    pub fn rlm_cell_done(&mut self, tape: Tape, output: CellOutput) -> Result<Vec<EventKind>, Refused> {
        let rlm = self.rlm_running("finish a cell")?;
        let Some(cell) = rlm.open_cell_mut() else { return conflict("no cell is running") };
        if tape.len() < cell.tape.len() || tape[..cell.tape.len()] != cell.tape[..] {
            return invalid("a cell's host calls only grow");
        }
        cell.tape = tape;
        cell.output = Some(output.clone());
        let (id, iteration) = (cell.id.clone(), cell.iteration);
        rlm.messages.push(ChatMessage::text(Role::User, feedback(&output)));
        let mut events = vec![EventKind::ReplOutput {
            id,
            stdout: output.stdout,
            error: output.error,
            done: output.done,
            iteration,
            duration_ms: output.duration_ms,
            truncated: output.truncated,
        }];
        if let Some(answer) = output.answer.filter(|_| output.done) {
            events.push(EventKind::TextDelta { text: answer.clone() });
            events.push(EventKind::MessageCompleted { content: Some(answer.clone()), reasoning: None });
            self.conversation.push(ChatMessage::text(Role::Assistant, answer));
        }
        self.updated_ms = now_ms();
        Ok(events)
    }

    /// The turn's answer, once a cell called `FINAL`.
    pub fn rlm_answered(&self) -> bool {
        self.rlm().and_then(|r| r.cells.last()).and_then(|c| c.output.as_ref()).is_some_and(|o| o.done)
    }

    /// The running cell's `exec` of `command` needs a permission decision:
    /// relay `relay_id` (already indexed) asks for it.
    pub fn rlm_ask_exec(
        &mut self,
        relay_id: &str,
        tool_call_id: &str,
        command: &str,
    ) -> Result<Vec<EventKind>, Refused> {
        let rlm = self.rlm_running("ask for a permission")?;
        if rlm.open_cell().is_none() {
            return conflict("no cell is running");
        }
        if rlm.ask.is_some() {
            return conflict("an exec already waits for a decision");
        }
        let ask = ExecAsk {
            relay_id: relay_id.to_string(),
            tool_call_id: tool_call_id.to_string(),
            command: command.to_string(),
            decision: None,
        };
        rlm.ask = Some(ask);
        self.become_(Status::AwaitingRelay);
        Ok(vec![EventKind::RelayRequested(exec_relay(relay_id, tool_call_id, command))])
    }

    /// The decided `exec` is taken up by its cell (its result follows in
    /// the cell's tape).
    pub fn rlm_take_decision(&mut self) -> Result<RelayDecision, Refused> {
        let rlm = self.rlm_running("take a decision")?;
        match rlm.ask.take() {
            Some(ExecAsk { decision: Some(decision), .. }) => Ok(decision),
            other => {
                rlm.ask = other;
                conflict("no decided exec")
            }
        }
    }

    /// A replay of cell `index` printed something else than it did: the
    /// REPL cannot be rebuilt from there, so that cell and the ones after
    /// it are dropped and the model is asked again from before it.
    pub fn rlm_restart(&mut self, index: usize, replica: &str) -> Result<Vec<EventKind>, Refused> {
        let rlm = self.rlm_running("restart a cell")?;
        let Some(cell) = rlm.cells.get(index) else { return invalid(format!("there is no cell {index}")) };
        let (history_len, iteration) = (cell.history_len, cell.iteration);
        rlm.messages.truncate(history_len);
        rlm.cells.truncate(index);
        rlm.ask = None;
        self.turn_state.iterations = iteration;
        self.updated_ms = now_ms();
        Ok(vec![EventKind::StepRestarted { step: iteration + 1, replica: replica.to_string() }])
    }

    /// The `exec` waiting for a decision, as a relay (for
    /// [`Session::pending_relays`]).
    pub(super) fn rlm_pending_relay(&self) -> Option<PendingRelay> {
        let ask = self.rlm()?.ask.as_ref().filter(|a| a.decision.is_none())?;
        Some(exec_relay(&ask.relay_id, &ask.tool_call_id, &ask.command))
    }

    /// Records `decision` on the waiting `exec`, if `relay_id` is its relay.
    pub(super) fn rlm_decide(&mut self, relay_id: &str, decision: &RelayDecision) -> Option<Vec<EventKind>> {
        let ask =
            self.turn_state.rlm.as_mut()?.ask.as_mut().filter(|a| a.relay_id == relay_id && a.decision.is_none())?;
        ask.decision = Some(decision.clone());
        let (tool_call_id, command) = (ask.tool_call_id.clone(), ask.command.clone());
        if decision.approved && decision.always {
            let arguments = serde_json::json!({"command": command});
            self.options.session_allow.push(ToolRule::always(EXEC_TOOL, &arguments));
        }
        Some(vec![EventKind::RelayDecided {
            relay_id: relay_id.to_string(),
            tool_call_id,
            approved: decision.approved,
            always: decision.always,
        }])
    }
}

/// The name `exec` is permission-checked under.
pub const EXEC_TOOL: &str = "exec";

fn exec_relay(relay_id: &str, tool_call_id: &str, command: &str) -> PendingRelay {
    PendingRelay {
        relay_id: relay_id.to_string(),
        tool_call_id: tool_call_id.to_string(),
        tool: EXEC_TOOL.to_string(),
        params: serde_json::json!({"command": command}),
    }
}
