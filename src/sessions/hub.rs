//! The event hub of one replica: it writes events to the log and feeds them
//! to the clients following sessions on this replica.
//!
//! Writing: every session on the replica sends its events to one writer task.
//! The writer waits a few milliseconds for more (unless an append someone
//! waits for arrives: that goes at once), merges adjacent text deltas of the
//! same session and agent, and appends everything it holds in one pipelined
//! store call. An event is broadcast to followers only after that append
//! succeeded: nothing reaches a client before it is durable.
//!
//! Following: each followed session has a [`Feed`] (a broadcast channel).
//! Events appended here are broadcast by the writer straight from memory.
//! Events appended on other replicas arrive as one `Notice::Appended` on the
//! replica's single subscription; the hub then reads the missing range once
//! and broadcasts it to every local follower of that session. Notices of its
//! own appends are ignored: those were broadcast from memory already. A follower
//! subscribes to its feed, replays from the store after its cursor, and then
//! takes live events, skipping seqs it already has and re-reading the store
//! when it sees a gap (a lagged broadcast, a missed notice).

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use dashmap::DashMap;
use tokio::sync::{Mutex, broadcast, mpsc, oneshot};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    protocol::{EventKind, LogEvent, events::Event},
    store::{AppendBatch, LogRange, Notice, SessionKey, Store, StoreError},
};

/// How long the writer waits for more events before appending. Long enough
/// to merge a burst of tokens, short enough not to be felt.
const COALESCE_WINDOW: Duration = Duration::from_millis(5);
/// Most append commands the writer holds before it appends anyway.
const MAX_BATCH: usize = 512;
/// Bound of the writer's inbox; senders wait when it is full.
const WRITER_QUEUE: usize = 4096;
/// Live events buffered per followed session; a slower follower lags and
/// re-reads from the store.
const FEED_CAPACITY: usize = 256;
/// Events per store read during replay.
pub const REPLAY_PAGE: usize = 500;
/// Events buffered between a follower task and its HTTP stream.
const FOLLOWER_BUFFER: usize = 64;

/// What a follower yields.
#[derive(Debug, Clone)]
pub enum FollowItem {
    Event(Arc<LogEvent>),
    /// The cursor is older than the retained log: events were lost to it.
    RecoveryFailed {
        first_seq: u64,
    },
    /// The store failed while following.
    Failed(StoreError),
}

struct AppendCommand {
    key: SessionKey,
    events: Vec<Event>,
    ack: Option<oneshot::Sender<Result<(u64, u64), StoreError>>>,
}

/// Live state of one followed session on this replica.
struct Feed {
    tx: broadcast::Sender<Arc<LogEvent>>,
    /// Highest seq broadcast; `None` until the first follower has read the
    /// log once (a fill before that would read the whole log).
    last_seq: Mutex<Option<u64>>,
    followers: AtomicUsize,
}

#[derive(Clone)]
pub struct EventHub {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    replica: String,
    feeds: DashMap<SessionKey, Arc<Feed>>,
    writer: mpsc::Sender<AppendCommand>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

impl EventHub {
    /// Starts the writer and the notice listener on `tasks`; both stop when
    /// `shutdown` is cancelled (the writer after appending what it holds).
    pub fn start(
        store: Store,
        replica: String,
        notices: mpsc::Receiver<Notice>,
        wakes: mpsc::Sender<SessionKey>,
        tasks: TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        let (writer, inbox) = mpsc::channel(WRITER_QUEUE);
        let hub = Self {
            inner: Arc::new(Inner { store, replica, feeds: DashMap::new(), writer, tasks: tasks.clone(), shutdown }),
        };
        tasks.spawn(hub.clone().run_writer(inbox));
        tasks.spawn(hub.clone().run_notices(notices, wakes));
        hub
    }

    /// Appends `events` to the session's log and waits until they are
    /// durable. Returns the seqs of the first and last event.
    pub async fn append(&self, key: &SessionKey, events: Vec<Event>) -> Result<(u64, u64), StoreError> {
        let (ack, done) = oneshot::channel();
        let command = AppendCommand { key: key.clone(), events, ack: Some(ack) };
        self.inner.writer.send(command).await.map_err(|_| writer_gone())?;
        done.await.map_err(|_| writer_gone())?
    }

    /// Queues `event` for appending without waiting (text deltas on the hot
    /// path). Its durability shows in the next [`EventHub::append`] of the
    /// session, which the writer handles after it.
    pub async fn emit(&self, key: &SessionKey, event: Event) -> Result<(), StoreError> {
        let command = AppendCommand { key: key.clone(), events: vec![event], ack: None };
        self.inner.writer.send(command).await.map_err(|_| writer_gone())
    }

    /// Follows the session's log after `after`: replays what is stored, then
    /// live events. Ends after an event that ends a stream (pause, turn end)
    /// once the follower is caught up, or, if `idle` (the session was not
    /// running when the follow began) and nothing follows the cursor, at once.
    pub async fn follow(&self, key: SessionKey, after: u64, idle: bool) -> mpsc::Receiver<FollowItem> {
        let (out, rx) = mpsc::channel(FOLLOWER_BUFFER);
        let feed = self.feed(&key).await;
        let subscription = feed.tx.subscribe();
        let hub = self.clone();
        let shutdown = self.inner.shutdown.clone();
        self.inner.tasks.spawn(async move {
            let guard = FeedGuard { hub: hub.clone(), key: key.clone(), feed: feed.clone() };
            tokio::select! {
                () = hub.run_follower(&key, &feed, subscription, after, idle, &out) => {}
                () = out.closed() => {}
                () = shutdown.cancelled() => {}
            }
            guard.release().await;
        });
        rx
    }

    /// The feed of `key`, created (and the key watched) for its first follower.
    async fn feed(&self, key: &SessionKey) -> Arc<Feed> {
        let (feed, created) = {
            let entry = self.inner.feeds.entry(key.clone()).or_insert_with(|| {
                Arc::new(Feed {
                    tx: broadcast::channel(FEED_CAPACITY).0,
                    last_seq: Mutex::new(None),
                    followers: AtomicUsize::new(0),
                })
            });
            let created = entry.followers.fetch_add(1, Ordering::SeqCst) == 0;
            (entry.clone(), created)
        };
        if created && let Err(e) = self.inner.store.notifications.watch(key).await {
            // Followers still get events appended here, and re-read on gaps.
            tracing::warn!(session = %key.id, error = %e, "cannot watch session; live events from other replicas may be late");
        }
        feed
    }

    async fn run_follower(
        &self,
        key: &SessionKey,
        feed: &Feed,
        mut live: broadcast::Receiver<Arc<LogEvent>>,
        after: u64,
        idle: bool,
        out: &mpsc::Sender<FollowItem>,
    ) {
        let mut last = after;
        // Replay.
        let mut newest_ends_stream = false;
        loop {
            let range = match self.inner.store.log.read_after(key, last, REPLAY_PAGE).await {
                Ok(range) => range,
                Err(e) => return drop(out.send(FollowItem::Failed(e)).await),
            };
            if last == after && range.last_seq > after && range.first_seq > after + 1 {
                return drop(out.send(FollowItem::RecoveryFailed { first_seq: range.first_seq }).await);
            }
            let full_page = range.events.len() == REPLAY_PAGE;
            let log_last = range.last_seq;
            for event in self.decode(key, range) {
                last = event.seq;
                newest_ends_stream = event.event.kind.ends_stream();
                if out.send(FollowItem::Event(event)).await.is_err() {
                    return;
                }
            }
            if !full_page {
                self.initialise_feed(key, feed, log_last).await;
                break;
            }
        }
        if newest_ends_stream || (idle && last == after) {
            return;
        }
        // Live.
        loop {
            let event = match live.recv().await {
                Ok(event) => event,
                Err(broadcast::error::RecvError::Lagged(_)) => match self.catch_up(key, &mut last, out).await {
                    Some(true) | None => return,
                    Some(false) => continue,
                },
                Err(broadcast::error::RecvError::Closed) => return,
            };
            if event.seq <= last {
                continue;
            }
            if event.seq > last + 1 {
                match self.catch_up(key, &mut last, out).await {
                    Some(true) | None => return,
                    Some(false) => continue,
                }
            }
            last = event.seq;
            let ends = event.event.kind.ends_stream();
            if out.send(FollowItem::Event(event)).await.is_err() || ends {
                return;
            }
        }
    }

    /// Reads and sends everything after `last` from the store. `Some(true)`
    /// when a stream-ending event was sent, `None` when the follower is done.
    async fn catch_up(&self, key: &SessionKey, last: &mut u64, out: &mpsc::Sender<FollowItem>) -> Option<bool> {
        loop {
            let range = match self.inner.store.log.read_after(key, *last, REPLAY_PAGE).await {
                Ok(range) => range,
                Err(e) => {
                    let _ = out.send(FollowItem::Failed(e)).await;
                    return None;
                }
            };
            if range.first_seq > *last + 1 && range.last_seq > *last {
                let _ = out.send(FollowItem::RecoveryFailed { first_seq: range.first_seq }).await;
                return None;
            }
            let full_page = range.events.len() == REPLAY_PAGE;
            for event in self.decode(key, range) {
                *last = event.seq;
                let ends = event.event.kind.ends_stream();
                out.send(FollowItem::Event(event)).await.ok()?;
                if ends {
                    return Some(true);
                }
            }
            if !full_page {
                return Some(false);
            }
        }
    }

    /// Sets the feed's position after a follower's first read, then reads once
    /// more so nothing appended in between waits for the next notice.
    async fn initialise_feed(&self, key: &SessionKey, feed: &Feed, log_last: u64) {
        {
            let mut last = feed.last_seq.lock().await;
            if last.is_none() {
                *last = Some(log_last);
            }
        }
        self.fill(key, feed).await;
    }

    /// Reads what the feed has not broadcast yet and broadcasts it: one read
    /// per replica, however many followers.
    async fn fill(&self, key: &SessionKey, feed: &Feed) {
        let mut last = feed.last_seq.lock().await;
        let Some(from) = *last else { return };
        match self.inner.store.log.read_after(key, from, REPLAY_PAGE).await {
            Ok(range) => {
                for event in self.decode(key, range) {
                    *last = Some(event.seq);
                    let _ = feed.tx.send(event);
                }
            }
            Err(e) => tracing::warn!(session = %key.id, error = %e, "cannot read new events"),
        }
    }

    fn decode(&self, key: &SessionKey, range: LogRange) -> Vec<Arc<LogEvent>> {
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

    /// The writer: one per replica; see the module docs.
    async fn run_writer(self, mut inbox: mpsc::Receiver<AppendCommand>) {
        loop {
            let first = tokio::select! {
                command = inbox.recv() => command,
                () = self.inner.shutdown.cancelled() => None,
            };
            let Some(first) = first else { break };
            let mut commands = vec![first];
            let deadline = tokio::time::sleep(COALESCE_WINDOW);
            tokio::pin!(deadline);
            // A durable append (a checkpoint waits for it) goes at once,
            // with whatever deltas came before it; deltas alone wait for the
            // window to merge.
            while commands.len() < MAX_BATCH && commands.iter().all(|c| c.ack.is_none()) {
                tokio::select! {
                    command = inbox.recv() => match command {
                        Some(command) => commands.push(command),
                        None => break,
                    },
                    () = &mut deadline => break,
                }
            }
            self.write(commands).await;
        }
        // Shutdown: append what is still queued, so acknowledged work is kept.
        inbox.close();
        let mut rest = Vec::new();
        while let Some(command) = inbox.recv().await {
            rest.push(command);
        }
        if !rest.is_empty() {
            self.write(rest).await;
        }
    }

    async fn write(&self, commands: Vec<AppendCommand>) {
        // Group by session, keeping each session's order.
        let mut groups: Vec<(SessionKey, Vec<Event>, Vec<oneshot::Sender<_>>)> = Vec::new();
        for command in commands {
            let index = match groups.iter().position(|(key, _, _)| *key == command.key) {
                Some(index) => index,
                None => {
                    groups.push((command.key.clone(), Vec::new(), Vec::new()));
                    groups.len() - 1
                }
            };
            let group = &mut groups[index];
            for event in command.events {
                push_coalesced(&mut group.1, event);
            }
            group.2.extend(command.ack);
        }
        let mut batches = Vec::with_capacity(groups.len());
        for (key, events, _) in &groups {
            let payloads = events.iter().filter_map(|e| serde_json::to_string(e).ok()).collect();
            batches.push(AppendBatch { key: key.clone(), replica: self.inner.replica.clone(), payloads });
        }
        let results = self.inner.store.log.append(&batches).await;
        for ((key, events, acks), result) in groups.into_iter().zip(results) {
            match &result {
                Ok((first, _)) => self.broadcast_local(&key, *first, events).await,
                // The append may have happened all the same (an answer lost
                // on the way back): followers here get whatever the log has.
                Err(_) => {
                    if let Some(feed) = self.inner.feeds.get(&key).map(|f| f.clone()) {
                        self.fill(&key, &feed).await;
                    }
                }
            }
            for ack in acks {
                let _ = ack.send(result.clone());
            }
        }
    }

    /// Hands freshly appended events to this replica's followers, from memory.
    async fn broadcast_local(&self, key: &SessionKey, first: u64, events: Vec<Event>) {
        let Some(feed) = self.inner.feeds.get(key).map(|f| f.clone()) else { return };
        let mut last = feed.last_seq.lock().await;
        for (i, event) in events.into_iter().enumerate() {
            let seq = first + i as u64;
            if last.is_some_and(|l| seq <= l) {
                continue;
            }
            *last = Some(seq);
            let _ = feed.tx.send(Arc::new(LogEvent { seq, session_id: key.id.clone(), event }));
        }
    }

    /// Listens to this replica's subscription: appends elsewhere fill the
    /// feeds; wakes go to whoever runs the session here.
    async fn run_notices(self, mut notices: mpsc::Receiver<Notice>, wakes: mpsc::Sender<SessionKey>) {
        loop {
            let notice = tokio::select! {
                notice = notices.recv() => notice,
                () = self.inner.shutdown.cancelled() => None,
            };
            match notice {
                None => break,
                // Our own append: the writer broadcasts it from memory (and
                // re-reads the log itself if the append's answer was lost).
                Some(Notice::Appended { by: Some(by), .. }) if by == self.inner.replica => {}
                Some(Notice::Appended { key, last_seq, .. }) => {
                    let Some(feed) = self.inner.feeds.get(&key).map(|f| f.clone()) else { continue };
                    let behind = feed.last_seq.lock().await.is_some_and(|l| l < last_seq);
                    if behind {
                        self.fill(&key, &feed).await;
                    }
                }
                Some(Notice::Wake { key }) => {
                    let _ = wakes.send(key).await;
                }
                Some(Notice::Resubscribed) => {
                    let feeds: Vec<_> = self.inner.feeds.iter().map(|f| (f.key().clone(), f.value().clone())).collect();
                    for (key, feed) in feeds {
                        self.fill(&key, &feed).await;
                    }
                }
            }
        }
    }
}

/// Drops a follower's interest in its feed; the last one out unwatches.
struct FeedGuard {
    hub: EventHub,
    key: SessionKey,
    feed: Arc<Feed>,
}

impl FeedGuard {
    async fn release(self) {
        if self.feed.followers.fetch_sub(1, Ordering::SeqCst) == 1 {
            let removed = self.hub.inner.feeds.remove_if(&self.key, |_, f| f.followers.load(Ordering::SeqCst) == 0);
            if removed.is_some() {
                let _ = self.hub.inner.store.notifications.unwatch(&self.key).await;
            }
        }
    }
}

/// Appends `event` to `events`, merging it into the previous one when both
/// are text (or reasoning) deltas of the same agent.
fn push_coalesced(events: &mut Vec<Event>, event: Event) {
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

fn writer_gone() -> StoreError {
    StoreError::Unavailable("the event writer has stopped (shutting down)".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::AgentRef;

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
