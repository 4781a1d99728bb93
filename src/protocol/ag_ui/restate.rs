//! What an AG-UI stream restates before its first event, so the client's
//! messages (and state) are the thread's as stored, whatever it held:
//!
//! - a run that continues a thread (`POST /v1/ag-ui` on a known thread):
//!   `RUN_STARTED`, then `MESSAGES_SNAPSHOT` of the conversation as the
//!   run's start committed it — the user's new message, or the client's
//!   tool results, included. Its state comes as the run's first event
//!   (`state_replaced` → `STATE_SNAPSHOT`) when the run brings one.
//! - a client joining a running thread (`GET …/events?format=ag-ui`, see
//!   `Sessions::join`): `RUN_STARTED` (run `<thread>-<turn>`), then
//!   `MESSAGES_SNAPSHOT` of the conversation as of the last commit,
//!   `STATE_SNAPSHOT` of the state, a `CUSTOM relay_requested` for each
//!   relay still waiting for a decision, and a `STEP_STARTED` for each tool
//!   call still running; the step in progress follows whole.
//!
//! The snapshot's messages have ids of their own (`history-<n>`, see
//! [`super::snapshot`]): the client's reducer drops the messages it held
//! that the snapshot does not list (reasoning ones aside), so it ends with
//! the stored conversation, once, and the events after it add to that.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::{AgUiEncoder, event, snapshot};
use crate::{
    domain::{ChatMessage, PendingRelay, Session, ToolCall, now_ms},
    protocol::Frame,
};

/// What a stream restates.
#[derive(Debug, Default)]
pub(super) struct Restatement {
    /// The conversation, in AG-UI shapes.
    messages: Vec<Value>,
    /// The state, for a join.
    state: Option<Value>,
    /// Relays waiting for a decision, for a join.
    relays: Vec<PendingRelay>,
    /// Tool calls running, for a join: their steps are open.
    running: Vec<ToolCall>,
}

impl AgUiEncoder {
    /// The stream of a run that continues its thread: it restates
    /// `conversation` (as the run's start committed it) first.
    pub fn restating(mut self, conversation: &[ChatMessage]) -> Self {
        self.know_calls_of(conversation);
        self.restatement = Some(Restatement { messages: snapshot::render(conversation), ..Restatement::default() });
        self
    }

    /// A client joins `session` while its turn runs: the stream restates it
    /// as of its last commit (with its conversation) and goes on from there.
    pub(super) fn join(&mut self, session: &Session) {
        let history = session.history().unwrap_or_default();
        self.know_calls_of(history);
        self.thread_id = Some(session.id().to_string());
        self.run_id = Some(format!("{}-{}", session.id(), session.turn()));
        self.turn = Some(session.turn());
        self.model = Some(session.model().to_string());
        self.frontend = session.options().frontend_tools.iter().map(|t| t.name.clone()).collect();
        let live: HashSet<String> = session.live_relays().into_iter().collect();
        self.restatement = Some(Restatement {
            messages: snapshot::render(history),
            state: Some(session.state().clone()),
            relays: session.pending_relays().into_iter().filter(|r| live.contains(&r.relay_id)).collect(),
            running: session.runnable(),
        });
    }

    /// The calls `messages` hold are the client's after the snapshot: not
    /// opened again.
    fn know_calls_of(&mut self, messages: &[ChatMessage]) {
        self.known_calls.extend(messages.iter().flat_map(|m| m.tool_calls.iter().map(|c| c.id.clone())));
    }

    /// The frames of the restatement, if the stream has one; the run starts
    /// with them.
    pub(super) fn restatement_frames(&mut self) -> Vec<Frame> {
        let Some(restatement) = self.restatement.take() else { return Vec::new() };
        self.started = true;
        let ts = now_ms();
        let mut out = vec![event(ts, "RUN_STARTED", self.run_fields())];
        out.push(event(ts, "MESSAGES_SNAPSHOT", json!({"messages": restatement.messages})));
        if let Some(state) = restatement.state {
            out.push(event(ts, "STATE_SNAPSHOT", json!({"snapshot": state})));
        }
        for relay in &restatement.relays {
            out.push(self.relay_requested(ts, relay));
        }
        for call in &restatement.running {
            self.start_tool_step(ts, &call.id, &call.name, &mut out);
        }
        out.into_iter().map(|data| Frame::data(crate::protocol::json_text(&data))).collect()
    }
}
