//! [`RunHandle`]: what the orchestrator holds while it runs a session's turn
//! on this replica. Everything it does to the session goes through here:
//! events (appended to the log), checkpoints (CAS on the state, fenced by the
//! lease) and the end of the turn (pause, finish, fail), which releases the
//! lease.

use std::sync::Arc;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{SessionDoc, SessionError, Sessions, Status, encode, main_agent, stamp};
use crate::{
    protocol::{AgentRef, EventKind, PendingCall, PendingRelay, TurnEndReason},
    providers::Usage,
    store::{LeaseOp, SessionKey, WriteOutcome},
    telemetry::timing::UpstreamTime,
};

/// How often a checkpoint re-reads and retries after a concurrent write
/// (a relay decision or a cancel written by another replica).
const CHECKPOINT_RETRIES: usize = 5;

/// This replica's hold on a running session.
#[derive(Clone)]
pub(super) struct Running {
    /// Cancelled when the lease is lost, the session cancelled, or on shutdown.
    pub cancel: CancellationToken,
    /// Notified when another replica wrote something the turn waits for.
    pub wake: Arc<Notify>,
    /// Time spent on upstream model and tool calls (`Server-Timing`).
    pub upstream: Arc<UpstreamTime>,
}

impl Running {
    pub fn new(cancel: CancellationToken) -> Self {
        Self { cancel, wake: Arc::new(Notify::new()), upstream: Arc::default() }
    }
}

/// Emits events for a session from anywhere (parallel tool calls,
/// subagents) without holding the [`RunHandle`].
#[derive(Clone)]
pub struct Emitter {
    sessions: Sessions,
    key: SessionKey,
}

impl Emitter {
    /// Queues an event without waiting for it to be durable.
    pub async fn emit(&self, agent: &AgentRef, kind: EventKind) -> Result<(), SessionError> {
        self.sessions.observe([&kind]);
        Ok(self.sessions.hub().emit(&self.key, stamp(kind, agent.clone())).await?)
    }

    /// Appends events and waits until they are durable.
    pub async fn append(&self, agent: &AgentRef, kinds: Vec<EventKind>) -> Result<u64, SessionError> {
        self.sessions.observe(&kinds);
        let events = kinds.into_iter().map(|k| stamp(k, agent.clone())).collect();
        Ok(self.sessions.hub().append(&self.key, events).await?.1)
    }
}

pub struct RunHandle {
    sessions: Sessions,
    key: SessionKey,
    version: u64,
    doc: SessionDoc,
    running: Running,
    taken_over_from: Option<String>,
}

impl RunHandle {
    pub(super) fn new(
        sessions: Sessions,
        key: SessionKey,
        version: u64,
        doc: SessionDoc,
        running: Running,
        taken_over_from: Option<String>,
    ) -> Self {
        Self { sessions, key, version, doc, running, taken_over_from }
    }

    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    /// The state as of the last checkpoint.
    pub fn doc(&self) -> &SessionDoc {
        &self.doc
    }

    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// The replica this session was taken over from, when this run is a
    /// restart from the last checkpoint after that replica died.
    pub fn taken_over_from(&self) -> Option<&str> {
        self.taken_over_from.as_deref()
    }

    /// Cancelled when the turn must stop: lease lost, cancel, shutdown.
    pub fn cancelled(&self) -> &CancellationToken {
        &self.running.cancel
    }

    /// Where model and tool calls add the time they waited upstream.
    pub fn upstream_time(&self) -> &Arc<UpstreamTime> {
        &self.running.upstream
    }

    /// Notified when another replica wrote something for this session.
    pub fn wake(&self) -> Arc<Notify> {
        self.running.wake.clone()
    }

    pub fn emitter(&self) -> Emitter {
        Emitter { sessions: self.sessions.clone(), key: self.key.clone() }
    }

    /// Queues an event without waiting for it to be durable.
    pub async fn emit(&self, agent: &AgentRef, kind: EventKind) -> Result<(), SessionError> {
        self.emitter().emit(agent, kind).await
    }

    /// Appends events and waits until they (and everything emitted before
    /// them) are durable. Returns the seq of the last one.
    pub async fn append(&self, agent: &AgentRef, kinds: Vec<EventKind>) -> Result<u64, SessionError> {
        self.emitter().append(agent, kinds).await
    }

    /// Writes `update` of the state, fenced by the lease. A concurrent write
    /// by another replica (a relay decision) is re-read and `update` applied
    /// again on top of it.
    pub async fn checkpoint(&mut self, update: impl Fn(&mut SessionDoc)) -> Result<(), SessionError> {
        let lease = LeaseOp::Require {
            replica: self.sessions.replica().to_string(),
            ttl: self.sessions.config().store.lease_ttl,
        };
        self.write(update, lease).await
    }

    /// Re-reads the state written by others (after a wake-up).
    pub async fn reload(&mut self) -> Result<&SessionDoc, SessionError> {
        let (version, doc) = self.sessions.load_raw(&self.key).await?;
        self.version = version;
        self.doc = doc;
        Ok(&self.doc)
    }

    /// Ends the stream for the client: the session waits for answers to
    /// `calls` (and decisions on `relays`). Releases the lease.
    pub async fn pause(mut self, relays: Vec<PendingRelay>, calls: Vec<PendingCall>) -> Result<(), SessionError> {
        let event = EventKind::Paused { pending_relays: relays.clone(), pending_calls: calls.clone() };
        let last_seq = self.append(&main_agent(), vec![event]).await?;
        let release = LeaseOp::Release { replica: self.sessions.replica().to_string() };
        self.write(
            |doc| {
                doc.status = Status::AwaitingClient;
                doc.pending_relays = relays.clone();
                doc.pending_calls = calls.clone();
                doc.last_seq = last_seq;
            },
            release,
        )
        .await?;
        self.stop().await;
        Ok(())
    }

    /// Ends the turn normally. Releases the lease.
    pub async fn finish(self, reason: TurnEndReason, iterations: u32, usage: Usage) -> Result<(), SessionError> {
        self.end(reason, iterations, usage, None).await
    }

    /// Ends the turn with an error the client sees (`code`, `message`, and
    /// for a rate limit how long to wait before retrying).
    pub async fn fail(self, code: &str, message: &str, retry_after_secs: Option<u64>) -> Result<(), SessionError> {
        let error = EventKind::Error { code: code.into(), message: message.into(), retry_after_secs };
        self.append(&main_agent(), vec![error]).await?;
        let usage = self.doc.usage;
        self.end(TurnEndReason::Failed, 0, usage, Some(message.to_string())).await
    }

    async fn end(
        mut self,
        reason: TurnEndReason,
        iterations: u32,
        usage: Usage,
        error: Option<String>,
    ) -> Result<(), SessionError> {
        let event = EventKind::TurnEnded { reason, iterations, usage };
        let last_seq = self.append(&main_agent(), vec![event]).await?;
        let status = match reason {
            TurnEndReason::Final | TurnEndReason::MaxIterations => Status::Completed,
            TurnEndReason::Failed => Status::Failed,
            TurnEndReason::Cancelled => Status::Cancelled,
        };
        let release = LeaseOp::Release { replica: self.sessions.replica().to_string() };
        self.write(
            |doc| {
                doc.status = status;
                doc.pending_relays.clear();
                doc.pending_calls.clear();
                doc.last_seq = last_seq;
                doc.error = error.clone();
            },
            release,
        )
        .await?;
        self.stop().await;
        Ok(())
    }

    async fn write(&mut self, update: impl Fn(&mut SessionDoc), lease: LeaseOp) -> Result<(), SessionError> {
        for _ in 0..CHECKPOINT_RETRIES {
            let mut doc = self.doc.clone();
            update(&mut doc);
            doc.updated_ms = crate::protocol::events::now_ms();
            let outcome = self
                .sessions
                .store()
                .state
                .compare_and_set(&self.key, self.version, &encode(&doc)?, lease.clone())
                .await?;
            match outcome {
                WriteOutcome::Written(version) => {
                    self.version = version;
                    self.doc = doc;
                    return Ok(());
                }
                WriteOutcome::VersionConflict => {
                    self.reload().await?;
                    if self.doc.owner.as_deref() != Some(self.sessions.replica()) || !self.doc.status.is_active() {
                        self.running.cancel.cancel();
                        return Err(SessionError::Conflict("the session was taken over or stopped".into()));
                    }
                }
                WriteOutcome::LeaseConflict => {
                    self.running.cancel.cancel();
                    return Err(SessionError::Conflict("this replica lost the session's lease".into()));
                }
            }
        }
        Err(SessionError::Conflict("the session keeps changing under this turn".into()))
    }

    /// No longer running here: stop renewing and drop it from the lease index.
    async fn stop(&self) {
        self.sessions.forget_running(&self.key).await;
    }
}
