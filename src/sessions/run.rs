//! [`RunHandle`]: what the orchestrator holds while it runs a session's turn
//! on this replica, for one tenure. Everything it does to the session goes
//! through here: a transition of the [`Session`] is applied in memory and
//! its events are staged; [`RunHandle::commit`] writes the session's change
//! and the staged events as one commit (through the writer, fenced by the
//! tenure). Streamed events (text deltas) go out without waiting. The turn's
//! end — finished, failed, cancelled, paused, handed off — is one commit
//! that also gives the session up.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{
    SessionError, Sessions, main_agent, stamp,
    writer::{Change, Pipe, WriteError},
};
use crate::{
    domain::{AgentRef, ConversationChange, EventKind, Refused, RelayDecision, Session},
    store::{MessagesWrite, SessionKey, StateWrite},
    telemetry::timing::UpstreamTime,
};

/// Why a turn must stop where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// A cancel request: end the turn as cancelled.
    Cancel,
    /// This replica is draining: hand the session to another one.
    Drain,
    /// Another instance runs it now, or this one is going away without a
    /// hand-off (shutdown, a simulated crash): write nothing.
    Lost,
    /// The store failed for too long: write nothing; the session is
    /// restarted from its last commit once the store answers.
    StoreDown,
}

/// This replica's hold on a running session.
#[derive(Clone)]
pub(super) struct Running {
    /// Cancelled when the turn must stop; [`Running::stop`] says why.
    pub cancel: CancellationToken,
    reason: Arc<Mutex<Option<Stop>>>,
    /// Notified when something was left for the turn (a relay decision).
    pub wake: Arc<Notify>,
    /// Time spent on upstream model and tool calls (`Server-Timing`).
    pub upstream: Arc<UpstreamTime>,
    /// The tenure's commit that acquired the session.
    pub epoch: u64,
}

impl Running {
    pub fn new(cancel: CancellationToken, epoch: u64) -> Self {
        Self { cancel, reason: Arc::default(), wake: Arc::new(Notify::new()), upstream: Arc::default(), epoch }
    }

    /// Stops the turn for `reason`; the first reason given wins.
    pub fn stop(&self, reason: Stop) {
        let mut current = self.reason.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        current.get_or_insert(reason);
        self.cancel.cancel();
    }

    /// Whether `other` is this same hold (not merely one of the same
    /// epoch: a turn dropped before its session was created has the epoch
    /// of a session of that id that may run here).
    pub fn is(&self, other: &Running) -> bool {
        Arc::ptr_eq(&self.reason, &other.reason)
    }

    pub fn reason(&self) -> Option<Stop> {
        *self.reason.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Emits streamed events for a session from anywhere (parallel tool calls,
/// subagents) without holding the [`RunHandle`].
#[derive(Clone)]
pub struct Emitter {
    sessions: Sessions,
    pipe: Pipe,
}

impl Emitter {
    /// Queues an event; it reaches followers once committed.
    pub async fn emit(&self, agent: &AgentRef, kind: EventKind) -> Result<(), SessionError> {
        self.sessions.observe([&kind]);
        self.pipe.emit(stamp(kind, agent.clone())).await.map_err(write_error)
    }
}

/// What other replicas left for the running turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inbox {
    pub cancel: bool,
    /// Decisions on live relays: (relay id, decision).
    pub decisions: Vec<(String, RelayDecision)>,
}

pub struct RunHandle {
    sessions: Sessions,
    key: SessionKey,
    /// Boxed: the handle lives in the turn's future, as long as the chat.
    session: Box<Session>,
    pipe: Pipe,
    running: Running,
    taken_over_from: Option<String>,
    /// Text of a step cut short that this run continues (provider prefill).
    continuation: Option<String>,
    /// Events of transitions applied since the last commit.
    staged: Vec<EventKind>,
    /// Relays any replica may decide, as of the last commit.
    live_relays: Vec<String>,
    clear_cancel: bool,
    /// Files to write with the next commit.
    files: Option<crate::store::WorkspaceWrite>,
    /// The tenure is over here ([`RunHandle::close`] ran).
    closed: bool,
    /// A commit gave the session up (end, pause, hand-off).
    released: bool,
}

impl RunHandle {
    pub(super) fn new(
        sessions: Sessions,
        key: SessionKey,
        session: Box<Session>,
        pipe: Pipe,
        running: Running,
        taken_over_from: Option<String>,
        continuation: Option<String>,
    ) -> Self {
        let live_relays = session.live_relays();
        Self {
            sessions,
            key,
            session,
            pipe,
            running,
            taken_over_from,
            continuation,
            staged: Vec::new(),
            live_relays,
            clear_cancel: false,
            files: None,
            closed: false,
            released: false,
        }
    }

    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    /// This tenure's number (a workspace is materialised per tenure).
    pub fn epoch(&self) -> u64 {
        self.running.epoch
    }

    /// The session as this run has it (its transitions applied, committed
    /// or staged).
    pub fn session(&self) -> &Session {
        &self.session
    }

    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// The replica this session was taken over from, when this run is a
    /// restart from the last commit after that replica stopped.
    pub fn taken_over_from(&self) -> Option<&str> {
        self.taken_over_from.as_deref()
    }

    /// The text of the step this run continues, once (see
    /// [`crate::domain::StepRestart::Continue`]).
    pub fn take_continuation(&mut self) -> Option<String> {
        self.continuation.take()
    }

    /// Cancelled when the turn must stop; [`RunHandle::stop_reason`] says why.
    pub fn cancelled(&self) -> &CancellationToken {
        &self.running.cancel
    }

    pub fn stop_reason(&self) -> Option<Stop> {
        self.running.reason().or_else(|| match self.pipe.broken() {
            Some(WriteError::Store(_)) => Some(Stop::StoreDown),
            Some(_) => Some(Stop::Lost),
            None => None,
        })
    }

    /// Where model and tool calls add the time they waited upstream.
    pub fn upstream_time(&self) -> &Arc<UpstreamTime> {
        &self.running.upstream
    }

    /// Notified when something was left for this turn.
    pub fn wake(&self) -> Arc<Notify> {
        self.running.wake.clone()
    }

    pub fn emitter(&self) -> Emitter {
        Emitter { sessions: self.sessions.clone(), pipe: self.pipe.clone() }
    }

    /// Queues a streamed event of `agent`.
    pub async fn emit(&self, agent: &AgentRef, kind: EventKind) -> Result<(), SessionError> {
        self.emitter().emit(agent, kind).await
    }

    /// Applies a transition to the session and stages its events (written
    /// by the next [`RunHandle::commit`]).
    pub fn apply(
        &mut self,
        transition: impl FnOnce(&mut Session) -> Result<Vec<EventKind>, Refused>,
    ) -> Result<(), SessionError> {
        let events = transition(&mut self.session)?;
        self.staged.extend(events);
        Ok(())
    }

    /// Applies a transition and commits it.
    pub async fn transition(
        &mut self,
        transition: impl FnOnce(&mut Session) -> Result<Vec<EventKind>, Refused>,
    ) -> Result<(), SessionError> {
        self.apply(transition)?;
        self.commit().await
    }

    /// Applies a transition and commits it together with `files`, the
    /// change of the session's workspace it goes with (a tool's result and
    /// the files the tool changed): a takeover sees both or neither.
    pub async fn transition_with_files(
        &mut self,
        transition: impl FnOnce(&mut Session) -> Result<Vec<EventKind>, Refused>,
        files: crate::store::WorkspaceWrite,
    ) -> Result<(), SessionError> {
        self.apply(transition)?;
        self.files = (!files.is_empty()).then_some(files);
        self.commit().await
    }

    /// The cancel request has been taken up (by a transition about to be
    /// committed).
    pub fn cancel_taken(&mut self) {
        self.clear_cancel = true;
    }

    /// Writes the session as it stands and the staged events, in one commit.
    pub async fn commit(&mut self) -> Result<(), SessionError> {
        self.write(false).await
    }

    /// Reads what other replicas left for this turn. Finding that another
    /// instance runs the session now stops the turn.
    pub async fn inbox(&mut self) -> Result<Inbox, SessionError> {
        let record = self.sessions.store().sessions.load(&self.key, false).await?.ok_or(SessionError::NotFound)?;
        if record.owner.as_deref() != Some(self.sessions.instance()) || record.epoch != self.running.epoch {
            self.running.stop(Stop::Lost);
            return Err(SessionError::Conflict("another replica runs this session now".into()));
        }
        if record.cancel_requested {
            self.running.stop(Stop::Cancel);
        }
        let decisions = (record.relays.into_iter())
            .filter_map(|(id, decision)| Some((id, serde_json::from_str(&decision?).ok()?)))
            .collect();
        Ok(Inbox { cancel: record.cancel_requested, decisions })
    }

    /// Applies the transition that ends the turn (or pauses it) and commits
    /// it, giving the session up.
    pub async fn end(
        mut self,
        transition: impl FnOnce(&mut Session) -> Result<Vec<EventKind>, Refused>,
    ) -> Result<(), SessionError> {
        let result = match self.apply(transition) {
            Ok(()) => self.write(true).await,
            Err(e) => Err(e),
        };
        self.close().await;
        result
    }

    /// Commits the transitions applied since the last commit, giving the
    /// session up.
    pub async fn release(self) -> Result<(), SessionError> {
        self.end(|_| Ok(Vec::new())).await
    }

    /// Gives the session up as it is (draining): another replica carries
    /// the turn on from its last commit, at once. The state is not written
    /// again, so what the turn streamed since (a step cut short) stays
    /// recognisable to the replica that takes over.
    pub async fn hand_off(mut self) -> Result<(), SessionError> {
        let result = if self.staged.is_empty() && self.session.conversation_change() == ConversationChange::Unchanged {
            self.give_up().await
        } else {
            self.write(true).await
        };
        self.close().await;
        result
    }

    /// Stops running here without writing anything more. Unless another
    /// instance runs the session now, it is restarted here from its last
    /// commit (once the store answers, when the store is what stopped it).
    pub async fn abandon(mut self) {
        self.close().await;
    }

    /// Ends the run as its stop reason says: a cancel request ends the turn
    /// cancelled, a drain hands the session off, anything else leaves it
    /// ([`RunHandle::abandon`]).
    pub async fn stop(mut self) -> Result<(), SessionError> {
        match self.stop_reason() {
            Some(Stop::Cancel) => {
                self.cancel_taken();
                self.end(|s| s.cancel()).await
            }
            Some(Stop::Drain) => self.hand_off().await,
            _ => {
                self.abandon().await;
                Ok(())
            }
        }
    }

    /// Releases the session without writing its state.
    async fn give_up(&mut self) -> Result<(), SessionError> {
        let change = Change { release: true, ..Change::default() };
        self.pipe.commit(change).await.map_err(write_error)?;
        self.released = true;
        Ok(())
    }

    async fn write(&mut self, release: bool) -> Result<(), SessionError> {
        let events: Vec<_> = std::mem::take(&mut self.staged);
        self.sessions.observe(&events);
        let live = self.session.live_relays();
        let open_relays = live.iter().filter(|r| !self.live_relays.contains(r)).cloned().collect();
        let close_relays = self.live_relays.iter().filter(|r| !live.contains(r)).cloned().collect();
        let messages = match self.session.conversation_change() {
            ConversationChange::Unchanged => MessagesWrite::Keep,
            ConversationChange::Append(messages) => MessagesWrite::Append(encode_all(messages)?),
            ConversationChange::Replace(messages) => MessagesWrite::Replace(encode_all(messages)?),
        };
        let doc = serde_json::to_string(&self.session).map_err(|e| SessionError::Invalid(e.to_string()))?;
        let change = Change {
            events: events.into_iter().map(|kind| stamp(kind, main_agent())).collect(),
            state: Some(StateWrite { doc, status: self.session.status().as_str() }),
            messages,
            release,
            open_relays,
            close_relays,
            clear_cancel: std::mem::take(&mut self.clear_cancel),
            workspace: self.files.take(),
        };
        self.pipe.commit(change).await.map_err(|e| {
            match e {
                WriteError::Store(_) => self.running.stop(Stop::StoreDown),
                _ => self.running.stop(Stop::Lost),
            }
            write_error(e)
        })?;
        self.session.conversation_saved();
        self.live_relays = live;
        self.released = release;
        Ok(())
    }

    /// No longer running here.
    async fn close(&mut self) {
        if std::mem::replace(&mut self.closed, true) {
            return;
        }
        self.pipe.close().await;
        self.sessions.forget_running(&self.key, &self.running).await;
        // Not given up, and not taken by another instance: restart it here.
        // What is stored decides whether it still runs (the session in
        // memory may be ahead of it): the restart looks.
        if !self.released && matches!(self.stop_reason(), None | Some(Stop::StoreDown)) {
            self.sessions.recover(self.key.clone());
        }
    }
}

/// A handle dropped without ending its turn (a runner that returned early,
/// or panicked) still gives its session up here; the session is restarted
/// from its last commit, as after a store failure.
impl Drop for RunHandle {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let (pipe, sessions, key, running) =
            (self.pipe.clone(), self.sessions.clone(), self.key.clone(), self.running.clone());
        self.running.stop(Stop::StoreDown);
        sessions.clone().spawn(async move {
            pipe.close().await;
            sessions.forget_running(&key, &running).await;
            sessions.recover(key);
        });
    }
}

fn encode_all(messages: &[crate::domain::ChatMessage]) -> Result<Vec<String>, SessionError> {
    messages.iter().map(|m| serde_json::to_string(m).map_err(|e| SessionError::Invalid(e.to_string()))).collect()
}

fn write_error(error: WriteError) -> SessionError {
    match error {
        WriteError::Store(e) => SessionError::Store(e),
        WriteError::Fenced => SessionError::Conflict("another replica runs this session now".into()),
        WriteError::Stopped => SessionError::Store(crate::store::StoreError::Unavailable("shutting down".into())),
    }
}
