//! The sessions service: create, read, follow, resume, and hand running turns
//! to the orchestrator on whichever replica holds the session's lease.
//!
//! Owns the session state machine (`state.rs`), the replica's event hub
//! (`hub.rs`) and its leases (`leases.rs`: renewal, the takeover sweep). It
//! does not run the agent loop: a [`TurnRunner`] does (the orchestrator),
//! given a [`RunHandle`] through which it emits events and checkpoints.
//!
//! Access rule: a session is visible to its tenant's subject that created it,
//! and to that tenant's tokens with the `sessions:admin` scope. Anything else
//! — another subject, another tenant, a missing id — is the same 404.

mod commands;
mod conversation;
mod history;
pub mod hub;
mod leases;
mod run;
pub mod state;

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use dashmap::DashMap;
use tokio::sync::mpsc;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::Instrument as _;

pub use self::{
    commands::{Decision, Resume},
    hub::{EventHub, FollowItem},
    run::{Emitter, RunHandle},
    state::{SessionDoc, SessionOptions, Status, TurnState},
};
use crate::{
    auth::Principal,
    config::Config,
    protocol::{AgentRef, EventKind, events::Event},
    providers::Usage,
    store::{LeaseOp, Notice, SessionKey, Store, StoreError, Versioned, WriteOutcome},
    telemetry::{attributes as attr, metrics::Metrics, trace},
};

/// How long a new turn waits for the state write that follows the previous
/// turn's last event, and how often it looks.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
const SETTLE_POLL: std::time::Duration = std::time::Duration::from_millis(5);

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
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session not found")]
    NotFound,
    #[error("relay not found")]
    RelayNotFound,
    /// A tenant quota (concurrent sessions) is used up.
    #[error("{message}")]
    RateLimited { message: String, retry_after_secs: u64 },
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    /// The cursor is older than what the log retains.
    #[error("events after {after} are no longer retained (oldest kept: {first_seq})")]
    CursorExpired { after: u64, first_seq: u64 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Runs turns: the orchestrator. Called on the replica that holds the
/// session's lease, with a handle positioned at the last checkpoint.
#[async_trait]
pub trait TurnRunner: Send + Sync {
    async fn run(&self, handle: RunHandle);
}

#[derive(Clone)]
pub struct Sessions {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    hub: EventHub,
    config: Arc<Config>,
    metrics: Arc<Metrics>,
    replica: String,
    runner: OnceLock<Arc<dyn TurnRunner>>,
    /// Sessions whose lease this replica holds.
    running: DashMap<SessionKey, run::Running>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
    /// Set by [`Sessions::halt`]: stop without handing leases off.
    halted: std::sync::atomic::AtomicBool,
}

impl Sessions {
    /// Starts the hub, the lease keeper and the takeover sweep on `tasks`.
    pub fn start(
        store: Store,
        notices: mpsc::Receiver<Notice>,
        config: Arc<Config>,
        metrics: Arc<Metrics>,
        tasks: TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        let replica = config.server.replica_id.clone();
        let (wakes_tx, wakes_rx) = mpsc::channel(256);
        let hub = EventHub::start(store.clone(), replica.clone(), notices, wakes_tx, tasks.clone(), shutdown.clone());
        let sessions = Self {
            inner: Arc::new(Inner {
                store,
                hub,
                config,
                metrics,
                replica,
                runner: OnceLock::new(),
                running: DashMap::new(),
                tasks: tasks.clone(),
                shutdown,
                halted: std::sync::atomic::AtomicBool::new(false),
            }),
        };
        leases::start(sessions.clone(), wakes_rx);
        sessions
    }

    /// Installs the orchestrator. Set once, at start-up.
    pub fn set_runner(&self, runner: Arc<dyn TurnRunner>) {
        let _ = self.inner.runner.set(runner);
    }

    pub fn hub(&self) -> &EventHub {
        &self.inner.hub
    }

    pub fn replica(&self) -> &str {
        &self.inner.replica
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
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
    /// by kind and outcome, relay decisions. Every event this replica writes
    /// passes here once (a re-announced relay request does not: the
    /// orchestrator counts requests where it makes them).
    pub(crate) fn observe(&self, events: impl IntoIterator<Item = impl std::borrow::Borrow<EventKind>>) {
        let metrics = &self.inner.metrics;
        for event in events {
            match event.borrow() {
                EventKind::ToolResult { name, status, .. } => {
                    let kind = match name.as_str() {
                        "agent" => "agent",
                        name if self.inner.config.tool(name).is_some() => "server",
                        _ => "frontend",
                    };
                    metrics.tool_call(kind, status);
                }
                EventKind::RelayDecided { approved, .. } => {
                    metrics.relay(if *approved { "approved" } else { "denied" });
                }
                _ => {}
            }
        }
    }

    /// Creates an idle session owned by `principal`. An id the tenant
    /// already uses is a conflict.
    pub async fn create(&self, principal: &Principal, new: NewSession) -> Result<SessionDoc, SessionError> {
        let NewSession { id, model, dialect, options } = new;
        let id = id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let now = crate::protocol::events::now_ms();
        let doc = SessionDoc {
            id: id.clone(),
            tenant: principal.tenant.to_string(),
            subject: principal.subject.clone(),
            status: Status::Idle,
            owner: None,
            model,
            dialect: dialect.to_string(),
            created_ms: now,
            updated_ms: now,
            turn: 0,
            messages: Vec::new(),
            pending_relays: Vec::new(),
            pending_calls: Vec::new(),
            usage: Usage::default(),
            last_seq: 0,
            trace_parent: None,
            error: None,
            options,
            turn_state: TurnState::default(),
            decisions: Vec::new(),
            cancel_requested: false,
        };
        tracing::Span::current().record(attr::SESSION_ID, &id);
        let key = SessionKey::new(principal.tenant.clone(), id);
        match self.inner.store.state.create(&key, &encode(&doc)?, LeaseOp::None).await? {
            WriteOutcome::Written(_) => Ok(doc),
            _ => Err(SessionError::Conflict("a session with this id already exists".into())),
        }
    }

    /// The session as its owner (or an admin of its tenant) may see it. An
    /// active session whose lease has lapsed is taken over on the way.
    pub async fn get(&self, principal: &Principal, id: &str) -> Result<(u64, SessionDoc), SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        let (version, doc) = self.load_visible(principal, &key).await?;
        if doc.status.is_active() {
            leases::take_over_if_orphaned(self, &key).await;
        }
        Ok((version, doc))
    }

    /// Replays the log after `after` and follows live events until the
    /// session pauses or ends.
    pub async fn follow(
        &self,
        principal: &Principal,
        id: &str,
        after: u64,
    ) -> Result<mpsc::Receiver<FollowItem>, SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        let (_, doc) = self.load_visible(principal, &key).await?;
        let bounds = self.inner.store.log.read_after(&key, after, 1).await?;
        if after > bounds.last_seq {
            return Err(SessionError::Invalid(format!(
                "cursor {after} is beyond the last event ({})",
                bounds.last_seq
            )));
        }
        if bounds.last_seq > after && bounds.first_seq > after + 1 {
            return Err(SessionError::CursorExpired { after, first_seq: bounds.first_seq });
        }
        if doc.status.is_active() {
            leases::take_over_if_orphaned(self, &key).await;
        }
        Ok(self.inner.hub.follow(key, after, !doc.status.is_active()).await)
    }

    /// CAS the document to `running` on this replica (taking the lease),
    /// append `events`, and start the runner. Returns the cursor before them.
    async fn activate(
        &self,
        key: &SessionKey,
        version: u64,
        mut doc: SessionDoc,
        events: Vec<EventKind>,
    ) -> Result<u64, SessionError> {
        if !self.hold_slot(key, true).await? {
            self.inner.metrics.rate_limit(&key.tenant, "limited_sessions");
            return Err(SessionError::RateLimited {
                message: "the tenant's limit of concurrently running sessions is reached".into(),
                retry_after_secs: self.inner.config.store.lease_ttl.as_secs().max(1),
            });
        }
        doc.status = Status::Running;
        doc.owner = Some(self.inner.replica.clone());
        doc.updated_ms = crate::protocol::events::now_ms();
        // This request's trace becomes the session's; the turn's span links
        // to the one before (a pause or an earlier turn, maybe elsewhere).
        let earlier = std::mem::replace(&mut doc.trace_parent, trace::traceparent(&tracing::Span::current()));
        let lease = LeaseOp::Acquire { replica: self.inner.replica.clone(), ttl: self.inner.config.store.lease_ttl };
        let new_version = match self.inner.store.state.compare_and_set(key, version, &encode(&doc)?, lease).await? {
            WriteOutcome::Written(v) => v,
            WriteOutcome::VersionConflict => {
                return Err(SessionError::Conflict("the session was changed by another request; reload it".into()));
            }
            WriteOutcome::LeaseConflict => {
                return Err(SessionError::Conflict("another replica is running this session".into()));
            }
        };
        self.observe(&events);
        let cursor = if events.is_empty() {
            0
        } else {
            let stamped = events.into_iter().map(|kind| stamp(kind, main_agent())).collect();
            self.inner.hub.append(key, stamped).await?.0 - 1
        };
        self.spawn_runner(key.clone(), new_version, doc, None, earlier);
        Ok(cursor)
    }

    /// Hands a session whose lease this replica now holds to the runner, in
    /// an `invoke_agent` span: a child of the current span (the request that
    /// started or resumed the turn; none for a takeover), linked to the
    /// trace `link` names. `taken_over_from` names the replica that died
    /// running it, if any.
    fn spawn_runner(
        &self,
        key: SessionKey,
        version: u64,
        doc: SessionDoc,
        taken_over_from: Option<String>,
        link: Option<String>,
    ) {
        let span = tracing::info_span!(
            "invoke_agent",
            { attr::OTEL_NAME } = format!("{} {}", attr::OPERATION_INVOKE_AGENT, attr::AGENT_NAME),
            { attr::GEN_AI_OPERATION_NAME } = attr::OPERATION_INVOKE_AGENT,
            { attr::GEN_AI_AGENT_NAME } = attr::AGENT_NAME,
            { attr::GEN_AI_AGENT_ID } = "main",
            { attr::GEN_AI_CONVERSATION_ID } = &*key.id,
            { attr::GEN_AI_REQUEST_MODEL } = &doc.model,
            { attr::SESSION_ID } = &*key.id,
            { attr::TENANT } = &*key.tenant,
            { attr::REPLICA } = &self.inner.replica,
            { attr::DIALECT } = &doc.dialect,
            { attr::TURN } = i64::from(doc.turn),
            { attr::TRACE_ID } = tracing::field::Empty,
        );
        if let Some(link) = &link {
            trace::link_to(&span, link);
        }
        if let Some(trace_id) = trace::trace_id(&span) {
            span.record(attr::TRACE_ID, trace_id);
        }
        if taken_over_from.is_some() {
            self.inner.metrics.takeovers.inc();
        }
        let running = run::Running::new(self.inner.shutdown.child_token());
        self.inner.running.insert(key.clone(), running.clone());
        let handle = RunHandle::new(self.clone(), key, version, doc, running, taken_over_from);
        let runner = self.inner.runner.get().cloned();
        let notifications = self.inner.store.notifications.clone();
        let watched = handle.key().clone();
        let metrics = self.inner.metrics.clone();
        self.inner.tasks.spawn(
            async move {
                let _running = metrics.running_session();
                // Relay decisions and cancels written elsewhere arrive as wake-ups.
                if let Err(e) = notifications.watch(&watched).await {
                    tracing::warn!(session = %watched.id, error = %e, "cannot watch for wake-ups; relying on polling");
                }
                match runner {
                    Some(runner) => runner.run(handle).await,
                    None => {
                        let _ =
                            handle.fail("no_orchestrator", "this replica has no orchestrator installed", None).await;
                    }
                }
                let _ = notifications.unwatch(&watched).await;
            }
            .instrument(span),
        );
    }

    /// The session if `principal` may see it. The request's span gets the
    /// session id and a link to the session's trace (its last turn may have
    /// started on another replica, in another trace).
    async fn load_visible(&self, principal: &Principal, key: &SessionKey) -> Result<(u64, SessionDoc), SessionError> {
        let (version, doc) = self.load_raw(key).await?;
        let visible =
            doc.tenant == *principal.tenant && (doc.subject == principal.subject || principal.has_scope(ADMIN_SCOPE));
        if !visible {
            return Err(SessionError::NotFound);
        }
        let span = tracing::Span::current();
        span.record(attr::SESSION_ID, &*key.id);
        if let Some(traceparent) = &doc.trace_parent {
            trace::link_to(&span, traceparent);
        }
        Ok((version, doc))
    }

    /// Like `load_visible`, but if the session's turn has just ended — the
    /// `turn_ended` or `paused` event is in the log, the state write that
    /// follows it is not yet — waits (briefly) for that write: a client that
    /// sends its next message the moment it sees the end must not get a 409.
    async fn load_settled(&self, principal: &Principal, key: &SessionKey) -> Result<(u64, SessionDoc), SessionError> {
        let deadline = tokio::time::Instant::now() + SETTLE_WAIT;
        loop {
            let (version, doc) = self.load_visible(principal, key).await?;
            if !doc.status.is_active() || tokio::time::Instant::now() >= deadline || !self.log_ends_turn(key).await? {
                return Ok((version, doc));
            }
            tokio::time::sleep(SETTLE_POLL).await;
        }
    }

    /// Whether the newest event in the session's log ends a stream.
    async fn log_ends_turn(&self, key: &SessionKey) -> Result<bool, SessionError> {
        let last = self.inner.store.log.read_after(key, u64::MAX - 1, 1).await?.last_seq;
        if last == 0 {
            return Ok(false);
        }
        let range = self.inner.store.log.read_after(key, last - 1, 1).await?;
        let newest = range.events.first().and_then(|e| serde_json::from_str::<Event>(&e.payload).ok());
        Ok(newest.is_some_and(|event| event.kind.ends_stream()))
    }

    /// The stored document, without an access check (internal use).
    async fn load_raw(&self, key: &SessionKey) -> Result<(u64, SessionDoc), SessionError> {
        let Some(Versioned { version, doc }) = self.inner.store.state.load(key).await? else {
            return Err(SessionError::NotFound);
        };
        let doc = serde_json::from_str(&doc).map_err(|e| StoreError::Corrupt(format!("session document: {e}")))?;
        Ok((version, doc))
    }

    /// Passes a wake-up to the turn of `key` if it runs on this replica: a
    /// cancel request stops it, anything else (a decision) wakes its wait.
    async fn wake_local(&self, key: &SessionKey) {
        let Some(running) = self.inner.running.get(key).map(|r| r.clone()) else { return };
        match self.load_raw(key).await {
            Ok((_, doc)) if doc.cancel_requested => running.cancel.cancel(),
            _ => running.wake.notify_one(),
        }
    }

    /// Counts `key` as running for its tenant when the tenant caps running
    /// sessions (`check`: refuse past the cap; else just refresh). The count
    /// expires with the lease, so a dead replica's sessions stop counting.
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

    /// The session stopped running here (paused, ended, or lost).
    async fn forget_running(&self, key: &SessionKey) {
        self.inner.running.remove(key);
        let capped = self.inner.config.tenants.get(&*key.tenant).and_then(|t| t.rate_limit);
        if capped.and_then(|l| l.max_concurrent_sessions).is_some()
            && let Err(e) = self.inner.store.quotas.release_slot(&key.tenant, &key.id).await
        {
            tracing::warn!(session = %key.id, error = %e, "cannot release the session's slot; it expires with the lease");
        }
        if let Err(e) = self.inner.store.leases.forget(key).await {
            tracing::warn!(session = %key.id, error = %e, "cannot drop the session from the lease index");
        }
    }

    fn store(&self) -> &Store {
        &self.inner.store
    }
}

pub(crate) fn main_agent() -> AgentRef {
    AgentRef { agent_id: "main".into(), parent_id: None, depth: 0 }
}

pub(crate) fn stamp(kind: EventKind, agent: AgentRef) -> Event {
    Event { kind, agent, ts: crate::protocol::events::now_ms() }
}

fn encode(doc: &SessionDoc) -> Result<String, SessionError> {
    serde_json::to_string(doc).map_err(|e| SessionError::Store(StoreError::Corrupt(e.to_string())))
}

impl Sessions {
    /// The seq of the newest event in the session's log.
    pub async fn last_seq(&self, principal: &Principal, id: &str) -> Result<u64, SessionError> {
        let key = SessionKey::new(principal.tenant.clone(), id);
        Ok(self.inner.store.log.read_after(&key, u64::MAX - 1, 1).await?.last_seq)
    }

    /// Simulates a crash (tests): stops everything without handing leases off.
    pub fn halt(&self) {
        self.inner.halted.store(true, std::sync::atomic::Ordering::SeqCst);
        self.inner.shutdown.cancel();
    }
}

impl Sessions {
    /// Indexes a relay id so the relay endpoint, which names only the relay,
    /// finds its session on any replica.
    pub async fn put_relay(&self, relay_id: &str, key: &SessionKey) -> Result<(), SessionError> {
        Ok(self.inner.store.relays.put_relay(relay_id, key).await?)
    }
}
