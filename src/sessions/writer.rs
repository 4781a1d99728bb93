//! The writer of one replica: every write of the sessions this replica runs
//! goes through it, in rounds: one store call (one pipeline, one round trip
//! on one Redis) carries what every session has ready.
//!
//! Each running session has a queue here. A turn puts two kinds of items in
//! it: streamed events (text deltas and the like; the turn does not wait for
//! them) and transitions (state, messages and events together; the turn
//! waits for the answer). A session's part of a round is whatever its queue
//! holds, up to and including the first transition: its streamed events,
//! merged (adjacent text deltas of one agent become one event) and appended
//! as they are — numbered here, one plain append each, fenced by the epoch
//! in their ids (`store::Append`) — then the transition as one fenced
//! commit. A session has one part in flight at a time.
//!
//! When a round goes: at once when nothing is in flight and something is
//! urgent (a transition, or a step's first streamed event: the time to the
//! first token is not traded away); otherwise once the round before it has
//! been answered and a tick (`store.append_tick_us`, 1 ms by default) has
//! passed since it was sent. So a quiet replica's lone token goes at once,
//! and under load each round trip carries every session's tokens of the
//! last tick: tens of appends per round trip at 20,000 tokens/s, where the
//! round trip, not the append, is what Redis pays for.
//!
//! With a linger (`store.commit_linger_ms`), streamed events after a
//! step's first also wait up to that long, from the oldest of them, for
//! more to join them (a transition queued behind them sends them at once):
//! fewer appends and client writes per token, each token that much later.
//! Without one (the default) nothing waits longer than a tick.
//!
//! A commit that writes the state or ends the tenure renews the session's
//! keys' expiry in the store, unless this tenure renewed them less than
//! [`renewal`] ago (its opening commit, or one of its own): a short turn's
//! end costs Redis no `PEXPIRE`s.
//!
//! Nothing is dropped quietly. A part the store does not answer is sent
//! again — exactly the same part, so what was applied after all (its answer
//! lost) is recognised (an append by its id, a commit by its number) and
//! not applied twice — while later items of the session wait behind it, in
//! order. If the store keeps failing for longer than `give_up` the
//! session's queue is broken: everything queued fails, the turn learns of
//! it and stops, and the session is restarted from its last commit (with a
//! `step_restarted` where a step was cut) once the store answers. A part
//! refused by the fence means another instance runs the session now: the
//! queue is broken the same way. An event reaches followers only after the
//! store acknowledged it: this replica's followers get it from memory at
//! that moment; other replicas' hear of it only while one of them follows
//! the session (its appends are then announced).
//!
//! A tenure may open held ([`Writer::open_held`]): a new session's first
//! turn runs while the commit creating the session is on its way. Its queue
//! fills as any other, but nothing of it is sent until its [`Gate`] is
//! released (the commit was made as foreseen); a gate discarded (or
//! dropped) breaks the queue as fenced, so nothing of the turn is written.
//!
//! Back-pressure: a session may have at most [`ROOM`] streamed events
//! waiting; the turn's next event waits for room, which stops it reading
//! from the model until the store catches up.
//!
//! Streamed events do not travel as messages: a pipe adds them to one list
//! under a short lock ([`Streamed`]) and wakes the writer only when the
//! list was empty, and the writer takes the whole list at each turn of its
//! loop (and before any transition, so a session's events stay in order).
//! A busy writer is not woken once per token.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex, MutexGuard, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use foldhash::{HashMap, HashSet};
use futures::future::BoxFuture;
use tokio::{
    sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot},
    time::Instant,
};
use tokio_util::sync::CancellationToken;

use super::hub::{EventHub, push_coalesced};
use crate::{
    domain::{Event, Held},
    store::{
        Append, Commit, CommitError, Committed, Fence, MessagesWrite, OwnerChange, SessionKey, SessionWrite,
        StateWrite, Store, StoreError, Wrote,
    },
    telemetry::metrics::Metrics,
    wake::Polled,
};

/// Streamed events a session may have waiting for the store.
pub const ROOM: usize = 2048;
/// Bound of the writer's inbox; submitters wait when it is full.
const INBOX: usize = 4096;
/// First and longest wait before sending a failed part again.
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

/// How the writer paces its rounds (`[store]`).
#[derive(Debug, Clone, Copy)]
pub struct Pacing {
    /// How long a session's parts may keep failing before its queue is
    /// broken (`store.hold_max_secs`).
    pub give_up: Duration,
    /// How often, while they fail, the session's streams here are told
    /// (`store.hold_notice_secs`; the first notice after as long).
    pub hold_notice: Duration,
    /// How long a shutdown waits for what is still queued.
    pub flush: Duration,
    /// How long streamed events after a step's first wait for more.
    pub linger: Duration,
    /// The least time between two rounds that carry no urgent item.
    pub tick: Duration,
    /// How long after a tenure's last renewal of the session's keys its
    /// commits renew them again ([`renewal`]).
    pub renew_after: Duration,
}

/// How long after a renewal of a session's keys (which then expire
/// `session_ttl` later) a commit leaves their expiry alone: a sixteenth of
/// the TTL, at most a minute. A short turn's end then costs Redis no
/// `PEXPIRE`s (its start renewed them moments before), and the keys still
/// expire no sooner than that much short of `session_ttl` after the last
/// commit.
pub fn renewal(session_ttl: Duration) -> Duration {
    (session_ttl / 16).min(Duration::from_secs(60))
}

/// When the writer stops: at `shutdown`, after one last attempt at what is
/// queued (bounded by [`Pacing::flush`]); at `halt`, at once.
pub struct Stops {
    pub shutdown: CancellationToken,
    pub halt: CancellationToken,
}

/// A tenure's queue here: a number no other tenure gets (so a turn that
/// lost its session and has not noticed yet never writes into a later
/// tenure's queue), cheap to look up per token.
type Tenure = u64;

/// What a pipe sends the writer: `Open` and `Event` through [`Streamed`]
/// (in order with each other), the rest as messages.
enum Submission {
    /// A tenure begins (its acquiring commit was made elsewhere); the log
    /// ends at `last_seq`. A `held` tenure's commit is still on its way:
    /// nothing of it is sent until its [`Gate`] is released.
    Open {
        tenure: Tenure,
        key: SessionKey,
        epoch: u64,
        last_seq: u64,
        held: bool,
        broken: Arc<OnceLock<WriteError>>,
    },
    /// A held tenure's commit was made as foreseen: its writes may go.
    Release {
        tenure: Tenure,
    },
    /// A held tenure's commit failed, or began the tenure elsewhere than
    /// foreseen: nothing of it is written; its turn learns it lost the
    /// session.
    Discard {
        tenure: Tenure,
    },
    Event {
        tenure: Tenure,
        event: Event,
        permit: OwnedSemaphorePermit,
    },
    Commit {
        tenure: Tenure,
        change: Box<Change>,
        ack: oneshot::Sender<Result<Committed, WriteError>>,
    },
    /// The tenure is over: forget the queue once it is empty.
    Close {
        tenure: Tenure,
    },
    /// Another instance began following `key`: announce its appends.
    Followed {
        key: SessionKey,
    },
}

/// The streamed events of every pipe (and the opening of each tenure,
/// which comes before them), waiting for the writer to take them (see the
/// module docs).
#[derive(Default)]
struct Streamed {
    waiting: Mutex<Waiting>,
    /// Wakes the writer when the first event arrives after a take.
    arrived: Notify,
}

#[derive(Default)]
struct Waiting {
    events: Vec<Submission>,
    /// The writer has stopped: nothing is taken any more.
    closed: bool,
}

impl Streamed {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        // Nothing panics while holding it; a poisoned lock is still usable.
        self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds an event (or an opening); false once the writer has stopped.
    fn push(&self, event: Submission) -> bool {
        let first = {
            let mut waiting = self.lock();
            if waiting.closed {
                return false;
            }
            waiting.events.push(event);
            waiting.events.len() == 1
        };
        if first {
            self.arrived.notify_one();
        }
        true
    }

    /// Takes what waits into `into` (emptied first; its room is reused).
    fn take(&self, into: &mut Vec<Submission>) {
        into.clear();
        let mut waiting = self.lock();
        if !waiting.events.is_empty() {
            std::mem::swap(&mut waiting.events, into);
        }
    }

    /// The writer stopped: what waits is dropped (its room freed, outside
    /// the lock), later pushes fail.
    fn close(&self) {
        let _dropped = {
            let mut waiting = self.lock();
            waiting.closed = true;
            std::mem::take(&mut waiting.events)
        };
    }
}

/// Closes [`Streamed`] when the writer's task ends, however it ends.
struct CloseOnDrop(Arc<Streamed>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// The writer's handle.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Submission>,
    streamed: Arc<Streamed>,
    tenures: Arc<AtomicU64>,
}

/// The write side of one running session's tenure, cheap to clone (parallel
/// tool calls and subagents emit through clones).
#[derive(Clone)]
pub struct Pipe {
    tenure: Tenure,
    tx: mpsc::Sender<Submission>,
    streamed: Arc<Streamed>,
    room: Arc<Semaphore>,
    broken: Arc<OnceLock<WriteError>>,
}

impl Writer {
    /// Starts the writer task, paced by `pacing` (see the module docs),
    /// until `stops` says.
    pub fn start(
        store: Store,
        hub: EventHub,
        instance: String,
        pacing: Pacing,
        metrics: Arc<Metrics>,
        stops: Stops,
        tasks: &tokio_util::task::TaskTracker,
    ) -> Self {
        let (tx, rx) = mpsc::channel(INBOX);
        let streamed = Arc::new(Streamed::default());
        let task = Task {
            store,
            hub,
            metrics,
            instance: instance.into(),
            pacing,
            queues: HashMap::default(),
            tenures: HashMap::default(),
            ready: HashSet::default(),
            failing: HashSet::default(),
            inbox: rx,
            streamed: streamed.clone(),
            taken: Vec::new(),
            last_round: None,
        };
        tasks.spawn(task.run(stops.shutdown, stops.halt));
        Self { tx, streamed, tenures: Arc::new(AtomicU64::new(0)) }
    }

    /// Opens the pipe of a tenure that began with commit `epoch`, after
    /// which the log ends at `last_seq`.
    pub fn open(&self, key: SessionKey, epoch: u64, last_seq: u64) -> Pipe {
        self.open_tenure(key, epoch, last_seq, false)
    }

    /// Opens the pipe of a tenure whose commit is still on its way, as it
    /// is foreseen to end (`epoch`, the log ending at `last_seq`): its turn
    /// may run and queue, nothing is sent until the [`Gate`] says the commit
    /// was made so.
    pub fn open_held(&self, key: SessionKey, epoch: u64, last_seq: u64) -> (Pipe, Gate) {
        let pipe = self.open_tenure(key, epoch, last_seq, true);
        let gate = Gate { tenure: pipe.tenure, tx: self.tx.clone(), said: false };
        (pipe, gate)
    }

    fn open_tenure(&self, key: SessionKey, epoch: u64, last_seq: u64, held: bool) -> Pipe {
        let tenure = self.tenures.fetch_add(1, Ordering::Relaxed) + 1;
        let broken = Arc::new(OnceLock::new());
        let open = Submission::Open { tenure, key, epoch, last_seq, held, broken: broken.clone() };
        if !self.streamed.push(open) {
            let _ = broken.set(WriteError::Stopped);
        }
        Pipe {
            tenure,
            tx: self.tx.clone(),
            streamed: self.streamed.clone(),
            room: Arc::new(Semaphore::new(ROOM)),
            broken,
        }
    }

    /// Another instance began following `key` (its owner, this replica,
    /// was told): from now on its appends are announced.
    pub async fn followed(&self, key: SessionKey) {
        let _ = self.tx.send(Submission::Followed { key }).await;
    }
}

/// What holds a held tenure's writes back ([`Writer::open_held`]): released
/// when its commit was made as foreseen, discarded otherwise. Dropped
/// without either, it discards.
pub struct Gate {
    tenure: Tenure,
    tx: mpsc::Sender<Submission>,
    said: bool,
}

impl Gate {
    /// The tenure's writes may go.
    pub async fn release(self) {
        self.say(true).await;
    }

    /// Nothing of the tenure is written; its turn's writes fail as fenced.
    pub async fn discard(self) {
        self.say(false).await;
    }

    async fn say(mut self, release: bool) {
        self.said = true;
        let tenure = self.tenure;
        let submission = if release { Submission::Release { tenure } } else { Submission::Discard { tenure } };
        // A stopped writer sends nothing anyway.
        let _ = self.tx.send(submission).await;
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        if !self.said {
            let _ = self.tx.try_send(Submission::Discard { tenure: self.tenure });
        }
    }
}

impl Pipe {
    /// Why writes stopped, if they did.
    pub fn broken(&self) -> Option<&WriteError> {
        self.broken.get()
    }

    /// Queues a streamed event without waiting for the store (only for
    /// room).
    pub async fn emit(&self, event: Event) -> Result<(), WriteError> {
        if let Some(error) = self.broken.get() {
            return Err(error.clone());
        }
        let permit = self.room.clone().acquire_owned().await.map_err(|_| WriteError::Stopped)?;
        let event = Submission::Event { tenure: self.tenure, event, permit };
        if self.streamed.push(event) { Ok(()) } else { Err(WriteError::Stopped) }
    }

    /// Commits `change` after everything queued before it; waits for the
    /// store's answer.
    pub async fn commit(&self, change: Change) -> Result<Committed, WriteError> {
        if let Some(error) = self.broken.get() {
            return Err(error.clone());
        }
        let (ack, answer) = oneshot::channel();
        let commit = Submission::Commit { tenure: self.tenure, change: Box::new(change), ack };
        self.tx.send(commit).await.map_err(|_| WriteError::Stopped)?;
        answer.await.map_err(|_| WriteError::Stopped)?
    }

    /// Ends the tenure here (after its last commit, or after it broke).
    pub async fn close(&self) {
        let _ = self.tx.send(Submission::Close { tenure: self.tenure }).await;
    }
}

enum Item {
    /// A streamed event (`None` once it moved into an attempt), holding its
    /// room in the session's queue until it is written or dropped.
    Event(Option<Event>, #[allow(dead_code)] OwnedSemaphorePermit),
    Commit(Box<Change>, oneshot::Sender<Result<Committed, WriteError>>),
}

/// A session's part of a round, built from the head of its queue: sent,
/// and sent again unchanged until the store answers.
struct Attempt {
    /// Items of the queue it carries.
    items: usize,
    /// Its streamed events, merged, numbered from `append.first_seq`.
    streamed: Vec<Event>,
    /// The transition's events (numbered by the commit's answer).
    committed: Vec<Event>,
    /// Its write when a round brought it back failed, to be sent again
    /// (`None` while a round carries it: the write goes out the moment the
    /// attempt is made). Boxed: what goes to the store is half a kilobyte,
    /// and a queue is held for every session running here, nearly all of
    /// them with nothing to send again.
    unsent: Option<Box<SessionWrite>>,
    /// When it was made, if its commit renews the session's keys.
    renews: Option<Instant>,
}

struct Queue {
    key: SessionKey,
    epoch: u64,
    /// The last commit number the store applied in this tenure.
    n: u64,
    /// Where the log ends with everything sent so far (the next append's
    /// seq is one more).
    seq: u64,
    items: VecDeque<Item>,
    /// Transitions among `items`.
    transitions: usize,
    attempt: Option<Attempt>,
    in_flight: bool,
    /// When the oldest streamed events not yet in an attempt were queued.
    oldest: Option<Instant>,
    /// Whether the last part applied carried a transition (or none was
    /// made yet): the next streamed events start a step, are urgent and do
    /// not linger.
    after_transition: bool,
    /// Another instance follows the session: appends are announced.
    followed: bool,
    /// The commit that begins the tenure is still on its way: nothing is
    /// sent ([`Gate`]).
    held: bool,
    /// Just released: its first streamed event goes alone, as it would
    /// have gone at once (what the turn streamed meanwhile follows it).
    first_alone: bool,
    /// An announcement of where the log ends is owed (a follower elsewhere
    /// appeared while nothing was queued).
    announce: bool,
    /// When the session's keys were last renewed, as far as this tenure
    /// knows (its opening, or a commit of it that renewed them): at or
    /// before the store did it.
    renewed: Instant,
    /// When the store first failed the current attempt (and as Unix ms),
    /// when to retry, and when the session's streams were last told.
    failing_since: Option<Instant>,
    failing_since_ms: u64,
    /// The store's last error while failing, for the notices.
    failing_reason: String,
    noticed_at: Option<Instant>,
    retry_at: Option<Instant>,
    backoff: Duration,
    broken: Arc<OnceLock<WriteError>>,
    closing: bool,
}

impl Queue {
    /// Whether it has a part to send now (`urgent`: a transition or a
    /// step's first streamed event).
    fn ready(&self, now: Instant, linger: Duration) -> Option<Readiness> {
        let sendable = !self.in_flight
            && !self.held
            && self.broken.get().is_none()
            && (self.attempt.is_some() || !self.items.is_empty() || self.announce)
            && self.retry_at.is_none_or(|at| at <= now)
            && self.lingers_until(linger).is_none_or(|until| until <= now);
        if !sendable {
            return None;
        }
        let urgent = self.attempt.is_none()
            && match self.items.front() {
                Some(Item::Commit(..)) => true,
                Some(Item::Event(..)) => self.after_transition || self.transitions > 0,
                None => false,
            };
        Some(if urgent { Readiness::Urgent } else { Readiness::Ready })
    }

    /// Until when its streamed events wait for more (see the module docs).
    fn lingers_until(&self, linger: Duration) -> Option<Instant> {
        if linger.is_zero() || self.after_transition || self.attempt.is_some() {
            return None;
        }
        let until = self.oldest? + linger;
        (self.transitions == 0).then_some(until)
    }

    /// The notice that its writes are held (`gave_up`: for good), now;
    /// the next one is due `hold_notice` after it.
    fn held_notice(&mut self, now: Instant, gave_up: bool) -> Held {
        self.noticed_at = Some(now);
        let held_for = now.duration_since(self.failing_since.unwrap_or(now));
        Held { since_ms: self.failing_since_ms, held_for, reason: self.failing_reason.clone(), gave_up }
    }

    /// Breaks the queue: every waiting transition gets `error`, streamed
    /// events are dropped (their room freed); later submissions fail at once.
    fn break_with(&mut self, error: WriteError) {
        let _ = self.broken.set(error.clone());
        self.attempt = None;
        self.transitions = 0;
        for item in self.items.drain(..) {
            if let Item::Commit(_, ack) = item {
                let _ = ack.send(Err(error.clone()));
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Readiness {
    Ready,
    Urgent,
}

struct Task {
    metrics: Arc<Metrics>,
    store: Store,
    hub: EventHub,
    instance: Arc<str>,
    pacing: Pacing,
    /// Boxed: the map's table is sized at a power of two above twice its
    /// entries, so an inline queue (≈ 300 bytes) would cost every session
    /// running here more than its own size in empty slots.
    queues: HashMap<Tenure, Box<Queue>>,
    /// The tenure running each session here.
    tenures: HashMap<SessionKey, Tenure>,
    /// Queues that may have a part to send (checked at each dispatch).
    ready: HashSet<Tenure>,
    /// Queues whose writes the store keeps failing: their streams are told
    /// every `hold_notice`, whether or not a retry has come back (a round
    /// waiting on a node that does not answer takes as long as it takes).
    failing: HashSet<Tenure>,
    inbox: mpsc::Receiver<Submission>,
    streamed: Arc<Streamed>,
    /// The last take of `streamed` (kept for its room).
    taken: Vec<Submission>,
    /// When the last round was sent.
    last_round: Option<Instant>,
}

/// A round's answers: each tenure's write and its result.
type Round = Vec<(Tenure, SessionWrite, Result<Wrote, CommitError>)>;

impl Task {
    /// What wakes the loop: a submission, the round's answer, the next
    /// tick, retry or linger's end, shutdown or halt.
    async fn run(mut self, shutdown: CancellationToken, halt: CancellationToken) {
        let _close = CloseOnDrop(self.streamed.clone());
        let mut in_flight: Option<BoxFuture<'static, Round>> = None;
        // Waited for once, and polled only once they fire, not at every
        // turn of the loop.
        let (mut stopping, mut halting) = (Polled::new(shutdown.cancelled()), Polled::new(halt.cancelled()));
        loop {
            self.take_streamed();
            let mut wake = None;
            if in_flight.is_none() {
                match self.dispatch(Instant::now(), false) {
                    Ok(round) => in_flight = round,
                    Err(at) => wake = at,
                }
            }
            let notice = self.next_notice();
            tokio::select! {
                submission = self.inbox.recv() => match submission {
                    Some(submission) => {
                        self.receive(submission);
                        while let Ok(more) = self.inbox.try_recv() {
                            self.receive(more);
                        }
                    }
                    None => break,
                },
                round = async { in_flight.as_mut().expect("guarded").await }, if in_flight.is_some() => {
                    in_flight = None;
                    self.settle(round).await;
                }
                () = self.streamed.arrived.notified() => {}
                () = sleep_until(wake) => {}
                () = sleep_until(notice) => self.notify_held(Instant::now()),
                () = &mut stopping => break,
                () = &mut halting => return,
            }
        }
        // Shutdown: one last attempt at what is queued, so acknowledged
        // work is kept; bounded, for a store that does not answer.
        let give_up = self.pacing.flush;
        let flush = async {
            if let Some(round) = in_flight.take() {
                self.settle(round.await).await;
            }
            self.take_streamed();
            while let Ok(more) = self.inbox.try_recv() {
                self.receive(more);
            }
            self.pacing.linger = Duration::ZERO;
            for queue in self.queues.values_mut() {
                queue.retry_at = None;
            }
            while let Ok(Some(round)) = self.dispatch(Instant::now(), true) {
                let answers = round.await;
                self.settle(answers).await;
            }
        };
        tokio::select! {
            () = flush => {}
            () = tokio::time::sleep(give_up) => tracing::warn!("writes still queued at shutdown were dropped"),
            () = halt.cancelled() => {}
        }
    }

    /// Queues the streamed events (and openings) that wait (see
    /// [`Streamed`]).
    fn take_streamed(&mut self) {
        let mut taken = std::mem::take(&mut self.taken);
        self.streamed.take(&mut taken);
        for submission in taken.drain(..) {
            self.accept(submission);
        }
        self.taken = taken;
    }

    /// Takes a message: first what was streamed before it (a tenure's
    /// opening and events come before its transitions and its close).
    fn receive(&mut self, submission: Submission) {
        self.take_streamed();
        self.accept(submission);
    }

    fn accept(&mut self, submission: Submission) {
        match submission {
            Submission::Open { tenure, key, epoch, last_seq, held, broken } => {
                // A later tenure of a session here: the earlier one's queue
                // (if any) is fenced by the store anyway. A held one is the
                // session's only once released (its commit may still fail:
                // a session of that id exists, maybe running here).
                if !held {
                    self.tenures.insert(key.clone(), tenure);
                }
                self.queues.insert(
                    tenure,
                    Box::new(Queue {
                        key,
                        epoch,
                        n: 0,
                        seq: last_seq,
                        items: VecDeque::new(),
                        transitions: 0,
                        attempt: None,
                        in_flight: false,
                        oldest: None,
                        after_transition: true,
                        followed: false,
                        held,
                        first_alone: false,
                        announce: false,
                        renewed: Instant::now(),
                        failing_since: None,
                        failing_since_ms: 0,
                        failing_reason: String::new(),
                        noticed_at: None,
                        retry_at: None,
                        backoff: RETRY_FIRST,
                        broken,
                        closing: false,
                    }),
                );
            }
            Submission::Commit { tenure, change, ack } => match self.queues.get_mut(&tenure) {
                Some(queue) => match queue.broken.get() {
                    None => {
                        queue.items.push_back(Item::Commit(change, ack));
                        queue.transitions += 1;
                        self.ready.insert(tenure);
                    }
                    Some(error) => drop(ack.send(Err(error.clone()))),
                },
                // Its queue is gone: a later tenure runs the session here,
                // or the writer is shutting down.
                None => drop(ack.send(Err(WriteError::Fenced))),
            },
            Submission::Event { tenure, event, permit } => {
                if let Some(queue) = self.queues.get_mut(&tenure)
                    && queue.broken.get().is_none()
                {
                    queue.oldest.get_or_insert_with(Instant::now);
                    queue.items.push_back(Item::Event(Some(event), permit));
                    self.ready.insert(tenure);
                }
            }
            Submission::Release { tenure } => {
                if let Some(queue) = self.queues.get_mut(&tenure)
                    && std::mem::take(&mut queue.held)
                {
                    queue.first_alone = true;
                    self.tenures.insert(queue.key.clone(), tenure);
                    self.ready.insert(tenure);
                }
            }
            Submission::Discard { tenure } => {
                if let Some(queue) = self.queues.get_mut(&tenure)
                    && queue.held
                {
                    queue.break_with(WriteError::Fenced);
                }
                self.forget_if_done(tenure);
            }
            Submission::Close { tenure } => {
                if let Some(queue) = self.queues.get_mut(&tenure) {
                    queue.closing = true;
                }
                self.forget_if_done(tenure);
            }
            Submission::Followed { key } => {
                if let Some(&tenure) = self.tenures.get(&key)
                    && let Some(queue) = self.queues.get_mut(&tenure)
                    && !queue.followed
                {
                    queue.followed = true;
                    // What was acknowledged before it heard: announced now
                    // (what is in flight is announced with its answer).
                    queue.announce = true;
                    self.ready.insert(tenure);
                }
            }
        }
    }

    fn forget_if_done(&mut self, tenure: Tenure) {
        let done = self.queues.get(&tenure).is_some_and(|q| {
            q.closing && !q.in_flight && (q.broken.get().is_some() || (q.items.is_empty() && q.attempt.is_none()))
        });
        if done && let Some(queue) = self.queues.remove(&tenure) {
            self.ready.remove(&tenure);
            if self.tenures.get(&queue.key) == Some(&tenure) {
                self.tenures.remove(&queue.key);
            }
        }
    }

    /// The next round, if one should go now (`all`: whatever is ready,
    /// ignoring the tick); otherwise when to look again (`None`: when
    /// something arrives).
    fn dispatch(&mut self, now: Instant, all: bool) -> Result<Option<BoxFuture<'static, Round>>, Option<Instant>> {
        let linger = self.pacing.linger;
        let mut best = None;
        let mut later: Option<Instant> = None;
        let mut idle = Vec::new();
        for &tenure in &self.ready {
            let Some(queue) = self.queues.get(&tenure) else {
                idle.push(tenure);
                continue;
            };
            match queue.ready(now, linger) {
                Some(readiness) => best = best.max(Some(readiness)),
                None if queue.in_flight => {}
                None => match queue.retry_at.or_else(|| queue.lingers_until(linger)) {
                    Some(at) => later = Some(later.map_or(at, |l| l.min(at))),
                    None => idle.push(tenure),
                },
            }
        }
        for tenure in idle {
            self.ready.remove(&tenure);
        }
        let Some(readiness) = best else { return Err(later) };
        let next_tick = self.last_round.map(|at| at + self.pacing.tick);
        if !all && readiness == Readiness::Ready && next_tick.is_some_and(|tick| tick > now) {
            return Err(next_tick.into_iter().chain(later).min());
        }
        let mut writes = Vec::with_capacity(self.ready.len());
        let mut tenures = Vec::with_capacity(self.ready.len());
        for &tenure in &self.ready {
            let Some(queue) = self.queues.get_mut(&tenure) else { continue };
            if queue.ready(now, linger).is_none() {
                continue;
            }
            let write = if queue.attempt.is_none() {
                let renew = now.saturating_duration_since(queue.renewed) >= self.pacing.renew_after;
                let (attempt, write) = attempt(&self.instance, queue, now, renew);
                queue.attempt = Some(attempt);
                queue.oldest = None;
                queue.announce = false;
                Some(write)
            } else {
                queue.attempt.as_mut().and_then(|a| a.unsent.take()).map(|write| *write)
            };
            if let Some(write) = write {
                queue.in_flight = true;
                writes.push(write);
                tenures.push(tenure);
            }
        }
        if writes.is_empty() {
            return Err(later);
        }
        self.last_round = Some(now);
        let store = self.store.clone();
        Ok(Some(Box::pin(async move {
            let results = store.sessions.write(&writes).await;
            tenures
                .into_iter()
                .zip(writes)
                .zip(results)
                .map(|((tenure, write), result)| (tenure, write, result))
                .collect()
        })))
    }

    /// When the next held notice is due (`None`: no write is failing).
    fn next_notice(&self) -> Option<Instant> {
        let due = |queue: &Queue| Some(queue.noticed_at.or(queue.failing_since)? + self.pacing.hold_notice);
        self.failing.iter().filter_map(|tenure| self.queues.get(tenure).map(Box::as_ref).and_then(due)).min()
    }

    /// Tells the streams of every queue whose writes have failed for
    /// `hold_notice` since the last notice (or since they began failing)
    /// that the turn is held.
    fn notify_held(&mut self, now: Instant) {
        let hold_notice = self.pacing.hold_notice;
        self.failing.retain(|tenure| self.queues.get(tenure).is_some_and(|q| q.broken.get().is_none()));
        for tenure in &self.failing {
            let Some(queue) = self.queues.get_mut(tenure) else { continue };
            let Some(since) = queue.failing_since else { continue };
            if queue.noticed_at.unwrap_or(since) + hold_notice > now {
                continue;
            }
            self.metrics.held_notice("held");
            let held = queue.held_notice(now, false);
            self.hub.held(&queue.key, Some(held));
        }
    }

    async fn settle(&mut self, round: Round) {
        let now = Instant::now();
        for (tenure, write, result) in round {
            let Some(queue) = self.queues.get_mut(&tenure) else { continue };
            queue.in_flight = false;
            match result {
                Ok(wrote) => {
                    let Some(attempt) = queue.attempt.take() else { continue };
                    if let Some(at) = attempt.renews {
                        queue.renewed = at;
                    }
                    if queue.noticed_at.take().is_some() {
                        self.hub.held(&queue.key, None);
                    }
                    self.failing.remove(&tenure);
                    queue.failing_since = None;
                    queue.retry_at = None;
                    queue.backoff = RETRY_FIRST;
                    if let Some(append) = &write.append {
                        queue.seq = append.last_seq();
                        if !attempt.streamed.is_empty() {
                            self.hub.broadcast(&queue.key, append.first_seq, attempt.streamed);
                        }
                    }
                    let mut acks = queue.items.drain(..attempt.items).filter_map(|item| match item {
                        Item::Commit(_, ack) => Some(ack),
                        Item::Event(..) => None,
                    });
                    let ack = acks.next();
                    drop(acks);
                    queue.transitions -= usize::from(ack.is_some());
                    if attempt.items > 0 {
                        queue.after_transition = ack.is_some();
                    }
                    // A transition applied with nothing behind it: the turn
                    // waits (a relay, a tool) or ends, and its queue keeps
                    // no room for the streamed events it had (one
                    // allocation per transition, none per token).
                    if ack.is_some() && queue.items.is_empty() {
                        queue.items = VecDeque::new();
                    }
                    if let (Some(ack), Some(committed)) = (ack, wrote.committed) {
                        queue.n += 1;
                        queue.seq = committed.last_seq;
                        // Only ever turned on: a follower that registered
                        // after the commit read may have been heard first.
                        queue.followed |= committed.followed_elsewhere;
                        if committed.first_seq <= committed.last_seq {
                            self.hub.broadcast(&queue.key, committed.first_seq, attempt.committed);
                        }
                        let _ = ack.send(Ok(committed));
                    }
                }
                Err(CommitError::Conflict(conflict)) => {
                    tracing::warn!(session = %queue.key.id, %conflict, "session writes stopped: another replica runs it");
                    queue.break_with(WriteError::Fenced);
                }
                Err(CommitError::Store(error @ StoreError::Corrupt(_))) => {
                    tracing::error!(session = %queue.key.id, %error, "session writes stopped: the store's answer is unusable");
                    queue.break_with(WriteError::Store(error));
                    self.hub.refill(&queue.key).await;
                }
                Err(CommitError::Store(error)) => {
                    // Sent again as it was, except that a late commit renews
                    // the keys (whether it renews is no part of what makes
                    // a commit recognisable when its answer was lost; as
                    // it may have been applied without, the tenure's last
                    // renewal stays what it knew).
                    if let Some(attempt) = queue.attempt.as_mut() {
                        let mut write = write;
                        if let Some(commit) = write.commit.as_mut() {
                            commit.renew = true;
                        }
                        attempt.unsent = Some(Box::new(write));
                    }
                    if queue.failing_since.is_none() {
                        queue.failing_since = Some(now);
                        queue.failing_since_ms = crate::domain::now_ms();
                        self.failing.insert(tenure);
                    }
                    queue.failing_reason = error.to_string();
                    let held_for = now.duration_since(queue.failing_since.unwrap_or(now));
                    if held_for >= self.pacing.give_up {
                        // The turn's streams here hear of it when the writer
                        // gives up (and every few seconds before:
                        // `notify_held`).
                        self.metrics.held_notice("gave_up");
                        let held = queue.held_notice(now, true);
                        self.hub.held(&queue.key, Some(held));
                        self.failing.remove(&tenure);
                        tracing::warn!(session = %queue.key.id, %error, "session writes stopped: the store keeps failing");
                        queue.break_with(WriteError::Store(error));
                        // Whatever the store did apply, followers here see.
                        self.hub.refill(&queue.key).await;
                    } else {
                        tracing::debug!(session = %queue.key.id, %error, "write failed; sending it again");
                        queue.retry_at = Some(now + queue.backoff);
                        queue.backoff = (queue.backoff * 2).min(RETRY_MAX);
                    }
                }
            }
            self.ready.insert(tenure);
            self.forget_if_done(tenure);
        }
    }
}

/// The next part of `queue`: its streamed events up to the first
/// transition, merged and numbered after `queue.seq`, and that transition
/// as commit `n + 1`. The items' contents move into it (the items stay, to
/// hold their room and the transition's answer until it is written),
/// with what goes to the store. Made at `now`; its commit may renew the
/// session's keys if `renew` ([`Commit::renews`]).
fn attempt(instance: &Arc<str>, queue: &mut Queue, now: Instant, renew: bool) -> (Attempt, SessionWrite) {
    let mut streamed = Vec::with_capacity(queue.items.len());
    let mut change = None;
    let mut items = 0;
    let alone = std::mem::take(&mut queue.first_alone);
    for item in &mut queue.items {
        items += 1;
        match item {
            Item::Event(event, _) => {
                if let Some(event) = event.take() {
                    push_coalesced(&mut streamed, event);
                }
                if alone {
                    break;
                }
            }
            Item::Commit(transition, _) => {
                change = Some(std::mem::take(&mut **transition));
                break;
            }
        }
    }
    // Serializing plain event structs cannot fail.
    let encode = |events: &[Event]| {
        let mut encoded = Vec::with_capacity(events.len());
        encoded.extend(events.iter().filter_map(|e| e.to_json().ok()));
        encoded
    };
    // An owed announcement with nothing to append goes alone; a commit
    // announces its own (and the appends' before it).
    let append = (!streamed.is_empty() || (queue.announce && change.is_none())).then(|| Append {
        instance: instance.clone(),
        epoch: queue.epoch,
        first_seq: queue.seq + 1,
        events: encode(&streamed),
        announce: queue.followed,
    });
    let after = queue.seq + streamed.len() as u64;
    let mut committed = Vec::new();
    let commit = change.map(|change| {
        let fence = Fence::Owner { instance: instance.to_string(), epoch: queue.epoch, n: queue.n + 1, after };
        let mut commit = Commit::new(queue.key.clone(), fence, &**instance);
        commit.events = encode(&change.events);
        commit.state = change.state;
        commit.messages = change.messages;
        commit.owner = if change.release { OwnerChange::Release } else { OwnerChange::Keep };
        commit.open_relays = change.open_relays;
        commit.close_relays = change.close_relays;
        commit.clear_cancel = change.clear_cancel;
        commit.workspace = change.workspace;
        commit.renew = renew;
        committed = change.events;
        commit
    });
    let renews = commit.as_ref().is_some_and(Commit::renews);
    let attempt = Attempt { items, streamed, committed, unsent: None, renews: renews.then_some(now) };
    (attempt, SessionWrite { key: queue.key.clone(), append, commit })
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
        /// Whether each commit the writer sent may renew the session's keys.
        renews: Arc<Mutex<Vec<bool>>>,
        key: SessionKey,
        writer: Writer,
        pipe: Pipe,
        // Kept for the writer's and the hub's sake.
        _wakes: mpsc::Receiver<super::super::hub::Wake>,
        _notices: mpsc::Sender<Notice>,
    }

    /// A running session owned by `a#1`, its tenure's pipe on a writer
    /// with `linger`.
    async fn fixture(linger: Duration) -> Fixture {
        paced(linger, Duration::ZERO).await
    }

    /// The same with a tick between rounds.
    async fn paced(linger: Duration, tick: Duration) -> Fixture {
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
        hub.run_here(&key, 1, Vec::new());
        let renews = Arc::default();
        let mut store = store;
        store.sessions = Arc::new(Recording { inner: store.sessions.clone(), renews: Arc::clone(&renews) });
        let pacing = Pacing {
            give_up: Duration::from_secs(10),
            hold_notice: Duration::from_secs(5),
            flush: Duration::from_secs(10),
            linger,
            tick,
            renew_after: renewal(Duration::from_secs(60)),
        };
        let writer = Writer::start(
            store.clone(),
            hub,
            "a#1".into(),
            pacing,
            Default::default(),
            Stops { shutdown, halt: CancellationToken::new() },
            &tasks,
        );
        let pipe = writer.open(key.clone(), 1, 0);
        Fixture { store, renews, key, writer, pipe, _wakes: wakes, _notices: notices_tx }
    }

    /// The memory store, recording whether the writer's commits may renew.
    struct Recording {
        inner: Arc<dyn crate::store::SessionStore>,
        renews: Arc<Mutex<Vec<bool>>>,
    }

    #[async_trait::async_trait]
    impl crate::store::SessionStore for Recording {
        async fn load(&self, key: &SessionKey, history: bool) -> Result<Option<crate::store::Record>, StoreError> {
            self.inner.load(key, history).await
        }
        async fn load_with_tail(
            &self,
            key: &SessionKey,
            limit: usize,
        ) -> Result<Option<crate::store::Loaded>, StoreError> {
            self.inner.load_with_tail(key, limit).await
        }
        async fn commit(&self, commits: &[Commit]) -> Vec<Result<Committed, CommitError>> {
            self.inner.commit(commits).await
        }
        async fn write(&self, writes: &[SessionWrite]) -> Vec<Result<crate::store::Wrote, CommitError>> {
            let renews = writes.iter().filter_map(|w| w.commit.as_ref()).map(|c| c.renew);
            self.renews.lock().unwrap().extend(renews);
            self.inner.write(writes).await
        }
        async fn decide(
            &self,
            key: &SessionKey,
            relay_id: &str,
            decision: &str,
        ) -> Result<crate::store::Decided, StoreError> {
            self.inner.decide(key, relay_id, decision).await
        }
        async fn request_cancel(&self, key: &SessionKey) -> Result<crate::store::CancelRequest, StoreError> {
            self.inner.request_cancel(key).await
        }
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
        f.pipe.emit(text("He")).await.unwrap();
        // The step's first token is not held.
        f.committed(&["He"]).await;

        f.pipe.emit(text("ll")).await.unwrap();
        f.settle().await;
        advance(LINGER / 2).await;
        f.pipe.emit(text("o")).await.unwrap();
        f.settle().await;
        assert_eq!(f.texts().await, ["He"], "within the linger nothing more is committed");
        // The linger counts from the oldest waiting token; one commit, one
        // event, for the tokens that waited.
        advance(LINGER / 2).await;
        f.committed(&["He", "llo"]).await;
    }

    #[tokio::test(start_paused = true)]
    async fn commits_renew_the_keys_only_once_the_last_renewal_is_old() {
        let f = fixture(Duration::ZERO).await;
        let state = || Change { state: Some(StateWrite { doc: "{}".into(), status: "running" }), ..Change::default() };
        // The tenure just began (its opening commit renewed the keys).
        f.pipe.commit(state()).await.unwrap();
        advance(renewal(Duration::from_secs(60)) / 2).await;
        f.pipe.commit(state()).await.unwrap();
        // A sixteenth of the TTL after the opening: this one renews, and
        // the next, at once after it, need not.
        advance(renewal(Duration::from_secs(60)) / 2).await;
        f.pipe.commit(state()).await.unwrap();
        f.pipe.commit(state()).await.unwrap();
        // Events alone renew nothing: they do not count as a renewal.
        advance(renewal(Duration::from_secs(60))).await;
        f.pipe.commit(Change { events: vec![text("x")], ..Change::default() }).await.unwrap();
        f.pipe.commit(state()).await.unwrap();
        assert_eq!(*f.renews.lock().unwrap(), [false, false, true, false, true, true]);
        assert_eq!(renewal(Duration::from_secs(86_400)), Duration::from_secs(60), "at most a minute");
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_tenure_sends_nothing_until_its_gate_is_released() {
        let f = fixture(Duration::ZERO).await;
        let (pipe, gate) = f.writer.open_held(f.key.clone(), 1, 0);
        pipe.emit(text("a")).await.unwrap();
        pipe.emit(text("b")).await.unwrap();
        let commit = tokio::spawn({
            let pipe = pipe.clone();
            async move { pipe.commit(Change { events: vec![text("!")], ..Change::default() }).await }
        });
        f.settle().await;
        advance(Duration::from_secs(1)).await;
        f.settle().await;
        assert_eq!(f.texts().await, Vec::<String>::new(), "nothing is sent while the gate holds");
        assert!(!commit.is_finished(), "the transition waits for the gate");

        gate.release().await;
        let committed = commit.await.unwrap().expect("the transition commits once released");
        // The first event alone, as it would have gone at once; what
        // waited behind it together.
        assert_eq!((committed.epoch, committed.first_seq), (1, 3));
        f.committed(&["a", "b", "!"]).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_discarded_tenure_writes_nothing_and_its_turn_learns_it_lost_the_session() {
        let f = fixture(Duration::ZERO).await;
        let (pipe, gate) = f.writer.open_held(f.key.clone(), 1, 0);
        pipe.emit(text("a")).await.unwrap();
        let commit = tokio::spawn({
            let pipe = pipe.clone();
            async move { pipe.commit(Change { events: vec![text("!")], ..Change::default() }).await }
        });
        f.settle().await;
        gate.discard().await;
        assert_eq!(commit.await.unwrap(), Err(WriteError::Fenced), "a waiting transition fails as fenced");
        f.settle().await;
        assert_eq!(pipe.emit(text("b")).await, Err(WriteError::Fenced), "later writes fail at once");
        assert_eq!(f.texts().await, Vec::<String>::new(), "nothing of the tenure was written");

        // A gate dropped without a word discards as well.
        let (pipe, gate) = f.writer.open_held(f.key.clone(), 1, 0);
        pipe.emit(text("c")).await.unwrap();
        drop(gate);
        f.settle().await;
        assert_eq!(pipe.broken(), Some(&WriteError::Fenced));
        assert_eq!(f.texts().await, Vec::<String>::new());
    }

    #[tokio::test(start_paused = true)]
    async fn a_transition_takes_the_waiting_tokens_along_at_once() {
        let f = fixture(LINGER).await;
        f.pipe.emit(text("a")).await.unwrap();
        f.committed(&["a"]).await;
        f.pipe.emit(text("b")).await.unwrap();
        let before = Instant::now();
        let change = Change { events: vec![text("!")], ..Change::default() };
        f.pipe.commit(change).await.expect("the transition commits");
        assert_eq!(Instant::now(), before, "no virtual time passed: nothing waited for the linger");
        assert_eq!(f.texts().await, ["a", "b", "!"]);

        // After a transition, the next token starts a step: at once.
        f.pipe.emit(text("c")).await.unwrap();
        f.committed(&["a", "b", "!", "c"]).await;
    }

    /// Once the writer has stopped, what waited for it is dropped (its
    /// room freed, so no emitter waits for room forever) and later events
    /// are refused (the pipe answers `Stopped`).
    #[test]
    fn events_after_the_writer_stopped_are_refused_and_their_room_freed() {
        let streamed = Streamed::default();
        let room = Arc::new(Semaphore::new(1));
        let event = |room: &Arc<Semaphore>| Submission::Event {
            tenure: 1,
            event: text("a"),
            permit: room.clone().try_acquire_owned().expect("room"),
        };
        assert!(streamed.push(event(&room)));
        assert_eq!(room.available_permits(), 0);
        streamed.close();
        assert_eq!(room.available_permits(), 1, "what waited is dropped");
        assert!(!streamed.push(event(&room)));
        assert_eq!(room.available_permits(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_after_a_steps_first_wait_for_the_tick_and_go_in_one_round() {
        const TICK: Duration = Duration::from_millis(10);
        let f = paced(Duration::ZERO, TICK).await;
        f.pipe.emit(text("a")).await.unwrap();
        // The step's first token does not wait for the tick.
        f.committed(&["a"]).await;
        f.pipe.emit(text("b")).await.unwrap();
        f.pipe.emit(text("c")).await.unwrap();
        f.settle().await;
        assert_eq!(f.texts().await, ["a"], "within the tick nothing more is sent");
        advance(TICK).await;
        // One round, one append, for what the tick gathered.
        f.committed(&["a", "bc"]).await;

        // A transition does not wait for the tick, and takes what waits.
        f.pipe.emit(text("d")).await.unwrap();
        let before = Instant::now();
        let change = Change { events: vec![text("!")], ..Change::default() };
        f.pipe.commit(change).await.expect("the transition commits");
        assert_eq!(Instant::now(), before, "no virtual time passed");
        assert_eq!(f.texts().await, ["a", "bc", "d", "!"]);

        // A round a tick after the last goes at once, lone token or not.
        advance(TICK).await;
        f.pipe.emit(text("e")).await.unwrap();
        f.committed(&["a", "bc", "d", "!", "e"]).await;
        advance(TICK).await;
        f.pipe.emit(text("f")).await.unwrap();
        f.committed(&["a", "bc", "d", "!", "e", "f"]).await;
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_linger_or_a_tick_every_token_is_committed_as_it_comes() {
        let f = fixture(Duration::ZERO).await;
        let mut sent = Vec::new();
        for token in ["a", "b", "c"] {
            f.pipe.emit(text(token)).await.unwrap();
            sent.push(token);
            // Each on its own: committed before the next is emitted.
            f.committed(&sent).await;
        }
    }
}
