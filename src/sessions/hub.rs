//! The event hub of one replica: it feeds committed events to the clients
//! following sessions on this replica. (Writing is the writer's,
//! `writer.rs`: nothing reaches a client before it is durable.)
//!
//! Each followed session has a [`Feed`]: its newest events in memory (a
//! small ring, gapless) and a wake-up for the followers waiting on it. A
//! feed with a single follower hands its events over rather than copying
//! them, so an open chat holds none of what it already sent; a follower
//! joining later from before the ring reads the store.
//!
//! A session running here feeds its feed from the writer, straight from
//! memory, each event the moment the store acknowledged it — from the
//! turn's first commit on ([`EventHub::run_here`]), so its feed knows where
//! the log ends. A client that follows it from a cursor the ring still
//! holds (the request that started the turn, always) reads nothing from
//! the store and registers nothing in it: no follow, no watch, no notice.
//!
//! A session running elsewhere is heard of through the store: its feed is
//! registered as a follower there (so the owner announces its appends on
//! the session's channel, `Notice::Appended`), and the hub reads each
//! announced range once and hands it to every local follower. A
//! [`Follower`](super::follower::Follower) (`follower.rs`) replays from the store after its cursor,
//! then takes live events from the feed. When a session stops running
//! here while clients still follow it (a hand-off, a takeover elsewhere),
//! its feed registers when the first of them waits for more; followers
//! that the turn's end ends (the streams of a turn that ended here) never
//! do, so a chat leaves nothing registered behind.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use dashmap::DashMap;
use foldhash::fast::RandomState;
use tokio::sync::{Notify, OnceCell, mpsc};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    domain::{Event, EventKind, Held, LogEvent},
    store::{LogRange, Notice, SessionKey, Store, StoreError},
};

/// Events a feed keeps in memory: a follower that falls further behind, or
/// joins from an older cursor, reads the store.
const RECENT: usize = 64;
/// Events per store read during replay.
pub const REPLAY_PAGE: usize = 500;

/// What a follower yields.
#[derive(Debug, Clone)]
pub enum FollowItem {
    Event(Arc<LogEvent>),
    /// An event of the cursor's turn at or before the cursor, asked for
    /// with the follow: the client has it; an encoder may need it to
    /// render what follows (see `Encoder::wants_turn_context`). All of
    /// them come before the first [`FollowItem::Event`].
    Context(Arc<LogEvent>),
    /// The cursor is older than the retained log: events were lost to it.
    RecoveryFailed {
        first_seq: u64,
    },
    /// The store failed while following.
    Failed(StoreError),
    /// The session's writes are held by the store (it does not answer, or
    /// its replicas do not acknowledge): a notice without an id, every few
    /// seconds; with [`Held::gave_up`], the last item of the follow.
    Held(Held),
}

/// Live state of one followed (or running) session on this replica.
pub(super) struct Feed {
    state: Mutex<FeedState>,
    /// Wakes the followers waiting for the next event.
    pub(super) changed: Notify,
    followers: AtomicUsize,
    /// Set once the key is watched and this instance registered as a
    /// follower in the store; every follower of a session running
    /// elsewhere waits for it before its first read.
    subscribed: OnceCell<()>,
    /// Set by whoever undoes the subscription (once; see
    /// [`EventHub::unsubscribe`]).
    unsubscribed: AtomicBool,
    /// One read of the store into the feed at a time.
    filling: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct FeedState {
    /// The newest events, ascending and gapless, at most [`RECENT`].
    recent: VecDeque<Arc<LogEvent>>,
    /// Highest seq in the feed; `None` until known (the first follower's
    /// read, or the session's first commit here).
    last: Option<u64>,
    /// The highest seq another replica announced while `last` was `None`
    /// (`u64::MAX`: the subscription was re-established meanwhile). The
    /// first read may have ended before it: the feed reads once more only
    /// then, not for every follow.
    heard: u64,
    /// Tenures of the session running here (a new turn may start here
    /// before the last one's runner is done): while any does, the writer
    /// hands every event to the feed, so `last` is where the log ends.
    local: usize,
    /// The hold of its writes here, if any, and how many times it changed.
    held: Option<Held>,
    held_changes: u64,
}

/// What [`Feed::take_after`] found.
pub(super) enum Taken {
    /// Events after the cursor, appended to the follower's queue.
    Some,
    /// Nothing new.
    Nothing,
    /// Nothing new, and the session stopped running here with nothing
    /// subscribed for the feed yet: the follower must
    /// [`EventHub::attach`] it before it waits.
    Detached,
    /// The ring no longer holds the next event: read the store.
    Gap,
}

impl Feed {
    fn new() -> Self {
        Self {
            state: Mutex::new(FeedState::default()),
            changed: Notify::new(),
            followers: AtomicUsize::new(0),
            subscribed: OnceCell::new(),
            unsubscribed: AtomicBool::new(false),
            filling: tokio::sync::Mutex::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, FeedState> {
        // Nothing panics while holding it; a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Appends events from `first` on (skipping what the feed has; a gap
    /// empties the ring first, so it stays gapless) and wakes the
    /// followers.
    fn push(&self, first: u64, events: impl IntoIterator<Item = Arc<LogEvent>>) {
        let mut pushed = false;
        {
            let mut state = self.lock();
            for (i, event) in events.into_iter().enumerate() {
                let seq = first + i as u64;
                if state.last.is_some_and(|l| seq <= l) {
                    continue;
                }
                if state.last.is_none_or(|l| seq != l + 1) {
                    state.recent.clear();
                }
                if state.recent.len() == RECENT {
                    state.recent.pop_front();
                }
                state.recent.push_back(event);
                state.last = Some(seq);
                pushed = true;
            }
        }
        if pushed {
            self.changed.notify_waiters();
        }
    }

    fn set_held(&self, held: Option<Held>) {
        {
            let mut state = self.lock();
            state.held = held;
            state.held_changes += 1;
        }
        self.changed.notify_waiters();
    }

    /// The hold as it is, if it changed since `seen` (a count of changes).
    pub(super) fn held_since(&self, seen: u64) -> Option<(u64, Option<Held>)> {
        let state = self.lock();
        (state.held_changes != seen).then(|| (state.held_changes, state.held.clone()))
    }

    /// Appends to `ready` the events after `after` the ring holds. When the
    /// taker is the feed's only follower, the ring lets go of what it took
    /// (it has every event up to `last` now): an open chat does not keep its
    /// turn's delivered events in memory twice, or at all once they are
    /// sent. A follower that joins later from an older cursor reads the
    /// store, as one joining past the ring always did.
    pub(super) fn take_after(&self, after: u64, ready: &mut VecDeque<Arc<LogEvent>>) -> Taken {
        let mut state = self.lock();
        if state.last.is_none_or(|l| l <= after) {
            return if state.local == 0 && !self.subscribed.initialized() { Taken::Detached } else { Taken::Nothing };
        }
        let Some(front) = state.recent.front() else { return Taken::Gap };
        if front.seq > after + 1 {
            return Taken::Gap;
        }
        let skip = (after + 1 - front.seq) as usize;
        if self.followers.load(Ordering::SeqCst) == 1 {
            ready.extend(state.recent.drain(..).skip(skip));
        } else {
            ready.extend(state.recent.iter().skip(skip).cloned());
        }
        Taken::Some
    }

    /// For a follower joining at `after`: the events after it, when the
    /// session runs here and the ring holds all of them (none to read from
    /// the store), with where the log ends.
    pub(super) fn join_local(&self, after: u64, ready: &mut VecDeque<Arc<LogEvent>>) -> Option<u64> {
        let state = self.lock();
        if state.local == 0 {
            return None;
        }
        let last = state.last?;
        if last == after {
            return Some(last);
        }
        let front = state.recent.front()?;
        if last < after || front.seq > after + 1 {
            return None;
        }
        let skip = (after + 1 - front.seq) as usize;
        ready.extend(state.recent.iter().skip(skip).cloned());
        Some(last)
    }
}

#[derive(Clone)]
pub struct EventHub {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    /// This instance (its own notices are ignored).
    instance: String,
    feeds: DashMap<SessionKey, Arc<Feed>, RandomState>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

impl EventHub {
    /// Starts the notice listener on `tasks`; it stops when `shutdown` is
    /// cancelled. Wake-ups heard go to `wakes`, hand-off announcements to
    /// `orphans`.
    pub fn start(
        store: Store,
        instance: String,
        notices: mpsc::Receiver<Notice>,
        wakes: mpsc::Sender<Wake>,
        tasks: TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        let hub = Self {
            inner: Arc::new(Inner { store, instance, feeds: DashMap::default(), tasks: tasks.clone(), shutdown }),
        };
        tasks.spawn(hub.clone().run_notices(notices, wakes));
        hub
    }

    /// The feed of `key`, created for its first follower, with one more
    /// follower counted.
    pub(super) fn join(&self, key: &SessionKey) -> Arc<Feed> {
        let entry = self.inner.feeds.entry(key.clone()).or_insert_with(|| Arc::new(Feed::new()));
        entry.followers.fetch_add(1, Ordering::SeqCst);
        entry.clone()
    }

    /// Waits until `feed`'s key is watched and this instance registered as
    /// its follower (the first follower makes it so; later ones wait for
    /// it). Commits announce their events from then on, so both come before
    /// any follower's first read: a commit before that read is in it, a
    /// commit after it is announced and heard. The two are independent (the
    /// subscription has its own connection), so they run at once: one round
    /// trip, not two.
    ///
    /// The subscription is made in a task of its own and undone there if
    /// the feed was dropped meanwhile: a follow abandoned while it waits
    /// (its client gone), or a feed whose last follower left before the
    /// subscription it asked for was made, leaves nothing registered.
    pub(super) async fn subscribe(&self, key: &SessionKey, feed: &Arc<Feed>) {
        if feed.subscribed.initialized() {
            return;
        }
        let (hub, key, feed) = (self.clone(), key.clone(), feed.clone());
        let subscribing = self.inner.tasks.spawn(async move {
            feed.subscribed
                .get_or_init(|| async {
                    let notifications = &hub.inner.store.notifications;
                    let (watched, registered) =
                        tokio::join!(notifications.watch(&key), notifications.follow(&key, &hub.inner.instance, true));
                    if let Err(e) = watched.and(registered) {
                        // Followers still get events committed here, and re-read on gaps.
                        tracing::warn!(session = %key.id, error = %e, "cannot follow session; live events from other replicas may be late");
                    }
                })
                .await;
            let held = hub.inner.feeds.get(&key).is_some_and(|f| Arc::ptr_eq(&f, &feed));
            if !held {
                hub.unsubscribe(key, &feed);
            }
        });
        let _ = subscribing.await;
    }

    /// A follower of `key` is done with `feed`; the last one out of a feed
    /// of a session not running here drops it (and unwatches, in a task:
    /// it may be called from a drop).
    pub(super) fn release(&self, key: SessionKey, feed: Arc<Feed>) {
        if feed.followers.fetch_sub(1, Ordering::SeqCst) != 1 {
            return;
        }
        self.drop_if_unused(key, &feed);
    }

    fn drop_if_unused(&self, key: SessionKey, feed: &Arc<Feed>) {
        let unused = |f: &Arc<Feed>| f.followers.load(Ordering::SeqCst) == 0 && f.lock().local == 0;
        if self.inner.feeds.remove_if(&key, |_, f| Arc::ptr_eq(f, feed) && unused(f)).is_some() {
            self.unsubscribe(key, feed);
        }
    }

    /// Undoes a dropped feed's subscription, once it is made (a
    /// subscription still being made is undone by [`Self::subscribe`]'s
    /// task when it finds the feed gone), and only once.
    fn unsubscribe(&self, key: SessionKey, feed: &Feed) {
        if feed.subscribed.get().is_none() || feed.unsubscribed.swap(true, Ordering::SeqCst) {
            return;
        }
        let (store, instance) = (self.inner.store.clone(), self.inner.instance.clone());
        self.inner.tasks.spawn(async move {
            let _ = store.notifications.follow(&key, &instance, false).await;
            let _ = store.notifications.unwatch(&key).await;
        });
    }

    /// The session begins running here with the commit that put `events`
    /// at `first` on: the writer feeds its feed from now on, and clients
    /// that follow it from a cursor the feed holds read nothing from the
    /// store.
    pub(super) fn run_here(&self, key: &SessionKey, first: u64, events: Vec<Event>) {
        let feed = self.inner.feeds.entry(key.clone()).or_insert_with(|| Arc::new(Feed::new())).clone();
        feed.lock().local += 1;
        feed.push(first, self.log_events(key, first, events));
    }

    /// The session stops running here. Its followers, if any, now hear of
    /// it through the store like those of any session running elsewhere —
    /// from the moment one of them waits for more.
    pub(super) fn ran_here(&self, key: &SessionKey) {
        let Some(feed) = self.inner.feeds.get(key).map(|f| f.clone()) else { return };
        let still = {
            let mut state = feed.lock();
            state.local = state.local.saturating_sub(1);
            state.local > 0
        };
        if still {
            return;
        }
        if feed.followers.load(Ordering::SeqCst) == 0 {
            self.drop_if_unused(key.clone(), &feed);
            return;
        }
        // Followers waiting on it look again: one that still needs events
        // subscribes then (`attach`). Those the turn's end ends (every
        // stream of the turn, usually) never wait again, so a chat whose
        // client leaves at its turn's end registers nothing in the store.
        feed.changed.notify_waiters();
    }

    /// Makes a feed that stopped running here hear of the session through
    /// the store, for a follower that waits for more (see
    /// [`Taken::Detached`]): subscribed, then filled with what was appended
    /// before the registration took effect.
    pub(super) async fn attach(&self, key: &SessionKey, feed: &Arc<Feed>) {
        self.subscribe(key, feed).await;
        self.fill(key, feed).await;
    }

    pub(super) async fn read_after(&self, key: &SessionKey, after: u64, limit: usize) -> Result<LogRange, StoreError> {
        self.inner.store.log.read_after(key, after, limit).await
    }

    /// Sets the feed's position after a follower's first read, and reads
    /// once more if another replica announced events past it meanwhile
    /// (their notice found no position to compare with).
    pub(super) async fn initialise_feed(&self, key: &SessionKey, feed: &Feed, log_last: u64) {
        let behind = {
            let mut state = feed.lock();
            let last = *state.last.get_or_insert(log_last);
            state.heard > last
        };
        if behind {
            self.fill(key, feed).await;
        }
    }

    /// Reads what the feed does not hold yet and hands it out: one read
    /// per replica, however many followers.
    async fn fill(&self, key: &SessionKey, feed: &Feed) {
        let _filling = feed.filling.lock().await;
        let Some(from) = feed.lock().last else { return };
        match self.inner.store.log.read_after(key, from, REPLAY_PAGE).await {
            Ok(range) => {
                if let Some(first) = range.events.first().map(|e| e.seq) {
                    feed.push(first, self.decode(key, range));
                }
            }
            Err(e) => tracing::warn!(session = %key.id, error = %e, "cannot read new events"),
        }
    }

    pub(super) fn decode(&self, key: &SessionKey, range: LogRange) -> Vec<Arc<LogEvent>> {
        range
            .events
            .into_iter()
            .filter_map(|stored| match LogEvent::from_stored(key.id.clone(), stored.seq, &stored.payload) {
                Ok(event) => Some(Arc::new(event)),
                Err(e) => {
                    tracing::error!(session = %key.id, seq = stored.seq, error = %e, "unreadable event in the log");
                    None
                }
            })
            .collect()
    }

    /// Re-reads what the session's followers here have not seen (after a
    /// write whose answer was lost: it may or may not have happened).
    pub(super) async fn refill(&self, key: &SessionKey) {
        if let Some(feed) = self.inner.feeds.get(key).map(|f| f.clone())
            && self.heard(&feed, u64::MAX)
        {
            self.fill(key, &feed).await;
        }
    }

    /// Tells this replica's followers of `key` that its writes are held
    /// (`None`: no longer).
    pub(super) fn held(&self, key: &SessionKey, held: Option<Held>) {
        if let Some(feed) = self.inner.feeds.get(key).map(|f| f.clone()) {
            feed.set_held(held);
        }
    }

    /// Hands freshly written events (seqs from `first`) to this replica's
    /// followers, from memory.
    pub(super) fn broadcast(&self, key: &SessionKey, first: u64, events: Vec<Event>) {
        let Some(feed) = self.inner.feeds.get(key).map(|f| f.clone()) else { return };
        feed.push(first, self.log_events(key, first, events));
    }

    fn log_events(&self, key: &SessionKey, first: u64, events: Vec<Event>) -> impl Iterator<Item = Arc<LogEvent>> {
        let id = key.id.clone();
        events
            .into_iter()
            .enumerate()
            .map(move |(i, event)| Arc::new(LogEvent { seq: first + i as u64, session_id: id.clone(), event }))
    }

    /// Another replica announced events up to `last_seq` (`u64::MAX`: maybe
    /// any): whether `feed` must read them now. Before the feed's first
    /// read set its position, the announcement is kept for that moment.
    fn heard(&self, feed: &Feed, last_seq: u64) -> bool {
        let mut state = feed.lock();
        match state.last {
            Some(last) => last < last_seq,
            None => {
                state.heard = state.heard.max(last_seq);
                false
            }
        }
    }

    /// Listens to this replica's subscription: commits elsewhere fill the
    /// feeds; wake-ups and hand-offs go to the sessions service.
    async fn run_notices(self, mut notices: mpsc::Receiver<Notice>, wakes: mpsc::Sender<Wake>) {
        // Wake-ups for the sessions this instance runs come on its own
        // channel.
        if let Err(e) = self.inner.store.notifications.listen(&self.inner.instance).await {
            tracing::warn!(error = %e, "cannot listen for wake-ups; the sweep and the owner's own polls still run");
        }
        loop {
            let notice = tokio::select! {
                notice = notices.recv() => notice,
                () = self.inner.shutdown.cancelled() => None,
            };
            match notice {
                None => break,
                // Our own commit: the writer broadcast it from memory (and
                // re-reads the log itself if the commit's answer was lost).
                Some(Notice::Appended { by: Some(by), .. }) if by == self.inner.instance => {}
                Some(Notice::Appended { key, last_seq, .. }) => {
                    let Some(feed) = self.inner.feeds.get(&key).map(|f| f.clone()) else { continue };
                    if self.heard(&feed, last_seq) {
                        self.fill(&key, &feed).await;
                    }
                }
                Some(Notice::Wake { key }) => {
                    let _ = wakes.send(Wake::Session(key)).await;
                }
                Some(Notice::Followed { key }) => {
                    let _ = wakes.send(Wake::Followed(key)).await;
                }
                Some(Notice::Orphaned) => {
                    let _ = wakes.send(Wake::Orphans).await;
                }
                Some(Notice::Resubscribed) => {
                    let feeds: Vec<_> = self.inner.feeds.iter().map(|f| (f.key().clone(), f.value().clone())).collect();
                    for (key, feed) in feeds {
                        if self.heard(&feed, u64::MAX) {
                            self.fill(&key, &feed).await;
                        }
                    }
                    // A wake-up may have been missed too.
                    let _ = wakes.send(Wake::Everyone).await;
                }
            }
        }
    }
}

/// What the subscription tells the sessions service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// Something was left for the session's owner (a decision, a cancel),
    /// or it was taken over.
    Session(SessionKey),
    /// Another replica began following a session this one runs.
    Followed(SessionKey),
    /// A session was handed off: sweep now.
    Orphans,
    /// The subscription was re-established: anything may have been missed.
    Everyone,
}

/// Appends `event` to `events`, merging it into the previous one when both
/// are text (or reasoning) deltas of the same agent.
pub(super) fn push_coalesced(events: &mut Vec<Event>, event: Event) {
    if let Some(previous) = events.last_mut()
        && previous.agent == event.agent
    {
        match (&mut previous.kind, &event.kind) {
            (EventKind::TextDelta { text: a }, EventKind::TextDelta { text: b })
            | (EventKind::ReasoningDelta { text: a }, EventKind::ReasoningDelta { text: b }) => {
                a.push_str(b);
                return;
            }
            _ => {}
        }
    }
    events.push(event);
}

#[cfg(test)]
mod tests {
    use std::{sync::atomic::AtomicIsize, time::Duration};

    use async_trait::async_trait;
    use tokio::sync::Semaphore;

    use super::*;
    use crate::{config::StoreConfig, domain::AgentRef, store::Notifications};

    /// Notifications whose watches are registered when asked (as the Redis
    /// store's are: the request is sent, then its answer awaited) and
    /// answered only when the test lets them; the registrations counted.
    struct Gated {
        answers: Semaphore,
        watched: AtomicIsize,
        /// Watches asked for, in all.
        asks: AtomicIsize,
        asked: Notify,
        changed: Notify,
    }

    #[async_trait]
    impl Notifications for Gated {
        async fn watch(&self, _key: &SessionKey) -> Result<(), StoreError> {
            self.watched.fetch_add(1, Ordering::SeqCst);
            self.asks.fetch_add(1, Ordering::SeqCst);
            self.asked.notify_one();
            self.answers.acquire().await.expect("open").forget();
            Ok(())
        }
        async fn unwatch(&self, _key: &SessionKey) -> Result<(), StoreError> {
            self.watched.fetch_sub(1, Ordering::SeqCst);
            self.changed.notify_one();
            Ok(())
        }
        async fn listen(&self, _instance: &str) -> Result<(), StoreError> {
            Ok(())
        }
        async fn follow(&self, _key: &SessionKey, _instance: &str, _following: bool) -> Result<(), StoreError> {
            Ok(())
        }
    }

    /// A follow abandoned while its subscription is being made (its client
    /// gone), the feed dropped with it: once the store answers, the watch
    /// is undone — nothing stays registered for a feed nobody has.
    #[tokio::test]
    async fn a_subscription_made_for_a_feed_dropped_meanwhile_is_undone() {
        let (gated, hub, _) = gated(0);
        let key = SessionKey::new("acme", "s1");

        let feed = hub.join(&key);
        let asked = gated.asked.notified();
        let follow = tokio::spawn({
            let (hub, key, feed) = (hub.clone(), key.clone(), feed.clone());
            async move { hub.subscribe(&key, &feed).await }
        });
        asked.await;
        follow.abort();
        hub.release(key.clone(), feed);
        assert!(hub.inner.feeds.get(&key).is_none(), "the feed is dropped");
        assert_eq!(gated.watched.load(Ordering::SeqCst), 1, "the watch was asked for");

        let undone = gated.changed.notified();
        gated.answers.add_permits(1);
        tokio::time::timeout(Duration::from_secs(5), undone).await.expect("the watch is undone");
        assert_eq!(gated.watched.load(Ordering::SeqCst), 0);
    }

    /// A hub on [`Gated`] notifications with `answers` answers ready, and
    /// the tracker of its tasks.
    fn gated(answers: usize) -> (Arc<Gated>, EventHub, (TaskTracker, CancellationToken)) {
        let gated = Arc::new(Gated {
            answers: Semaphore::new(answers),
            watched: AtomicIsize::new(0),
            asks: AtomicIsize::new(0),
            asked: Notify::new(),
            changed: Notify::new(),
        });
        let (notices_tx, notices) = mpsc::channel(16);
        let mut store = Store::open(&StoreConfig::for_unit_tests(), notices_tx, Default::default()).unwrap();
        store.notifications = gated.clone();
        let (wakes, _wakes) = mpsc::channel(16);
        let (tasks, shutdown) = (TaskTracker::new(), CancellationToken::new());
        let hub = EventHub::start(store, "a#1".into(), notices, wakes, tasks.clone(), shutdown.clone());
        (gated, hub, (tasks, shutdown))
    }

    /// Every event the follow hands out, until it ends.
    async fn drain(follower: &mut crate::sessions::Follower) -> Vec<EventKind> {
        let mut kinds = Vec::new();
        while let Some(item) = tokio::time::timeout(Duration::from_secs(5), follower.next()).await.expect("not stuck") {
            if let FollowItem::Event(event) = item {
                kinds.push(event.event.kind.clone());
            }
        }
        kinds
    }

    /// The stream of a turn that ends here (the client reads on after the
    /// runner is done) ends at the turn's end from memory: nothing is
    /// registered in the store for it, then or later.
    #[tokio::test]
    async fn a_stream_the_turns_end_ends_registers_nothing_in_the_store() {
        let (gated, hub, (tasks, shutdown)) = gated(10);
        let key = SessionKey::new("acme", "s1");
        hub.run_here(&key, 1, vec![event(EventKind::TextDelta { text: "a".into() }, "main")]);
        let mut follower = hub.follow(key.clone(), 0, 0, false).await;
        let ended = EventKind::TurnEnded {
            reason: crate::domain::TurnEndReason::Final,
            iterations: 1,
            usage: Default::default(),
            title_pending: false,
        };
        hub.broadcast(&key, 2, vec![event(ended.clone(), "main")]);
        // The runner is done before the client has read the end.
        hub.ran_here(&key);
        let kinds = drain(&mut follower).await;
        assert_eq!(kinds.last(), Some(&ended));
        drop(follower);
        shutdown.cancel();
        tasks.close();
        tokio::time::timeout(Duration::from_secs(5), tasks.wait()).await.expect("the hub's tasks end");
        assert_eq!(gated.asks.load(Ordering::SeqCst), 0, "no watch was asked for");
        assert!(hub.inner.feeds.get(&key).is_none(), "the feed is dropped");
    }

    /// A follower still waiting when the session stops running here (a
    /// hand-off mid-turn) subscribes then, and hears what comes next.
    #[tokio::test]
    async fn a_follower_waiting_when_the_session_stops_running_here_subscribes() {
        let (gated, hub, _tasks) = gated(10);
        let key = SessionKey::new("acme", "s1");
        hub.run_here(&key, 1, vec![event(EventKind::TextDelta { text: "a".into() }, "main")]);
        let mut follower = hub.follow(key.clone(), 0, 0, false).await;
        assert!(matches!(follower.next().await, Some(FollowItem::Event(_))));
        let asked = gated.asked.notified();
        let reading = tokio::spawn(async move { drain(&mut follower).await });
        hub.ran_here(&key);
        tokio::time::timeout(Duration::from_secs(5), asked).await.expect("the follower subscribes");
        assert_eq!(gated.watched.load(Ordering::SeqCst), 1);
        // Heard from the replica that runs the session now.
        let more = event(EventKind::TextDelta { text: "b".into() }, "main");
        let ended = EventKind::Paused { pending_relays: Vec::new(), pending_calls: Vec::new() };
        hub.broadcast(&key, 2, vec![more.clone(), event(ended.clone(), "main")]);
        let kinds = tokio::time::timeout(Duration::from_secs(5), reading).await.expect("the follow ends").unwrap();
        assert_eq!(kinds, vec![more.kind, ended]);
    }

    fn event(kind: EventKind, agent: &str) -> Event {
        Event { kind, agent: AgentRef { agent_id: agent.into(), parent_id: None, depth: 0 }, ts: 0 }
    }

    /// A feed's only follower takes the ring's events away (nothing it
    /// was handed stays held for it); a follower joining later from an
    /// older cursor is sent to the store; with two, the ring keeps its
    /// events for each of them.
    #[test]
    fn a_lone_follower_empties_the_ring_and_one_joining_later_reads_the_store() {
        let log_event = |seq: u64| {
            Arc::new(LogEvent {
                seq,
                session_id: "s1".into(),
                event: event(EventKind::TextDelta { text: seq.to_string() }, "main"),
            })
        };
        let seqs = |ready: &VecDeque<Arc<LogEvent>>| ready.iter().map(|e| e.seq).collect::<Vec<_>>();
        let feed = Feed::new();
        feed.lock().local = 1;
        feed.followers.fetch_add(1, Ordering::SeqCst);
        feed.push(1, (1..=3).map(log_event));
        let mut first = VecDeque::new();
        assert!(matches!(feed.take_after(1, &mut first), Taken::Some));
        assert_eq!(seqs(&first), [2, 3]);
        assert!(feed.lock().recent.is_empty(), "the ring let go of what its one follower took");
        assert!(matches!(feed.take_after(3, &mut first), Taken::Nothing));
        feed.push(4, [log_event(4)]);
        assert!(matches!(feed.take_after(3, &mut first), Taken::Some));
        assert_eq!(seqs(&first), [2, 3, 4]);

        feed.followers.fetch_add(1, Ordering::SeqCst);
        assert!(matches!(feed.take_after(1, &mut VecDeque::new()), Taken::Gap), "a late joiner reads the store");
        feed.push(5, [log_event(5), log_event(6)]);
        let (mut a, mut b) = (VecDeque::new(), VecDeque::new());
        assert!(matches!(feed.take_after(4, &mut a), Taken::Some));
        assert!(matches!(feed.take_after(5, &mut b), Taken::Some));
        assert_eq!((seqs(&a), seqs(&b)), (vec![5, 6], vec![6]));
        assert_eq!(feed.lock().recent.len(), 2, "two followers: the ring keeps its events");
    }

    #[test]
    fn adjacent_text_deltas_of_one_agent_are_merged() {
        let mut events = Vec::new();
        push_coalesced(&mut events, event(EventKind::TextDelta { text: "Hel".into() }, "main"));
        push_coalesced(&mut events, event(EventKind::TextDelta { text: "lo".into() }, "main"));
        push_coalesced(&mut events, event(EventKind::TextDelta { text: "!".into() }, "sub"));
        push_coalesced(&mut events, event(EventKind::ReasoningDelta { text: "a".into() }, "sub"));
        push_coalesced(&mut events, event(EventKind::TextDelta { text: "b".into() }, "sub"));
        let kinds: Vec<_> = events.iter().map(|e| e.kind.clone()).collect();
        assert_eq!(
            kinds,
            vec![
                EventKind::TextDelta { text: "Hello".into() },
                EventKind::TextDelta { text: "!".into() },
                EventKind::ReasoningDelta { text: "a".into() },
                EventKind::TextDelta { text: "b".into() },
            ]
        );
    }
}
