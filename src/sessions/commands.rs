//! Commands that change a session from outside its turn: a new message, a
//! resume after a pause, a regenerated answer, a permission decision, a
//! cancel. Each is accepted on any replica. A new message, a resume and a
//! regeneration are one commit fenced by the session as it was read: of
//! two racing commands exactly one wins and the other gets a conflict. A
//! decision and a cancel of a running turn are left in the session's inbox
//! for its owner, who takes them up in its next commit.

use super::{SessionError, Sessions, Started, commit::Basis, fence_of, ownership};
use crate::{
    domain::{Answers, ChatMessage, EventKind, RelayDecision, RunInput, Session, Status},
    principal::Principal,
    store::{CancelRequest, Decided, Record, SessionKey},
};

/// How often a cancel of a paused session reads and tries again when the
/// session changed between the read and the write.
const WRITE_RETRIES: usize = 5;

/// A session read for a command by its caller, who decides on its state
/// (a chat request: resume the paused turn, or start one) and then acts on
/// the same read: [`Sessions::start_turn_on`], [`Sessions::resume_on`].
/// Before that, a client that declares each run (AG-UI) begins its run on
/// it ([`Loaded::begin_run`]): committed with the start or the resume.
pub struct Loaded {
    key: SessionKey,
    record: Record,
    session: Session,
    /// Events of [`Loaded::begin_run`], committed after the start's.
    prepared: Vec<EventKind>,
    /// The start hands back the conversation as committed.
    restate: bool,
}

impl Loaded {
    fn new(key: SessionKey, record: Record, session: Session) -> Self {
        Self { key, record, session, prepared: Vec::new(), restate: false }
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Remembers tools the client runs that its messages show
    /// ([`Session::learn_client_tools`]) in the session as read: the
    /// command taken on it next commits them with its own change.
    pub fn learn_client_tools(&mut self, names: &[String]) -> Result<usize, SessionError> {
        Ok(self.session.learn_client_tools(names)?)
    }

    /// Begins the client's run (see [`Session::begin_run`]): its tools,
    /// context and state, committed with the start or resume that follows.
    pub fn begin_run(&mut self, run: RunInput) -> Result<(), SessionError> {
        let events = self.session.begin_run(run)?;
        self.prepared.extend(events);
        Ok(())
    }

    /// The turn started or resumed from this read carries the conversation
    /// as committed ([`Started::conversation`]), for a dialect that restates
    /// it to its client.
    pub fn restate(&mut self) {
        self.restate = true;
    }

    /// Applies the start's transition and takes what it commits.
    fn start(
        self,
        transition: impl FnOnce(&mut Session) -> Result<Vec<EventKind>, crate::domain::Refused>,
    ) -> Result<Starting, SessionError> {
        let Loaded { key, record, mut session, prepared, restate } = self;
        let mut events = transition(&mut session)?;
        events.extend(prepared);
        let conversation = if restate { session.history().map(<[ChatMessage]>::to_vec) } else { None };
        Ok(Starting { key, record, session, events, conversation })
    }
}

/// A start or resume applied to a [`Loaded`] session, to commit.
struct Starting {
    key: SessionKey,
    record: Record,
    session: Session,
    /// The start's events, then the run's.
    events: Vec<EventKind>,
    /// The conversation to hand back, when asked for.
    conversation: Option<Vec<ChatMessage>>,
}

impl Sessions {
    /// Reads a session for a command, with its conversation; an active one
    /// whose owner is gone is taken over, as [`Sessions::get`] does.
    pub async fn load_for_command(&self, principal: &Principal, id: &str) -> Result<Loaded, SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        let (record, session) = self.load_visible(principal, &key, true).await?;
        if session.status().is_active() {
            ownership::take_over_if_orphaned(self, &key, &record).await;
        }
        Ok(Loaded::new(key, record, session))
    }

    /// Starts a turn with a new user message on an idle, completed, failed
    /// or cancelled session, on this replica.
    pub async fn start_turn(
        &self,
        principal: &Principal,
        id: &str,
        message: ChatMessage,
    ) -> Result<Started, SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        let (record, session) = self.load_visible(principal, &key, true).await?;
        self.start_turn_on(Loaded::new(key, record, session), message).await
    }

    /// [`Sessions::start_turn`] on a session the caller has read.
    pub async fn start_turn_on(&self, loaded: Loaded, message: ChatMessage) -> Result<Started, SessionError> {
        let earlier = loaded.session.trace_parent().map(str::to_string);
        let trace = self.request_trace();
        let Starting { key, record, session, events, conversation } = loaded.start(|s| s.start_turn(message, trace))?;
        let started = self.activate(&key, Basis::Existing(&record), session, events, earlier).await?;
        Ok(Started { conversation, ..started })
    }

    /// Drops the last answer of a session the caller has read and answers
    /// its user message again, on this replica ([`Session::regenerate`]):
    /// the rewritten conversation and the new turn's start are one commit.
    pub async fn regenerate_on(&self, loaded: Loaded) -> Result<Started, SessionError> {
        let earlier = loaded.session.trace_parent().map(str::to_string);
        let trace = self.request_trace();
        let Starting { key, record, session, events, conversation } = loaded.start(|s| s.regenerate(trace))?;
        let started = self.activate(&key, Basis::Existing(&record), session, events, earlier).await?;
        Ok(Started { conversation, ..started })
    }

    /// Resumes a paused turn with the client's answers: every pending
    /// frontend call needs one result and every pending approval one
    /// decision. Returns the continuation.
    pub async fn resume(&self, principal: &Principal, id: &str, answers: Answers) -> Result<Started, SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        let (record, session) = self.load_visible(principal, &key, true).await?;
        self.resume_on(Loaded::new(key, record, session), answers).await
    }

    /// [`Sessions::resume`] on a session the caller has read.
    pub async fn resume_on(&self, loaded: Loaded, answers: Answers) -> Result<Started, SessionError> {
        let earlier = loaded.session.trace_parent().map(str::to_string);
        let trace = self.request_trace();
        let Starting { key, record, session, events, conversation } = loaded.start(|s| s.resume(&answers, trace))?;
        let dialect = session.dialect().to_string();
        let started = self.activate(&key, Basis::Existing(&record), session, events, earlier).await?;
        self.metrics().resume(&dialect);
        Ok(Started { conversation, ..started })
    }

    /// Starts a turn on a session the caller has read that only compacts its
    /// conversation (zot's `compact`), on this replica.
    pub async fn start_compaction_on(&self, loaded: Loaded) -> Result<Started, SessionError> {
        let earlier = loaded.session.trace_parent().map(str::to_string);
        let trace = self.request_trace();
        let Starting { key, record, session, events, .. } = loaded.start(|s| s.start_compaction(trace))?;
        self.activate(&key, Basis::Existing(&record), session, events, earlier).await
    }

    /// Applies a transition between turns (a model or reasoning change, a
    /// clear) to a session the caller has read, in one commit fenced by
    /// that read: a racing change wins or this one does, never both.
    pub async fn update_on(
        &self,
        loaded: Loaded,
        transition: impl FnOnce(&mut Session) -> Result<Vec<crate::domain::EventKind>, crate::domain::Refused>,
    ) -> Result<Session, SessionError> {
        let Starting { key, record, mut session, events, .. } = loaded.start(transition)?;
        let commit = self.session_commit(&key, fence_of(&record), &session, &events)?;
        self.commit_one(commit).await?;
        session.conversation_saved();
        Ok(session)
    }

    /// Records a permission decision for a live relay, from any replica, for
    /// the turn that waits for it. `session_id`, when the client sends it,
    /// must match the relay's session.
    pub async fn decide_relay(
        &self,
        principal: &Principal,
        session_id: Option<&str>,
        relay_id: &str,
        decision: RelayDecision,
    ) -> Result<(), SessionError> {
        let Some(key) = self.store().relays.get_relay(&principal.tenant, relay_id).await? else {
            return Err(SessionError::RelayNotFound);
        };
        if session_id.is_some_and(|id| id != &*key.id) {
            return Err(SessionError::RelayNotFound);
        }
        let (_, session) = self.load_visible(principal, &key, false).await?;
        if session.status() == Status::AwaitingClient {
            return Err(SessionError::Conflict(
                "the session is awaiting_client; answer its pending approvals by resuming it".into(),
            ));
        }
        let decision = serde_json::to_string(&decision).map_err(|e| SessionError::Invalid(e.to_string()))?;
        match self.store().sessions.decide(&key, relay_id, &decision).await? {
            Decided::Recorded => Ok(()),
            Decided::AlreadyDecided => Err(SessionError::RelayDecided),
            Decided::Missing => Err(SessionError::RelayNotFound),
        }
    }

    /// Cancels the session's turn. A running turn is asked to stop (its
    /// owner is woken and ends it); a paused one is ended here.
    pub async fn cancel(&self, principal: &Principal, id: &str) -> Result<(), SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        for _ in 0..WRITE_RETRIES {
            let (record, mut session) = self.load_visible(principal, &key, false).await?;
            match self.store().sessions.request_cancel(&key).await? {
                CancelRequest::Recorded => return Ok(()),
                CancelRequest::Missing => return Err(SessionError::NotFound),
                CancelRequest::NotRunning(_) if session.status() == Status::AwaitingClient => {
                    let events = session.cancel()?;
                    let mut commit = self.session_commit(&key, fence_of(&record), &session, &events)?;
                    commit.close_relays = record.relays.iter().map(|(id, _)| id.clone()).collect();
                    match self.commit_one(commit).await {
                        Ok(_) => return Ok(()),
                        Err(SessionError::Conflict(_)) => continue,
                        Err(e) => return Err(e),
                    }
                }
                CancelRequest::NotRunning(status) => {
                    return Err(SessionError::Conflict(format!("the session is {status}: no turn to cancel")));
                }
            }
        }
        Err(SessionError::Conflict("the session keeps changing; try again".into()))
    }

    /// The W3C `traceparent` of the current request's span: the turn it
    /// starts or resumes runs in its trace.
    pub(super) fn request_trace(&self) -> Option<String> {
        crate::telemetry::trace::traceparent(&tracing::Span::current())
    }
}
