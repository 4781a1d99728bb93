//! The sessions service: create, read, follow, start and resume turns, and
//! run them on whichever replica owns the session.
//!
//! Owns the replica's event hub (`hub.rs`: followers), its writer
//! (`writer.rs`: every write of the sessions it runs, as fenced commits),
//! and ownership (`ownership.rs`: this instance's heartbeat, the takeover of
//! dead instances' sessions and of handed-off ones, drain). What a session
//! *is* — its state machine, the events each transition implies — is the
//! domain's ([`crate::domain::Session`]); this module loads sessions,
//! applies transitions and commits each one whole. It does not run the
//! agent loop: a [`TurnRunner`] does (the orchestrator), given a
//! [`RunHandle`].
//!
//! Listing a caller's sessions and deleting one is `listing.rs`; following
//! a session for the title its turn's end announced, `title.rs`.
//!
//! Access rule: a session is visible to its tenant's subject that created
//! it, and to that tenant's tokens with the `sessions:admin` scope.
//! Anything else — another subject, another tenant, a missing id — is the
//! same 404.

mod commands;
mod commit;
mod conversation;
mod error;
mod follower;
pub mod hub;
mod join;
mod listing;
mod ownership;
mod resume;
mod run;
mod title;
mod writer;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use dashmap::DashMap;
use foldhash::fast::RandomState;
use tokio::sync::mpsc;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub use self::{
    commands::Loaded,
    commit::Started,
    error::SessionError,
    follower::Follower,
    hub::{EventHub, FollowItem},
    join::Joined,
    listing::{ListRequest, Page},
    resume::{FindError, ResumeLookup},
    run::{Emitter, Inbox, RunHandle, Stop},
    writer::WriteError,
};
use self::{
    commit::{decode, fence_of, state_write},
    run::Running,
    writer::Writer,
};
use crate::{
    config::Config,
    domain::{AgentRef, Event, EventKind, LogEvent, Session, SessionOptions, SessionSpec, now_ms},
    principal::Principal,
    store::{Commit, Fence, Notice, Record, SessionKey, Store},
    telemetry::{attributes as attr, metrics::Metrics, trace},
};

/// The scope that lets a token see every session of its tenant.
pub const ADMIN_SCOPE: &str = "sessions:admin";

/// A session to create.
#[derive(Debug)]
pub struct NewSession {
    /// Chosen by the client (an AI SDK chat id, an AG-UI thread id), or
    /// `None` for a new UUIDv7.
    pub id: Option<String>,
    pub model: String,
    /// The dialect it comes through (for logs and metrics).
    pub dialect: &'static str,
    pub options: SessionOptions,
    /// The workspace's first files (checked against the caps by the caller).
    pub files: Option<crate::store::WorkspaceWrite>,
}

/// Runs turns: the orchestrator. Called on the replica that owns the
/// session, with a handle positioned at its last commit.
#[async_trait]
pub trait TurnRunner: Send + Sync {
    async fn run(&self, handle: RunHandle);
}

/// A session as a request reads it: the domain session and what the store
/// knows beside it.
#[derive(Debug, Clone)]
pub struct SessionView {
    pub session: Session,
    /// The replica that runs it (its configured id), or that ran it last.
    pub replica: Option<String>,
    /// The newest event's seq.
    pub last_seq: u64,
    /// The seq before the current (or last) turn's stream began.
    pub turn_start_seq: u64,
}

#[derive(Clone)]
pub struct Sessions {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    hub: EventHub,
    writer: Writer,
    config: Arc<Config>,
    metrics: Arc<Metrics>,
    /// This replica's configured id (logs, metrics, `step_restarted`).
    replica: String,
    /// This process's identity as an owner: `<replica>#<random>`, new at
    /// every start, so a replica restarted under the same id never passes
    /// for the run before it (whose sessions must be taken over).
    instance: String,
    runner: Arc<dyn TurnRunner>,
    /// Sessions this instance runs, with their tenure.
    running: DashMap<SessionKey, Running, RandomState>,
    /// Notified when `running` becomes empty (a drain waits for it).
    idle: tokio::sync::Notify,
    /// Sessions whose turn stopped because the store failed: restarted here
    /// from their last commit once it answers.
    recovering: DashMap<SessionKey, (), RandomState>,
    /// What the death hints found, and the sessions clients here wait on
    /// (`ownership.rs`).
    hints: ownership::Hints,
    tasks: TaskTracker,
    /// Cancelled at the end of shutdown: background tasks stop.
    shutdown: CancellationToken,
    /// Cancelled when draining begins: no new turns here, streams end with
    /// a "rejoin" frame, running turns are handed off.
    drain: CancellationToken,
    /// Cancelled by [`Sessions::halt`]: stop at once, as a crash would.
    halt: CancellationToken,
    halted: AtomicBool,
}

impl Sessions {
    /// Starts the hub, the writer, the heartbeat and the takeover sweep on
    /// `tasks`. `runner` runs every turn this replica owns, from the first
    /// takeover on: a replica never owns a session it cannot run.
    pub fn start(
        store: Store,
        notices: mpsc::Receiver<Notice>,
        config: Arc<Config>,
        metrics: Arc<Metrics>,
        runner: Arc<dyn TurnRunner>,
        tasks: TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        let replica = config.server.replica_id.clone();
        let instance = format!("{replica}#{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let (wakes_tx, wakes_rx) = mpsc::channel(1024);
        let halt = CancellationToken::new();
        let hub = EventHub::start(store.clone(), instance.clone(), notices, wakes_tx, tasks.clone(), shutdown.clone());
        let pacing = writer::Pacing {
            give_up: config.store.hold_max,
            hold_notice: config.store.hold_notice,
            flush: config.store.lease_ttl,
            linger: config.store.commit_linger,
            tick: config.store.append_tick,
            renew_after: writer::renewal(config.store.session_ttl),
        };
        let writer = Writer::start(
            store.clone(),
            hub.clone(),
            instance.clone(),
            pacing,
            metrics.clone(),
            writer::Stops { shutdown: shutdown.clone(), halt: halt.clone() },
            &tasks,
        );
        let sessions = Self {
            inner: Arc::new(Inner {
                store,
                hub,
                writer,
                config,
                metrics,
                replica,
                instance,
                runner,
                running: DashMap::default(),
                idle: tokio::sync::Notify::new(),
                recovering: DashMap::default(),
                hints: ownership::Hints::default(),
                tasks,
                shutdown,
                drain: CancellationToken::new(),
                halt,
                halted: AtomicBool::new(false),
            }),
        };
        ownership::start(sessions.clone(), wakes_rx);
        sessions
    }

    pub fn hub(&self) -> &EventHub {
        &self.inner.hub
    }

    pub fn replica(&self) -> &str {
        &self.inner.replica
    }

    /// This process's owner identity in the store.
    pub fn instance(&self) -> &str {
        &self.inner.instance
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// Cancelled when this replica starts draining.
    pub fn draining(&self) -> &CancellationToken {
        &self.inner.drain
    }

    /// The upstream time of the session's turn, if it runs on this replica
    /// (a handler that waits for the turn reports it in `Server-Timing`).
    pub fn upstream_time(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Option<Arc<crate::telemetry::timing::UpstreamTime>> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        self.inner.running.get(&key).map(|running| running.upstream.clone())
    }

    /// Counts what events about to be written say happened: tool results
    /// by kind and outcome, relay decisions.
    pub(crate) fn observe(&self, events: impl IntoIterator<Item = impl std::borrow::Borrow<EventKind>>) {
        let metrics = &self.inner.metrics;
        for event in events {
            match event.borrow() {
                EventKind::ToolResult { name, status, .. } => {
                    let kind = match name.as_str() {
                        "agent" => "agent",
                        "bash" | "read" | "patch" => "workspace",
                        name if self.inner.config.is_server_tool(name) => "server",
                        _ => "frontend",
                    };
                    metrics.tool_call(kind, status.as_str());
                }
                EventKind::RelayDecided { approved, .. } => {
                    metrics.relay(if *approved { "approved" } else { "denied" });
                }
                EventKind::RelayRequested(_) => metrics.relay("requested"),
                _ => {}
            }
        }
    }

    /// Creates an idle session owned by `principal`. An id the tenant
    /// already uses is a conflict.
    pub async fn create(&self, principal: &Principal, mut new: NewSession) -> Result<Session, SessionError> {
        let files = new.files.take();
        let session = Session::new(self.spec(principal, new));
        tracing::Span::current().record(attr::SESSION_ID, session.id());
        let key = SessionKey::new(principal.tenant.clone(), session.id());
        let mut commit = Commit::new(key, Fence::Absent, self.instance());
        commit.state = Some(state_write(&session)?);
        commit.listing = Some(commit::listing(&session));
        commit.workspace = files;
        self.commit_one(commit).await?;
        Ok(session)
    }

    fn spec(&self, principal: &Principal, new: NewSession) -> SessionSpec {
        let NewSession { id, model, dialect, options, files: _ } = new;
        SessionSpec {
            id: id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
            tenant: principal.tenant.to_string(),
            subject: principal.subject.clone(),
            model,
            dialect: dialect.to_string(),
            options,
        }
    }

    /// The session as its owner (or an admin of its tenant) may see it. An
    /// active session whose owner is gone is taken over on the way.
    pub async fn get(&self, principal: &Principal, id: &str) -> Result<SessionView, SessionError> {
        self.view(principal, id, false).await
    }

    /// Like [`Sessions::get`], with the whole conversation.
    pub async fn get_with_history(&self, principal: &Principal, id: &str) -> Result<SessionView, SessionError> {
        self.view(principal, id, true).await
    }

    async fn view(&self, principal: &Principal, id: &str, history: bool) -> Result<SessionView, SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        let (record, session) = self.load_visible(principal, &key, history).await?;
        if session.needs_owner() {
            ownership::take_over_if_orphaned(self, &key, &record).await;
        }
        let replica = record.owner.as_ref().or(record.last_owner.as_ref());
        let replica = replica.map(|o| o.split('#').next().unwrap_or(o).to_string());
        Ok(SessionView { session, replica, last_seq: record.last_seq, turn_start_seq: record.turn_start_seq })
    }

    /// The session's workspace files, for its owner (or an admin).
    pub async fn workspace(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<Vec<crate::store::StoredFile>, SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        self.load_visible(principal, &key, false).await?;
        Ok(self.inner.store.workspaces.files(&key).await?)
    }

    /// Replays the log after `after` and follows live events until the
    /// session pauses or ends.
    pub async fn follow(&self, principal: &Principal, id: &str, after: u64) -> Result<Follower, SessionError> {
        self.follow_with(principal, id, after, false).await
    }

    /// Like [`Sessions::follow`], with the events of the current turn up to
    /// `after` first, as [`FollowItem::Context`], when `after` lies within
    /// that turn (from the seq before its stream began: its
    /// `turn_started`, or its `resumed`).
    pub async fn follow_in_turn(&self, principal: &Principal, id: &str, after: u64) -> Result<Follower, SessionError> {
        self.follow_with(principal, id, after, true).await
    }

    async fn follow_with(
        &self,
        principal: &Principal,
        id: &str,
        after: u64,
        turn_context: bool,
    ) -> Result<Follower, SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        let (record, session) = self.load_visible(principal, &key, false).await?;
        let context_from = if turn_context { record.turn_start_seq.min(after) } else { after };
        self.follow_loaded(key, &record, &session, context_from, after).await
    }

    /// The session's log after `after`, a page of at most `limit` events,
    /// read once (no follow): for a client that reads where a stream stands
    /// (a Responses API poll). The caller must see the session.
    pub async fn read_log(
        &self,
        principal: &Principal,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<LogEvent>, SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        self.load_visible(principal, &key, false).await?;
        self.log_page(&key, after, limit).await
    }

    /// [`Sessions::get`], and then [`Sessions::read_log`] without reading
    /// the session again: a response found and its first events.
    pub async fn get_with_log(
        &self,
        principal: &Principal,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<(SessionView, Vec<LogEvent>), SessionError> {
        let view = self.get(principal, id).await?;
        let events = self.log_page(&SessionKey::new(principal.tenant.clone(), id), after, limit).await?;
        Ok((view, events))
    }

    /// The log after `after`, at most `limit` events; the cursor must be
    /// within retention.
    async fn log_page(&self, key: &SessionKey, after: u64, limit: usize) -> Result<Vec<LogEvent>, SessionError> {
        let range = self.inner.store.log.read_after(key, after, limit).await?;
        if after + 1 < range.first_seq {
            return Err(SessionError::CursorExpired { after, first_seq: range.first_seq });
        }
        Ok(range
            .events
            .iter()
            .filter_map(|stored| LogEvent::from_stored(key.id.clone(), stored.seq, &stored.payload).ok())
            .collect())
    }

    /// Keeps `value` under `name` beside the caller's session `id` for
    /// `keep` ([`crate::store::Annexes`]): a document of the request that
    /// made something in it (a Responses API request's input and
    /// parameters). The caller has just seen or made the session.
    pub async fn keep_annex(
        &self,
        principal: &Principal,
        id: &str,
        name: &str,
        value: &str,
        keep: Duration,
    ) -> Result<(), SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        Ok(self.inner.store.annexes.put_annex(&key, name, value, keep).await?)
    }

    /// What [`Sessions::keep_annex`] kept under `name`, while it is kept.
    /// The caller has checked that it may see the session (its tenant's
    /// key is the only one read).
    pub async fn annex(&self, principal: &Principal, id: &str, name: &str) -> Result<Option<String>, SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        Ok(self.inner.store.annexes.get_annex(&key, name).await?)
    }

    /// Follows a turn this replica just started, from its first event.
    pub async fn follow_started(&self, started: Started) -> Follower {
        // Boxed, as `activate`: handlers await it.
        Box::pin(self.inner.hub.follow(started.key, started.cursor, started.cursor, false)).await
    }

    /// [`Sessions::follow`] for a session just read (or just committed).
    async fn follow_loaded(
        &self,
        key: SessionKey,
        record: &Record,
        session: &Session,
        context_from: u64,
        after: u64,
    ) -> Result<Follower, SessionError> {
        if after > record.last_seq {
            return Err(SessionError::Invalid(format!(
                "cursor {after} is beyond the last event ({})",
                record.last_seq
            )));
        }
        // The cursor's bounds and, for a session whose owner is gone, its
        // takeover, at once: a rejoin after a replica died waits for one
        // of them, not both in turn (taking it over is right whatever the
        // cursor).
        let bounds = async {
            if record.last_seq > after {
                self.inner.store.log.read_after(&key, after, 1).await.map(|b| Some(b.first_seq))
            } else {
                Ok(None)
            }
        };
        let takeover = async {
            if session.needs_owner() {
                ownership::take_over_if_orphaned(self, &key, record).await;
            }
        };
        let (first_seq, ()) = tokio::join!(bounds, takeover);
        if let Some(first_seq) = first_seq?.filter(|first| *first > after + 1) {
            return Err(SessionError::CursorExpired { after, first_seq });
        }
        Ok(self.inner.hub.follow(key, context_from, after, !session.status().is_active()).await)
    }

    /// The session and its record if `principal` may see it. The request's
    /// span gets the session id and a link to the session's trace (its
    /// last turn may have started on another replica, in another trace).
    async fn load_visible(
        &self,
        principal: &Principal,
        key: &SessionKey,
        history: bool,
    ) -> Result<(Record, Session), SessionError> {
        let (record, session) = self.load(key, history).await?.ok_or(SessionError::NotFound)?;
        if !session.visible_to(&principal.tenant, &principal.subject, principal.has_scope(ADMIN_SCOPE)) {
            return Err(SessionError::NotFound);
        }
        let span = tracing::Span::current();
        span.record(attr::SESSION_ID, &*key.id);
        if let Some(traceparent) = session.trace_parent() {
            trace::link_to(&span, traceparent);
        }
        Ok((record, session))
    }

    /// The stored session, without an access check (internal use).
    async fn load(&self, key: &SessionKey, history: bool) -> Result<Option<(Record, Session)>, SessionError> {
        let Some(record) = self.inner.store.sessions.load(key, history).await? else { return Ok(None) };
        let session = decode(&record)?;
        Ok(Some((record, session)))
    }

    /// The stored session with its conversation and the log after its
    /// checkpoint, in one read when it is short ([`crate::store::SessionStore::load_with_tail`]):
    /// what a takeover reads.
    async fn load_with_tail(
        &self,
        key: &SessionKey,
        limit: usize,
    ) -> Result<Option<(Record, Session, Option<Vec<crate::store::StoredEvent>>)>, SessionError> {
        let Some(loaded) = self.inner.store.sessions.load_with_tail(key, limit).await? else { return Ok(None) };
        let session = decode(&loaded.record)?;
        Ok(Some((loaded.record, session, loaded.tail)))
    }

    /// Counts `key` as running for its tenant when the tenant caps running
    /// sessions (`check`: refuse past the cap; else just refresh). The count
    /// expires unless refreshed, so a dead replica's sessions stop counting.
    async fn hold_slot(&self, key: &SessionKey, check: bool) -> Result<bool, SessionError> {
        let limit = self.inner.config.tenants.get(&*key.tenant).and_then(|t| t.rate_limit);
        let Some(max) = limit.and_then(|l| l.max_concurrent_sessions) else { return Ok(true) };
        let max = check.then_some(max);
        let ttl = self.inner.config.store.lease_ttl;
        match self.inner.store.quotas.acquire_slot(&key.tenant, &key.id, max, ttl).await {
            Ok(held) => Ok(held),
            Err(e) if self.inner.config.on_store_error == crate::config::StoreFailure::FailOpen => {
                tracing::warn!(tenant = %key.tenant, error = %e, "session limit unchecked (fail open)");
                Ok(true)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The tenant's per-minute model token budget (see `store::Quotas`).
    pub fn token_budget(&self) -> &dyn crate::store::Quotas {
        &*self.inner.store.quotas
    }

    /// Tenure `epoch` of the session ended here (paused, ended, lost).
    async fn forget_running(&self, key: &SessionKey, run: &Running) {
        let removed = self.inner.running.remove_if(key, |_, running| running.is(run)).is_some();
        if !removed {
            return;
        }
        if self.inner.running.is_empty() {
            self.inner.idle.notify_waiters();
        }
        let capped = self.inner.config.tenants.get(&*key.tenant).and_then(|t| t.rate_limit);
        if capped.and_then(|l| l.max_concurrent_sessions).is_some()
            && let Err(e) = self.inner.store.quotas.release_slot(&key.tenant, &key.id).await
        {
            tracing::warn!(session = %key.id, error = %e, "cannot release the session's slot; it expires by itself");
        }
    }

    /// Restarts `key` here from its last commit once the store answers.
    fn recover(&self, key: SessionKey) {
        if !self.inner.halted.load(Ordering::SeqCst) {
            self.inner.recovering.insert(key, ());
        }
    }

    /// Spawns `task` on the app's tracker.
    fn spawn(self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.inner.tasks.spawn(task);
    }

    fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Simulates a crash (tests): stops everything without handing sessions off.
    pub fn halt(&self) {
        self.inner.halted.store(true, Ordering::SeqCst);
        for running in self.inner.running.iter() {
            running.stop(Stop::Lost);
        }
        self.inner.halt.cancel();
        self.inner.shutdown.cancel();
    }

    /// Indexes a relay id so the relay endpoint, which names only the relay,
    /// finds its session on any replica.
    pub async fn put_relay(&self, relay_id: &str, key: &SessionKey) -> Result<(), SessionError> {
        Ok(self.inner.store.relays.put_relay(relay_id, key).await?)
    }
}

pub(crate) fn main_agent() -> AgentRef {
    AgentRef { agent_id: "main".into(), parent_id: None, depth: 0 }
}

pub(crate) fn stamp(kind: EventKind, agent: AgentRef) -> Event {
    Event { kind, agent, ts: now_ms() }
}
