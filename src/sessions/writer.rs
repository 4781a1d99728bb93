//! The writer of one replica: every write of the sessions this replica runs
//! goes through it, as commits fenced by the session's tenure.
//!
//! Each running session has a queue here. A turn puts two kinds of items in
//! it: streamed events (text deltas and the like; the turn does not wait for
//! them) and transitions (state, messages and events together; the turn
//! waits for the answer). The writer sends one commit per session at a
//! time: whatever its queue holds, up to and including the first
//! transition, merged (adjacent text deltas of one agent become one event).
//! So the first token of a step goes out at once, and what arrives while a
//! commit is in flight rides on the next one. Commits of all sessions go
//! out together (one pipelined store call per batch, several batches in
//! flight).
//!
//! With a linger (`store.commit_linger_ms`), streamed events after a
//! step's first wait up to that long, from the oldest of them, for more to
//! join their commit (a transition queued behind them sends them at once):
//! fewer commits and client writes per token, each token that much later.
//! Without one (the default) nothing waits.
//!
//! Nothing is dropped quietly. A commit the store does not answer is sent
//! again — exactly the same commit, so a commit that was applied after all
//! (its answer lost) is recognised by its number and not applied twice —
//! while later items of the session wait behind it, in order. If the store
//! keeps failing for longer than [`give_up`](Writer::start) the session's
//! queue is broken: everything queued fails, the turn learns of it and
//! stops, and the session is restarted from its last commit (with a
//! `step_restarted` where a step was cut) once the store answers. A commit
//! refused by the fence means another instance runs the session now: the
//! queue is broken the same way. An event reaches followers only after its
//! commit succeeded.
//!
//! Back-pressure: a session may have at most [`ROOM`] streamed events
//! waiting; the turn's next event waits for room, which stops it reading
//! from the model until the store catches up.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, OnceLock},
    time::Duration,
};

use futures::{StreamExt, stream::FuturesUnordered};
use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot},
    time::Instant,
};
use tokio_util::sync::CancellationToken;

use super::hub::{EventHub, push_coalesced};
use crate::{
    domain::Event,
    store::{
        Commit, CommitError, Committed, Fence, MessagesWrite, OwnerChange, SessionKey, StateWrite, Store, StoreError,
    },
};

/// Streamed events a session may have waiting for the store.
pub const ROOM: usize = 2048;
/// Batches in flight at once (each: one pipelined store call).
const IN_FLIGHT: usize = 4;
/// Most sessions in one batch.
const BATCH: usize = 256;
/// Bound of the writer's inbox; submitters wait when it is full.
const INBOX: usize = 4096;
/// First and longest wait before sending a failed commit again.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Why a session's writes stopped for good.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// Another instance (or a newer tenure of this one) runs the session.
    #[error("this replica no longer runs the session")]
    Fenced,
    /// The store failed for longer than the writer waits.
    #[error(transparent)]
    Store(StoreError),
    /// The writer stopped (shutdown).
    #[error("the writer has stopped")]
    Stopped,
}

/// What a transition writes besides its events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Change {
    pub events: Vec<Event>,
    pub state: Option<StateWrite>,
    pub messages: MessagesWrite,
    /// `Keep`, or `Release` to end the tenure (end, pause, hand-off).
    pub release: bool,
    pub open_relays: Vec<String>,
    pub close_relays: Vec<String>,
    pub clear_cancel: bool,
    /// Files the transition changed (a tool's result and its files go in
    /// one commit).
    pub workspace: Option<crate::store::WorkspaceWrite>,
}

/// What a pipe sends the writer. Each names its tenure (`epoch`): a turn
/// that lost its session and has not noticed yet must not write into the
/// queue of a later tenure of the same session here.
enum Submission {
    /// A tenure begins (its acquiring commit was made elsewhere).
    Open {
        key: SessionKey,
        epoch: u64,
        broken: Arc<OnceLock<WriteError>>,
    },
    Events {
        key: SessionKey,
        epoch: u64,
        events: Vec<Event>,
        permit: OwnedSemaphorePermit,
    },
    Commit {
        key: SessionKey,
        epoch: u64,
        change: Box<Change>,
        ack: oneshot::Sender<Result<Committed, WriteError>>,
    },
    /// The tenure is over: forget the queue once it is empty.
    Close {
        key: SessionKey,
        epoch: u64,
    },
}

/// The writer's handle.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Submission>,
}

/// The write side of one running session's tenure, cheap to clone (parallel
/// tool calls and subagents emit through clones).
#[derive(Clone)]
pub struct Pipe {
    key: SessionKey,
    epoch: u64,
    tx: mpsc::Sender<Submission>,
    room: Arc<Semaphore>,
    broken: Arc<OnceLock<WriteError>>,
}

impl Writer {
    /// Starts the writer task. `give_up`: how long a session's commits may
    /// keep failing before its queue is broken; `linger`: how long streamed
    /// events may wait for more (see the module docs). It stops when
    /// `shutdown` is cancelled, after one last attempt at what is queued
    /// (bounded by `give_up`), or at once when `halt` is.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        store: Store,
        hub: EventHub,
        instance: String,
        give_up: Duration,
        linger: Duration,
        shutdown: CancellationToken,
        halt: CancellationToken,
        tasks: &tokio_util::task::TaskTracker,
    ) -> Self {
        let (tx, rx) = mpsc::channel(INBOX);
        let task = Task { store, hub, instance, give_up, linger, queues: HashMap::new(), inbox: rx };
        tasks.spawn(task.run(shutdown, halt));
        Self { tx }
    }

    /// Opens the pipe of a tenure that began with commit `epoch`.
    pub async fn open(&self, key: SessionKey, epoch: u64) -> Pipe {
        let broken = Arc::new(OnceLock::new());
        let open = Submission::Open { key: key.clone(), epoch, broken: broken.clone() };
        if self.tx.send(open).await.is_err() {
            let _ = broken.set(WriteError::Stopped);
        }
        Pipe { key, epoch, tx: self.tx.clone(), room: Arc::new(Semaphore::new(ROOM)), broken }
    }
}

impl Pipe {
    /// Why writes stopped, if they did.
    pub fn broken(&self) -> Option<&WriteError> {
        self.broken.get()
    }

    /// Queues streamed events without waiting for the store (only for room).
    pub async fn emit(&self, events: Vec<Event>) -> Result<(), WriteError> {
        if let Some(error) = self.broken.get() {
            return Err(error.clone());
        }
        let permit = self.room.clone().acquire_owned().await.map_err(|_| WriteError::Stopped)?;
        let events = Submission::Events { key: self.key.clone(), epoch: self.epoch, events, permit };
        self.tx.send(events).await.map_err(|_| WriteError::Stopped)
    }

    /// Commits `change` after everything queued before it; waits for the
    /// store's answer.
    pub async fn commit(&self, change: Change) -> Result<Committed, WriteError> {
        if let Some(error) = self.broken.get() {
            return Err(error.clone());
        }
        let (ack, answer) = oneshot::channel();
        let commit = Submission::Commit { key: self.key.clone(), epoch: self.epoch, change: Box::new(change), ack };
        self.tx.send(commit).await.map_err(|_| WriteError::Stopped)?;
        answer.await.map_err(|_| WriteError::Stopped)?
    }

    /// Ends the tenure here (after its last commit, or after it broke).
    pub async fn close(&self) {
        let _ = self.tx.send(Submission::Close { key: self.key.clone(), epoch: self.epoch }).await;
    }
}

enum Item {
    /// Streamed events, holding their room in the session's queue until
    /// they are committed or dropped.
    Events(Vec<Event>, #[allow(dead_code)] OwnedSemaphorePermit),
    Commit(Box<Change>, oneshot::Sender<Result<Committed, WriteError>>),
}

/// A commit built from the head of a queue: sent, and sent again unchanged
/// until the store answers.
struct Attempt {
    /// Items of the queue it carries.
    items: usize,
    /// Whether one of them is a transition.
    transition: bool,
    /// Its events, merged, for the followers once it is durable.
    events: Vec<Event>,
    commit: Commit,
}

struct Queue {
    epoch: u64,
    /// The last commit number the store applied in this tenure.
    n: u64,
    items: VecDeque<Item>,
    attempt: Option<Attempt>,
    in_flight: bool,
    /// When the oldest streamed events not yet in an attempt were queued.
    oldest: Option<Instant>,
    /// Whether the last commit applied carried a transition (or none was
    /// made yet): the next streamed events start a step and do not linger.
    after_transition: bool,
    /// When the store first failed the current attempt, and when to retry.
    failing_since: Option<Instant>,
    retry_at: Option<Instant>,
    backoff: Duration,
    broken: Arc<OnceLock<WriteError>>,
    closing: bool,
}

impl Queue {
    fn ready(&self, now: Instant, linger: Duration) -> bool {
        !self.in_flight
            && self.broken.get().is_none()
            && (self.attempt.is_some() || !self.items.is_empty())
            && self.retry_at.is_none_or(|at| at <= now)
            && self.lingers_until(linger).is_none_or(|until| until <= now)
    }

    /// Until when its streamed events wait for more (see the module docs).
    fn lingers_until(&self, linger: Duration) -> Option<Instant> {
        if linger.is_zero() || self.after_transition || self.attempt.is_some() {
            return None;
        }
        let until = self.oldest? + linger;
        let transition = self.items.iter().any(|item| matches!(item, Item::Commit(..)));
        (!transition).then_some(until)
    }

    /// Breaks the queue: every waiting transition gets `error`, streamed
    /// events are dropped (their room freed); later submissions fail at once.
    fn break_with(&mut self, error: WriteError) {
        let _ = self.broken.set(error.clone());
        self.attempt = None;
        for item in self.items.drain(..) {
            if let Item::Commit(_, ack) = item {
                let _ = ack.send(Err(error.clone()));
            }
        }
    }
}

struct Task {
    store: Store,
    hub: EventHub,
    instance: String,
    give_up: Duration,
    linger: Duration,
    queues: HashMap<SessionKey, Queue>,
    inbox: mpsc::Receiver<Submission>,
}

/// A batch's answers: each session with the tenure its commit was of.
type Batch = Vec<(SessionKey, u64, Result<Committed, CommitError>)>;

impl Task {
    /// What wakes the loop: a submission, a batch's answer, the earliest
    /// retry time, shutdown or halt.
    async fn run(mut self, shutdown: CancellationToken, halt: CancellationToken) {
        let mut in_flight: FuturesUnordered<futures::future::BoxFuture<'static, Batch>> = FuturesUnordered::new();
        loop {
            self.dispatch(&mut in_flight);
            let retry = self.next_retry();
            tokio::select! {
                submission = self.inbox.recv() => match submission {
                    Some(submission) => {
                        self.accept(submission);
                        while let Ok(more) = self.inbox.try_recv() {
                            self.accept(more);
                        }
                    }
                    None => break,
                },
                Some(batch) = in_flight.next(), if !in_flight.is_empty() => self.settle(batch).await,
                () = sleep_until(retry) => {}
                () = shutdown.cancelled() => break,
                () = halt.cancelled() => return,
            }
        }
        // Shutdown: one last attempt at what is queued, so acknowledged
        // work is kept; bounded, for a store that does not answer.
        let give_up = self.give_up;
        let flush = async {
            while let Ok(more) = self.inbox.try_recv() {
                self.accept(more);
            }
            self.linger = Duration::ZERO;
            for queue in self.queues.values_mut() {
                queue.retry_at = None;
            }
            loop {
                self.dispatch(&mut in_flight);
                match in_flight.next().await {
                    Some(batch) => self.settle(batch).await,
                    None => break,
                }
            }
        };
        tokio::select! {
            () = flush => {}
            () = tokio::time::sleep(give_up) => tracing::warn!("writes still queued at shutdown were dropped"),
            () = halt.cancelled() => {}
        }
    }

    /// The earliest time a queue that is not in flight becomes ready: a
    /// retry, or the end of a linger (never both: a queue waiting to retry
    /// holds its attempt, which does not linger).
    fn next_retry(&self) -> Option<Instant> {
        let wake = |q: &Queue| q.retry_at.or_else(|| q.lingers_until(self.linger));
        self.queues.values().filter(|q| !q.in_flight).filter_map(wake).min()
    }

    fn accept(&mut self, submission: Submission) {
        match submission {
            Submission::Open { key, epoch, broken } => {
                self.queues.insert(
                    key,
                    Queue {
                        epoch,
                        n: 0,
                        items: VecDeque::new(),
                        attempt: None,
                        in_flight: false,
                        oldest: None,
                        after_transition: true,
                        failing_since: None,
                        retry_at: None,
                        backoff: RETRY_FIRST,
                        broken,
                        closing: false,
                    },
                );
            }
            Submission::Events { key, epoch, events, permit } => match self.queues.get_mut(&key) {
                Some(queue) if queue.epoch == epoch && queue.broken.get().is_none() => {
                    queue.oldest.get_or_insert_with(Instant::now);
                    queue.items.push_back(Item::Events(events, permit))
                }
                _ => {}
            },
            Submission::Commit { key, epoch, change, ack } => match self.queues.get_mut(&key) {
                Some(queue) if queue.epoch == epoch => match queue.broken.get() {
                    None => queue.items.push_back(Item::Commit(change, ack)),
                    Some(error) => drop(ack.send(Err(error.clone()))),
                },
                // A later tenure of the session runs here now.
                Some(_) => drop(ack.send(Err(WriteError::Fenced))),
                None => drop(ack.send(Err(WriteError::Stopped))),
            },
            Submission::Close { key, epoch } => {
                if self.queues.get(&key).is_some_and(|q| q.epoch == epoch) {
                    if let Some(queue) = self.queues.get_mut(&key) {
                        queue.closing = true;
                    }
                    self.forget_if_done(&key);
                }
            }
        }
    }

    fn forget_if_done(&mut self, key: &SessionKey) {
        let done = self.queues.get(key).is_some_and(|q| {
            q.closing && !q.in_flight && (q.broken.get().is_some() || (q.items.is_empty() && q.attempt.is_none()))
        });
        if done {
            self.queues.remove(key);
        }
    }

    /// Sends the ready sessions' next commits, in batches.
    fn dispatch(&mut self, in_flight: &mut FuturesUnordered<futures::future::BoxFuture<'static, Batch>>) {
        let now = Instant::now();
        while in_flight.len() < IN_FLIGHT {
            let linger = self.linger;
            let ready: Vec<SessionKey> =
                self.queues.iter().filter(|(_, q)| q.ready(now, linger)).map(|(k, _)| k.clone()).take(BATCH).collect();
            if ready.is_empty() {
                return;
            }
            let (mut commits, mut epochs) = (Vec::with_capacity(ready.len()), Vec::with_capacity(ready.len()));
            for key in &ready {
                let Some(queue) = self.queues.get_mut(key) else { continue };
                if queue.attempt.is_none() {
                    queue.attempt = Some(attempt(&self.instance, key, queue));
                    queue.oldest = None;
                }
                queue.in_flight = true;
                if let Some(attempt) = &queue.attempt {
                    commits.push(attempt.commit.clone());
                    epochs.push(queue.epoch);
                }
            }
            let store = self.store.clone();
            in_flight.push(Box::pin(async move {
                let results = store.sessions.commit(&commits).await;
                commits.into_iter().zip(epochs).zip(results).map(|((c, epoch), r)| (c.key, epoch, r)).collect()
            }));
        }
    }

    async fn settle(&mut self, batch: Batch) {
        let now = Instant::now();
        for (key, epoch, result) in batch {
            // The answer of an earlier tenure's commit: its queue is gone.
            let Some(queue) = self.queues.get_mut(&key).filter(|q| q.epoch == epoch) else { continue };
            queue.in_flight = false;
            match result {
                Ok(committed) => {
                    let Some(attempt) = queue.attempt.take() else { continue };
                    queue.n += 1;
                    queue.after_transition = attempt.transition;
                    queue.failing_since = None;
                    queue.retry_at = None;
                    queue.backoff = RETRY_FIRST;
                    for item in queue.items.drain(..attempt.items) {
                        if let Item::Commit(_, ack) = item {
                            let _ = ack.send(Ok(committed));
                        }
                    }
                    if committed.first_seq <= committed.last_seq {
                        self.hub.broadcast(&key, committed.first_seq, attempt.events).await;
                    }
                }
                Err(CommitError::Conflict(conflict)) => {
                    tracing::warn!(session = %key.id, %conflict, "session writes stopped: another replica runs it");
                    queue.break_with(WriteError::Fenced);
                }
                Err(CommitError::Store(error)) => {
                    let since = *queue.failing_since.get_or_insert(now);
                    if now.duration_since(since) >= self.give_up {
                        tracing::warn!(session = %key.id, %error, "session writes stopped: the store keeps failing");
                        queue.break_with(WriteError::Store(error));
                        // Whatever the store did apply, followers here see.
                        self.hub.refill(&key).await;
                    } else {
                        tracing::debug!(session = %key.id, %error, "commit failed; sending it again");
                        queue.retry_at = Some(now + queue.backoff);
                        queue.backoff = (queue.backoff * 2).min(RETRY_MAX);
                    }
                }
            }
            self.forget_if_done(&key);
        }
    }
}

/// The next commit of `queue`: its streamed events up to and including the
/// first transition, merged into one commit numbered `n + 1`.
fn attempt(instance: &str, key: &SessionKey, queue: &Queue) -> Attempt {
    let mut events = Vec::new();
    let mut change = None;
    let mut items = 0;
    for item in &queue.items {
        items += 1;
        match item {
            Item::Events(streamed, _) => {
                for event in streamed {
                    push_coalesced(&mut events, event.clone());
                }
            }
            Item::Commit(transition, _) => {
                events.extend(transition.events.iter().cloned());
                change = Some(transition);
                break;
            }
        }
    }
    let fence = Fence::Owner { instance: instance.to_string(), epoch: queue.epoch, n: queue.n + 1 };
    let mut commit = Commit::new(key.clone(), fence, instance);
    // Serializing plain event structs cannot fail.
    commit.events = events.iter().filter_map(|e| serde_json::to_string(e).ok()).collect();
    if let Some(change) = change {
        commit.state = change.state.clone();
        commit.messages = change.messages.clone();
        commit.owner = if change.release { OwnerChange::Release } else { OwnerChange::Keep };
        commit.open_relays = change.open_relays.clone();
        commit.close_relays = change.close_relays.clone();
        commit.clear_cancel = change.clear_cancel;
        commit.workspace = change.workspace.clone();
    }
    Attempt { items, transition: change.is_some(), events, commit }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    //! The linger, on the memory store and tokio's paused clock: what is
    //! committed when, in virtual time (no wall clock is read).

    use tokio::time::advance;
    use tokio_util::task::TaskTracker;

    use super::*;
    use crate::{
        config::StoreConfig,
        domain::{AgentRef, EventKind},
        store::Notice,
    };

    const LINGER: Duration = Duration::from_millis(100);

    fn text(text: &str) -> Event {
        Event {
            kind: EventKind::TextDelta { text: text.into() },
            agent: AgentRef { agent_id: "main".into(), parent_id: None, depth: 0 },
            ts: 0,
        }
    }

    struct Fixture {
        store: Store,
        key: SessionKey,
        pipe: Pipe,
        // Kept for the writer's and the hub's sake.
        _wakes: mpsc::Receiver<super::super::hub::Wake>,
        _notices: mpsc::Sender<Notice>,
    }

    /// A running session owned by `a#1`, its tenure's pipe on a writer
    /// with `linger`.
    async fn fixture(linger: Duration) -> Fixture {
        let (notices_tx, notices) = mpsc::channel(16);
        let store = Store::open(&StoreConfig::for_unit_tests(), notices_tx.clone(), Default::default()).unwrap();
        let key = SessionKey::new("acme", "s1");
        let mut create = Commit::new(key.clone(), Fence::Absent, "a#1");
        create.owner = OwnerChange::Acquire("a#1".into());
        create.state = Some(StateWrite { doc: "{}".into(), status: "running" });
        store.sessions.commit(&[create]).await.remove(0).expect("the session is created");
        let (tasks, shutdown) = (TaskTracker::new(), CancellationToken::new());
        let (wakes_tx, wakes) = mpsc::channel(16);
        let hub = EventHub::start(store.clone(), "a#1".into(), notices, wakes_tx, tasks.clone(), shutdown.clone());
        let writer = Writer::start(
            store.clone(),
            hub,
            "a#1".into(),
            Duration::from_secs(10),
            linger,
            shutdown,
            CancellationToken::new(),
            &tasks,
        );
        let pipe = writer.open(key.clone(), 1).await;
        Fixture { store, key, pipe, _wakes: wakes, _notices: notices_tx }
    }

    impl Fixture {
        /// The committed text deltas, one string per event.
        async fn texts(&self) -> Vec<String> {
            let range = self.store.log.read_after(&self.key, 0, 100).await.unwrap();
            range
                .events
                .iter()
                .map(|e| serde_json::from_str::<Event>(&e.payload).unwrap())
                .filter_map(|e| match e.kind {
                    EventKind::TextDelta { text } => Some(text),
                    _ => None,
                })
                .collect()
        }

        /// Lets the writer run until it waits (on the inbox, a commit or
        /// the clock): the paused clock does not move meanwhile. Before an
        /// assertion that something was *not* committed.
        async fn settle(&self) {
            for _ in 0..50 {
                tokio::task::yield_now().await;
            }
        }

        /// Waits (without moving the clock) until the committed text deltas
        /// are `expected`.
        async fn committed(&self, expected: &[&str]) {
            for _ in 0..1000 {
                if self.texts().await == expected {
                    return;
                }
                tokio::task::yield_now().await;
            }
            assert_eq!(self.texts().await, expected);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_steps_first_token_goes_at_once_and_later_ones_wait_the_linger_for_company() {
        let f = fixture(LINGER).await;
        f.pipe.emit(vec![text("He")]).await.unwrap();
        // The step's first token is not held.
        f.committed(&["He"]).await;

        f.pipe.emit(vec![text("ll")]).await.unwrap();
        f.settle().await;
        advance(LINGER / 2).await;
        f.pipe.emit(vec![text("o")]).await.unwrap();
        f.settle().await;
        assert_eq!(f.texts().await, ["He"], "within the linger nothing more is committed");
        // The linger counts from the oldest waiting token; one commit, one
        // event, for the tokens that waited.
        advance(LINGER / 2).await;
        f.committed(&["He", "llo"]).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_transition_takes_the_waiting_tokens_along_at_once() {
        let f = fixture(LINGER).await;
        f.pipe.emit(vec![text("a")]).await.unwrap();
        f.committed(&["a"]).await;
        f.pipe.emit(vec![text("b")]).await.unwrap();
        let before = Instant::now();
        let change = Change { events: vec![text("!")], ..Change::default() };
        f.pipe.commit(change).await.expect("the transition commits");
        assert_eq!(Instant::now(), before, "no virtual time passed: nothing waited for the linger");
        assert_eq!(f.texts().await, ["a", "b", "!"]);

        // After a transition, the next token starts a step: at once.
        f.pipe.emit(vec![text("c")]).await.unwrap();
        f.committed(&["a", "b", "!", "c"]).await;
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_linger_every_token_is_committed_as_it_comes() {
        let f = fixture(Duration::ZERO).await;
        let mut sent = Vec::new();
        for token in ["a", "b", "c"] {
            f.pipe.emit(vec![text(token)]).await.unwrap();
            sent.push(token);
            // Each on its own: committed before the next is emitted.
            f.committed(&sent).await;
        }
    }
}
