//! The event hub of one replica: it feeds committed events to the clients
//! following sessions on this replica. (Writing is the writer's,
//! `writer.rs`: nothing reaches a client before it is durable.)
//!
//! Each followed session has a [`Feed`] (a broadcast channel). Events
//! committed here are broadcast by the writer straight from memory.
//! Events appended on other replicas arrive as one `Notice::Appended` on the
//! replica's single subscription; the hub then reads the missing range once
//! and broadcasts it to every local follower of that session. Notices of
//! this instance's own commits are ignored: those were broadcast from memory
//! already. A [`Follower`] (`follower.rs`) subscribes to its feed, replays
//! from the store after its cursor, and then takes live events.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use dashmap::DashMap;
use tokio::sync::{Mutex, OnceCell, broadcast, mpsc};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub use super::follower::Follower;
use crate::{
    domain::{Event, EventKind, LogEvent},
    store::{LogRange, Notice, SessionKey, Store, StoreError},
};

/// Live events buffered per followed session; a slower follower lags and
/// re-reads from the store. Allocated with the feed: small, so a session
/// costs little while it is followed.
const FEED_CAPACITY: usize = 64;
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
}

/// Live state of one followed session on this replica.
pub(super) struct Feed {
    pub(super) tx: broadcast::Sender<Arc<LogEvent>>,
    /// Highest seq broadcast, and what was heard before it was known.
    position: Mutex<Position>,
    followers: AtomicUsize,
    /// Set once the key is watched and this instance registered as a
    /// follower; every follower waits for it before its first read.
    subscribed: OnceCell<()>,
}

/// Where a feed is in its session's log.
#[derive(Default)]
struct Position {
    /// Highest seq broadcast; `None` until the first follower has read the
    /// log once (a fill before that would read the whole log).
    last: Option<u64>,
    /// The highest seq another replica announced while `last` was `None`
    /// (`u64::MAX`: the subscription was re-established meanwhile). The
    /// first read may have ended before it: the feed reads once more only
    /// then, not for every follow.
    heard: u64,
}

#[derive(Clone)]
pub struct EventHub {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    /// This instance (its own notices are ignored).
    instance: String,
    feeds: DashMap<SessionKey, Arc<Feed>>,
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
        let hub =
            Self { inner: Arc::new(Inner { store, instance, feeds: DashMap::new(), tasks: tasks.clone(), shutdown }) };
        tasks.spawn(hub.clone().run_notices(notices, wakes));
        hub
    }

    /// Follows the session's log after `after` (see [`Follower`]), with the
    /// events after `context_from` up to `after` first as context (none
    /// when it is `after`); `idle`: the session was not running when the
    /// follow began.
    pub async fn follow(&self, key: SessionKey, context_from: u64, after: u64, idle: bool) -> Follower {
        let feed = self.join(&key);
        let live = feed.tx.subscribe();
        // Made before the wait, so a follow abandoned while its feed
        // subscribes releases the feed (the follower's drop does).
        let follower = Follower::new(self.clone(), key.clone(), feed.clone(), live, context_from, after, idle);
        self.subscribe(&key, &feed).await;
        follower
    }

    /// The feed of `key`, created for its first follower, with one more
    /// follower counted.
    fn join(&self, key: &SessionKey) -> Arc<Feed> {
        let entry = self.inner.feeds.entry(key.clone()).or_insert_with(|| {
            Arc::new(Feed {
                tx: broadcast::channel(FEED_CAPACITY).0,
                position: Mutex::new(Position::default()),
                followers: AtomicUsize::new(0),
                subscribed: OnceCell::new(),
            })
        });
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
    async fn subscribe(&self, key: &SessionKey, feed: &Feed) {
        feed.subscribed
            .get_or_init(|| async {
                let notifications = &self.inner.store.notifications;
                let (watched, registered) =
                    tokio::join!(notifications.watch(key), notifications.follow(key, &self.inner.instance, true));
                if let Err(e) = watched.and(registered) {
                    // Followers still get events committed here, and re-read on gaps.
                    tracing::warn!(session = %key.id, error = %e, "cannot follow session; live events from other replicas may be late");
                }
            })
            .await;
    }

    /// A follower of `key` is done with `feed`; the last one out unwatches
    /// (in a task: it may be called from a drop).
    pub(super) fn release(&self, key: SessionKey, feed: Arc<Feed>) {
        if feed.followers.fetch_sub(1, Ordering::SeqCst) != 1 {
            return;
        }
        let removed = self.inner.feeds.remove_if(&key, |_, f| f.followers.load(Ordering::SeqCst) == 0);
        if removed.is_none() {
            return;
        }
        let (store, instance) = (self.inner.store.clone(), self.inner.instance.clone());
        self.inner.tasks.spawn(async move {
            let _ = store.notifications.follow(&key, &instance, false).await;
            let _ = store.notifications.unwatch(&key).await;
        });
    }

    pub(super) async fn read_after(&self, key: &SessionKey, after: u64, limit: usize) -> Result<LogRange, StoreError> {
        self.inner.store.log.read_after(key, after, limit).await
    }

    /// Sets the feed's position after a follower's first read, and reads
    /// once more if another replica announced events past it meanwhile
    /// (their notice found no position to compare with).
    pub(super) async fn initialise_feed(&self, key: &SessionKey, feed: &Feed, log_last: u64) {
        let behind = {
            let mut position = feed.position.lock().await;
            let last = *position.last.get_or_insert(log_last);
            position.heard > last
        };
        if behind {
            self.fill(key, feed).await;
        }
    }

    /// Reads what the feed has not broadcast yet and broadcasts it: one read
    /// per replica, however many followers.
    async fn fill(&self, key: &SessionKey, feed: &Feed) {
        let mut position = feed.position.lock().await;
        let Some(from) = position.last else { return };
        match self.inner.store.log.read_after(key, from, REPLAY_PAGE).await {
            Ok(range) => {
                for event in self.decode(key, range) {
                    position.last = Some(event.seq);
                    let _ = feed.tx.send(event);
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
    /// commit whose answer was lost: it may or may not have happened).
    pub(super) async fn refill(&self, key: &SessionKey) {
        if let Some(feed) = self.inner.feeds.get(key).map(|f| f.clone())
            && self.heard(&feed, u64::MAX).await
        {
            self.fill(key, &feed).await;
        }
    }

    /// Hands freshly committed events (seqs from `first`) to this replica's
    /// followers, from memory.
    pub(super) async fn broadcast(&self, key: &SessionKey, first: u64, events: Vec<Event>) {
        let Some(feed) = self.inner.feeds.get(key).map(|f| f.clone()) else { return };
        let mut position = feed.position.lock().await;
        for (i, event) in events.into_iter().enumerate() {
            let seq = first + i as u64;
            if position.last.is_some_and(|l| seq <= l) {
                continue;
            }
            position.last = Some(seq);
            let _ = feed.tx.send(Arc::new(LogEvent { seq, session_id: key.id.clone(), event }));
        }
    }

    /// Another replica announced events up to `last_seq` (`u64::MAX`: maybe
    /// any): whether `feed` must read them now. Before the feed's first
    /// read set its position, the announcement is kept for that moment.
    async fn heard(&self, feed: &Feed, last_seq: u64) -> bool {
        let mut position = feed.position.lock().await;
        match position.last {
            Some(last) => last < last_seq,
            None => {
                position.heard = position.heard.max(last_seq);
                false
            }
        }
    }

    /// Listens to this replica's subscription: commits elsewhere fill the
    /// feeds; wake-ups and hand-offs go to the sessions service.
    async fn run_notices(self, mut notices: mpsc::Receiver<Notice>, wakes: mpsc::Sender<Wake>) {
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
                    if self.heard(&feed, last_seq).await {
                        self.fill(&key, &feed).await;
                    }
                }
                Some(Notice::Wake { key }) => {
                    let _ = wakes.send(Wake::Session(key)).await;
                }
                Some(Notice::Orphaned) => {
                    let _ = wakes.send(Wake::Orphans).await;
                }
                Some(Notice::Resubscribed) => {
                    let feeds: Vec<_> = self.inner.feeds.iter().map(|f| (f.key().clone(), f.value().clone())).collect();
                    for (key, feed) in feeds {
                        if self.heard(&feed, u64::MAX).await {
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
    use super::*;
    use crate::domain::AgentRef;

    fn event(kind: EventKind, agent: &str) -> Event {
        Event { kind, agent: AgentRef { agent_id: agent.into(), parent_id: None, depth: 0 }, ts: 0 }
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
