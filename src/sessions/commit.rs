//! From a transition to a commit, and from a commit to a running turn:
//! how the service writes what a command or a takeover did to a session
//! (its state, new messages and events in one fenced commit), reads a
//! stored session back, and hands a session it now owns to the runner
//! (the request that started it follows the [`Started`] turn).

use tracing::Instrument as _;

use super::{RunHandle, Running, SessionError, Sessions, Stop, main_agent, ownership, stamp};
use crate::{
    domain::{ChatMessage, Event, EventKind, Session},
    store::{Commit, CommitError, Committed, Conflict, Fence, OwnerChange, Record, SessionKey, StateWrite, StoreError},
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
    pub(super) async fn activate(
        &self,
        key: &SessionKey,
        record: Option<&Record>,
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
        let fence = match record {
            Some(record) => fence_of(record),
            None => Fence::Absent,
        };
        let draining = self.inner.drain.is_cancelled();
        let (mut commit, stamped) = self.stamped_commit(key, fence, &session, &events)?;
        commit.owner = if draining { OwnerChange::Release } else { OwnerChange::Acquire(self.instance().to_string()) };
        commit.open_relays = session.live_relays();
        commit.turn_start = true;
        let committed = self.commit_one(commit).await?;
        session.conversation_saved();
        if !draining {
            self.spawn_runner(key.clone(), session, committed, stamped, None, link);
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
        if commit.fence == Fence::Absent {
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
    /// span: a child of the current span (the request that started or
    /// resumed the turn; none for a takeover), linked to the trace `link`
    /// names. The session's feed here is fed from that commit on.
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
        if let Some(link) = &link {
            trace::link_to(&span, link);
        }
        if let Some(trace_id) = trace::trace_id(&span) {
            span.record(attr::TRACE_ID, trace_id);
        }
        if takeover.is_some() {
            self.inner.metrics.takeovers.inc();
        }
        let running = Running::new(self.inner.shutdown.child_token(), committed.epoch);
        // An earlier tenure here (a title phase a new turn took the session
        // from) stops: its commits are fenced anyway.
        if let Some(earlier) = self.inner.running.insert(key.clone(), running.clone()) {
            earlier.stop(Stop::Lost);
        }
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
                    let pipe = sessions.inner.writer.open(key.clone(), committed.epoch, committed.last_seq);
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
                    sessions.inner.hub.ran_here(&key);
                })
                .instrument(span),
        );
    }
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
