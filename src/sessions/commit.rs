//! From a transition to a commit, and from a commit to a running turn:
//! how the service writes what a command or a takeover did to a session
//! (its state, new messages and events in one fenced commit), reads a
//! stored session back, and hands a session it now owns to the runner
//! (the request that started it follows the [`Started`] turn).

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use futures::future::BoxFuture;
use tracing::Instrument as _;

use super::{RunHandle, Running, SessionError, Sessions, Stop, main_agent, ownership, stamp, writer::Pipe};
use crate::{
    domain::{ChatMessage, Event, EventKind, Session},
    store::{
        Commit, CommitError, Committed, Conflict, FIRST_EPOCH, Fence, OwnerChange, Record, SessionKey, StateWrite,
        StoreError,
    },
    telemetry::{attributes as attr, trace},
};

/// A turn this replica just started or resumed: the session and the
/// cursor before the turn's events. [`Sessions::follow_started`] follows it
/// without the reads [`Sessions::follow`] makes: the start checked access,
/// and its commit put every event after the cursor in the log.
#[derive(Debug)]
#[must_use = "a started turn is followed (or its events are read later by cursor)"]
pub struct Started {
    pub(super) key: SessionKey,
    pub(super) cursor: u64,
    /// The conversation as the start committed it, when the command asked
    /// for it ([`super::Loaded::restate`]).
    pub(super) conversation: Option<Vec<ChatMessage>>,
}

impl Started {
    /// The session's id.
    pub fn id(&self) -> &str {
        &self.key.id
    }

    /// The seq before the turn's events.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The conversation as the start committed it (the user's message or
    /// the client's answers included), when the command asked for it.
    pub fn conversation(&self) -> Option<&[ChatMessage]> {
        self.conversation.as_deref()
    }
}

impl Sessions {
    /// Commits `session`'s transition (its `events`) made by a request on
    /// `record`, taking the session to run it here, and starts the runner.
    /// While draining, the session is committed without an owner instead,
    /// for another replica to take at once. The turn's span links to the
    /// trace `link` names (the turn before, maybe on another replica).
    /// Returns the turn, to follow from before its events.
    ///
    /// Boxed: every request that starts or resumes a turn awaits it, and a
    /// handler's future is moved several times by the router's layers
    /// before its first poll (whole, when this state is inline in it).
    pub(super) fn activate<'a>(
        &'a self,
        key: &'a SessionKey,
        basis: Basis<'a>,
        session: Session,
        events: Vec<EventKind>,
        link: Option<String>,
    ) -> BoxFuture<'a, Result<Started, SessionError>> {
        Box::pin(self.activate_here(key, basis, session, events, link))
    }

    async fn activate_here(
        &self,
        key: &SessionKey,
        basis: Basis<'_>,
        mut session: Session,
        events: Vec<EventKind>,
        link: Option<String>,
    ) -> Result<Started, SessionError> {
        if !self.hold_slot(key, true).await? {
            self.inner.metrics.rate_limit(&key.tenant, "limited_sessions");
            return Err(SessionError::RateLimited {
                message: "the tenant's limit of concurrently running sessions is reached".into(),
                retry_after_secs: self.inner.config.store.lease_ttl.as_secs().max(1),
            });
        }
        let (fence, id_made_here) = match basis {
            Basis::Existing(record) => (fence_of(record), false),
            Basis::New { id_made_here: true } => (Fence::New, true),
            Basis::New { id_made_here: false } => (Fence::Absent, false),
        };
        let draining = self.inner.drain.is_cancelled();
        let (mut commit, stamped) = self.stamped_commit(key, fence, &session, &events)?;
        commit.owner = if draining { OwnerChange::Release } else { OwnerChange::Acquire(self.instance().to_string()) };
        commit.open_relays = session.live_relays();
        commit.turn_start = true;
        if id_made_here && !draining {
            return self.create_running(key, session, commit, stamped, link).await;
        }
        let committed = self.commit_one(commit).await?;
        session.conversation_saved();
        if !draining {
            self.spawn_runner(key.clone(), session, committed, stamped, None, link);
        }
        Ok(Started { key: key.clone(), cursor: committed.first_seq - 1, conversation: None })
    }

    /// Creates a session whose id this replica made and runs its first turn
    /// here, the turn started while the creating commit is on its way: the
    /// model is called during that round trip instead of after it (the time
    /// to the first token of a new chat). Nothing the turn writes leaves
    /// the writer before the commit is answered ([`super::writer::Gate`]).
    /// The commit made as foreseen (a new session's first tenure, its
    /// events first in its log) lets the turn's writes go; made otherwise
    /// (an old log of that id still there), the turn is dropped unwritten
    /// and the session restarted here from its commit; failed (the store),
    /// the turn is dropped and the request fails as it would have. Only
    /// for ids made here: a client's id may be taken (by another user's
    /// session, say), and a refused request must not call the model.
    async fn create_running(
        &self,
        key: &SessionKey,
        mut session: Session,
        commit: Commit,
        stamped: Vec<Event>,
        link: Option<String>,
    ) -> Result<Started, SessionError> {
        let foreseen = (FIRST_EPOCH, 1, stamped.len() as u64);
        let (pipe, gate) = self.inner.writer.open_held(key.clone(), foreseen.0, foreseen.2);
        let running = Running::new(self.inner.shutdown.child_token(), foreseen.0);
        let here = Arc::new(AtomicBool::new(false));
        session.conversation_saved();
        let span = self.turn_span(key, &session, link.as_deref());
        let opening = Opening::Held { pipe, here: here.clone() };
        self.spawn_turn(key.clone(), session, running.clone(), opening, None, span);
        let committed = match self.commit_one(commit).await {
            Ok(committed) => committed,
            Err(e) => {
                running.stop(Stop::Lost);
                gate.discard().await;
                return Err(e);
            }
        };
        if (committed.epoch, committed.first_seq, committed.last_seq) == foreseen {
            self.inner.hub.run_here(key, committed.first_seq, stamped);
            here.store(true, Ordering::Release);
            self.register_running(key, &running);
            gate.release().await;
        } else {
            running.stop(Stop::Lost);
            gate.discard().await;
            self.recover(key.clone());
        }
        Ok(Started { key: key.clone(), cursor: committed.first_seq - 1, conversation: None })
    }

    /// A commit of `session` as it stands (state, new messages) and `events`.
    pub(super) fn session_commit(
        &self,
        key: &SessionKey,
        fence: Fence,
        session: &Session,
        events: &[EventKind],
    ) -> Result<Commit, SessionError> {
        self.stamped_commit(key, fence, session, events).map(|(commit, _)| commit)
    }

    /// [`Sessions::session_commit`], with its events as they are stored
    /// (stamped), for the feed of a turn that starts here.
    pub(super) fn stamped_commit(
        &self,
        key: &SessionKey,
        fence: Fence,
        session: &Session,
        events: &[EventKind],
    ) -> Result<(Commit, Vec<Event>), SessionError> {
        self.observe(events);
        let mut commit = Commit::new(key.clone(), fence, self.instance());
        if commit.fence.creates() {
            commit.listing = Some(listing(session));
        }
        commit.state = Some(state_write(session)?);
        commit.messages = messages_write(session)?;
        let stamped: Vec<Event> = events.iter().map(|kind| stamp(kind.clone(), main_agent())).collect();
        commit.events = stamped.iter().map(encode_event).collect::<Result<_, _>>()?;
        Ok((commit, stamped))
    }

    pub(super) async fn commit_one(&self, commit: Commit) -> Result<Committed, SessionError> {
        let result = self.inner.store.sessions.commit(std::slice::from_ref(&commit)).await.into_iter().next();
        match result {
            Some(Ok(committed)) => Ok(committed),
            Some(Err(CommitError::Conflict(Conflict::Exists))) => {
                Err(SessionError::Conflict("a session with this id already exists".into()))
            }
            Some(Err(CommitError::Conflict(_))) => {
                Err(SessionError::Conflict("the session was changed by another request; reload it".into()))
            }
            Some(Err(CommitError::Store(e))) => Err(e.into()),
            None => Err(StoreError::Corrupt("the store answered no commit".into()).into()),
        }
    }

    /// Hands a session this instance now owns (tenure `committed.epoch`,
    /// begun by a commit of `events`) to the runner, in an `invoke_agent`
    /// span ([`Sessions::turn_span`]). The session's feed here is fed from
    /// that commit on.
    pub(super) fn spawn_runner(
        &self,
        key: SessionKey,
        session: Session,
        committed: Committed,
        events: Vec<Event>,
        takeover: Option<ownership::Takeover>,
        link: Option<String>,
    ) {
        self.inner.hub.run_here(&key, committed.first_seq, events);
        let span = self.turn_span(&key, &session, link.as_deref());
        if takeover.is_some() {
            self.inner.metrics.takeovers.inc();
        }
        let running = Running::new(self.inner.shutdown.child_token(), committed.epoch);
        self.register_running(&key, &running);
        let opening = Opening::Committed { epoch: committed.epoch, last_seq: committed.last_seq };
        self.spawn_turn(key, session, running, opening, takeover, span);
    }

    /// The `invoke_agent` span of a turn: a child of the current span (the
    /// request that started or resumed the turn; none for a takeover),
    /// linked to the trace `link` names.
    fn turn_span(&self, key: &SessionKey, session: &Session, link: Option<&str>) -> tracing::Span {
        let span = tracing::info_span!(
            "invoke_agent",
            { attr::OTEL_NAME } = format!("{} {}", attr::OPERATION_INVOKE_AGENT, attr::AGENT_NAME),
            { attr::GEN_AI_OPERATION_NAME } = attr::OPERATION_INVOKE_AGENT,
            { attr::GEN_AI_AGENT_NAME } = attr::AGENT_NAME,
            { attr::GEN_AI_AGENT_ID } = "main",
            { attr::GEN_AI_CONVERSATION_ID } = &*key.id,
            { attr::GEN_AI_REQUEST_MODEL } = session.model(),
            { attr::SESSION_ID } = &*key.id,
            { attr::TENANT } = &*key.tenant,
            { attr::REPLICA } = &self.inner.replica,
            { attr::DIALECT } = session.dialect(),
            { attr::TURN } = i64::from(session.turn()),
            { attr::TRACE_ID } = tracing::field::Empty,
        );
        if let Some(link) = link {
            trace::link_to(&span, link);
        }
        if let Some(trace_id) = trace::trace_id(&span) {
            span.record(attr::TRACE_ID, trace_id);
        }
        span
    }

    /// Registers the run of a tenure here. An earlier tenure here (a title
    /// phase a new turn took the session from) stops: its commits are
    /// fenced anyway.
    fn register_running(&self, key: &SessionKey, running: &Running) {
        if let Some(earlier) = self.inner.running.insert(key.clone(), running.clone()) {
            earlier.stop(Stop::Lost);
        }
    }

    /// Runs the turn of `key`'s tenure on the app's tracker, in `span`.
    fn spawn_turn(
        &self,
        key: SessionKey,
        session: Session,
        running: Running,
        opening: Opening,
        takeover: Option<ownership::Takeover>,
        span: tracing::Span,
    ) {
        let sessions = self.clone();
        let metrics = self.inner.metrics.clone();
        // Boxed before the task takes it: the task's state lives as long
        // as the chat.
        let session = Box::new(session);
        // The headers of the request starting the turn, for its tools; a
        // takeover has none (whoever's request found the session orphaned
        // is not the one whose credentials the turn was started with).
        let forwarded = if takeover.is_some() {
            crate::principal::Forwarded::default()
        } else {
            crate::principal::Forwarded::current()
        };
        self.inner.tasks.spawn(
            forwarded
                .scope(async move {
                    let _running = metrics.running_session();
                    // Decisions, cancels and takeovers elsewhere arrive as
                    // wake-ups on this instance's own channel (the hub listens).
                    let (pipe, here) = match opening {
                        Opening::Committed { epoch, last_seq } => {
                            (sessions.inner.writer.open(key.clone(), epoch, last_seq), None)
                        }
                        Opening::Held { pipe, here } => (pipe, Some(here)),
                    };
                    let (from, continuation) = match takeover {
                        Some(t) => {
                            if t.cancel {
                                running.stop(Stop::Cancel);
                            }
                            sessions.inner.hints.settled(ownership::SETTLE_MAX).await;
                            (Some(t.from), t.continuation)
                        }
                        None => (None, None),
                    };
                    let handle =
                        RunHandle::new(sessions.clone(), key.clone(), session, pipe, running, from, continuation);
                    sessions.inner.runner.run(handle).await;
                    // A turn dropped before its session was created never
                    // ran here as far as the feeds know.
                    if here.is_none_or(|here| here.load(Ordering::Acquire)) {
                        sessions.inner.hub.ran_here(&key);
                    }
                })
                .instrument(span),
        );
    }
}

/// What a turn's start is committed on.
pub(super) enum Basis<'a> {
    /// A session as it was read (the commit is fenced on it).
    Existing(&'a Record),
    /// A new session; `id_made_here` when this replica made its id (not the
    /// client): such a turn starts while its session is created.
    New { id_made_here: bool },
}

/// How a turn's tenure opens in the writer.
enum Opening {
    /// Its commit was made: the pipe opens as the turn starts.
    Committed { epoch: u64, last_seq: u64 },
    /// Its commit is on its way ([`Sessions::create_running`]): the pipe is
    /// held; `here` is set once the commit was made as foreseen (the
    /// session's feed here was begun).
    Held { pipe: Pipe, here: Arc<AtomicBool> },
}

/// The fence of a command on a session as `record` was read.
pub(super) fn fence_of(record: &Record) -> Fence {
    Fence::Unchanged {
        version: record.version,
        owner: record.owner.clone(),
        epoch: record.epoch,
        last_seq: record.last_seq,
    }
}

/// The list entries of a session being created (see [`crate::store::Catalog`]).
pub(super) fn listing(session: &Session) -> crate::store::Listing {
    crate::store::Listing { subject: session.subject().to_string(), created_ms: session.created_ms() }
}

pub(super) fn state_write(session: &Session) -> Result<StateWrite, SessionError> {
    let doc = serde_json::to_string(session).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(StateWrite { doc, status: session.status().as_str() })
}

pub(super) fn messages_write(session: &Session) -> Result<crate::store::MessagesWrite, SessionError> {
    use crate::{domain::ConversationChange, store::MessagesWrite};
    let encode = |messages: &[ChatMessage]| -> Result<Vec<String>, SessionError> {
        messages
            .iter()
            .map(|m| serde_json::to_string(m).map_err(|e| StoreError::Corrupt(e.to_string()).into()))
            .collect()
    };
    Ok(match session.conversation_change() {
        ConversationChange::Unchanged => MessagesWrite::Keep,
        ConversationChange::Append(messages) => MessagesWrite::Append(encode(messages)?),
        ConversationChange::Replace(messages) => MessagesWrite::Replace(encode(messages)?),
    })
}

pub(super) fn encode_event(event: &Event) -> Result<String, SessionError> {
    event.to_json().map_err(|e| StoreError::Corrupt(e.to_string()).into())
}

/// The domain session a record holds.
pub(super) fn decode(record: &Record) -> Result<Session, SessionError> {
    let session: Session =
        serde_json::from_str(&record.doc).map_err(|e| StoreError::Corrupt(format!("session document: {e}")))?;
    let history = match &record.messages {
        Some(messages) => Some(
            messages
                .iter()
                .map(|m| serde_json::from_str(m).map_err(|e| StoreError::Corrupt(format!("message: {e}"))))
                .collect::<Result<Vec<ChatMessage>, StoreError>>()?,
        ),
        None => None,
    };
    Ok(session.restored(record.message_count as usize, history))
}
