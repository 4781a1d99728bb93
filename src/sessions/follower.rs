//! [`Follower`]: one client's follow of a session on this replica. It
//! replays the log after the client's cursor, then takes live events from
//! the session's feed (see `hub.rs`), re-reading the store when it sees a
//! gap (it fell behind the feed's ring, a notice was missed). A follow of a
//! session running here from a cursor the feed's ring holds skips the
//! replay: it starts live. It has no task of its own: whoever consumes it
//! (the HTTP response body) drives it, so an open stream costs its place in
//! the feed and this state, nothing more.
//!
//! Asked for, the replay starts earlier, at the start of the cursor's
//! turn: the events up to the cursor come out as [`FollowItem::Context`],
//! read by the same pages as the rest.
//!
//! It ends after an event that ends a stream (pause, turn end) in live
//! events; after the replay when the replay's newest event leaves the
//! session at rest (a pause, a turn's end, the title after one); and at
//! once when the session was not running and nothing follows the cursor.
//!
//! A title follow ([`Follower::title_only`], after a stream's turn ended
//! announcing a title) hands out the first `title_updated` after its cursor
//! and ends; it ends without one at a `turn_started` (a new turn took the
//! session: the title comes after that turn's end), skipping whatever else
//! it reads.

use std::{collections::VecDeque, sync::Arc};

use super::hub::{EventHub, Feed, FollowItem, REPLAY_PAGE, Taken};
use crate::{
    domain::{EventKind, LogEvent},
    store::SessionKey,
};

impl EventHub {
    /// Follows the session's log after `after` (see [`Follower`]), with the
    /// events after `context_from` up to `after` first as context (none
    /// when it is `after`); `idle`: the session was not running when the
    /// follow began.
    pub async fn follow(&self, key: SessionKey, context_from: u64, after: u64, idle: bool) -> Follower {
        let feed = self.join(&key);
        // Made before any wait, so a follow abandoned meanwhile releases
        // the feed (the follower's drop does).
        let mut follower = Follower::new(self.clone(), key.clone(), feed.clone(), context_from, after, idle);
        // (A session at rest here, making its title, replays: its follow
        // may end at once.)
        if context_from == after && !idle && follower.join_local() {
            return follower;
        }
        self.subscribe(&key, &feed).await;
        follower
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Reading the stored log after the cursor, a page at a time.
    Replay,
    /// Taking live events.
    Live,
    /// Handing out what was read, then done.
    Draining,
    Done,
}

pub struct Follower {
    hub: EventHub,
    key: SessionKey,
    feed: Arc<Feed>,
    /// The client's cursor: events up to it are context.
    after: u64,
    /// The session was not running when the follow began.
    idle: bool,
    /// The seq of the last event read (handed out, or waiting in `ready`).
    last: u64,
    /// Whether the newest replayed event ends a stream.
    newest_ends: bool,
    ready: VecDeque<Arc<LogEvent>>,
    mode: Mode,
    /// Only the title is handed out (see the module docs).
    title_only: bool,
    /// The feed was released (at the end, or on drop).
    released: bool,
    /// Changes of the feed's hold seen (see [`FollowItem::Held`]).
    held_seen: u64,
}

impl Follower {
    pub(super) fn new(
        hub: EventHub,
        key: SessionKey,
        feed: Arc<Feed>,
        context_from: u64,
        after: u64,
        idle: bool,
    ) -> Self {
        Self {
            hub,
            key,
            feed,
            after,
            idle,
            last: context_from.min(after),
            newest_ends: false,
            ready: VecDeque::new(),
            mode: Mode::Replay,
            title_only: false,
            released: false,
            held_seen: 0,
        }
    }

    /// Starts live from the feed of a session running here, when its ring
    /// holds every event after the cursor: no replay. False otherwise (the
    /// follow replays from the store first).
    pub(super) fn join_local(&mut self) -> bool {
        match self.feed.join_local(self.after, &mut self.ready) {
            Some(last) => {
                self.last = last;
                self.mode = Mode::Live;
                true
            }
            None => false,
        }
    }

    /// Makes this a title follow: it hands out only the next
    /// `title_updated`, and ends after it or at a `turn_started`.
    pub(super) fn title_only(mut self) -> Self {
        self.title_only = true;
        self
    }

    /// The client's cursor: the seq after which this follow hands events out.
    pub fn cursor(&self) -> u64 {
        self.after
    }

    /// The next event (or the failure that ends the follow); `None` at the
    /// end. Cancelling it (dropping the future) is safe only when the
    /// follow is abandoned.
    pub async fn next(&mut self) -> Option<FollowItem> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                if event.seq <= self.after {
                    return Some(FollowItem::Context(event));
                }
                if self.title_only {
                    match event.event.kind {
                        EventKind::TitleUpdated { .. } => {
                            self.finish();
                            return Some(FollowItem::Event(event));
                        }
                        EventKind::TurnStarted { .. } => {
                            self.finish();
                            return None;
                        }
                        _ => continue,
                    }
                }
                if self.mode == Mode::Live && event.event.kind.ends_stream() {
                    self.finish();
                }
                return Some(FollowItem::Event(event));
            }
            let failure = match self.mode {
                Mode::Done => return None,
                Mode::Draining => {
                    self.finish();
                    return None;
                }
                Mode::Replay => self.replay_page().await,
                Mode::Live => self.wait_live().await,
            };
            if let Some(item) = failure {
                // A hold's notice goes on; its end, or a failure, ends it.
                if !matches!(&item, FollowItem::Held(held) if !held.gave_up) {
                    self.finish();
                }
                return Some(item);
            }
        }
    }

    /// Reads the next page of the replay. At its end the feed is set to
    /// the log's position, and the follow goes live or ends.
    async fn replay_page(&mut self) -> Option<FollowItem> {
        let range = match self.hub.read_after(&self.key, self.last, REPLAY_PAGE).await {
            Ok(range) => range,
            Err(e) => return Some(FollowItem::Failed(e)),
        };
        // Nothing after the cursor handed out yet, and the log lost some of
        // it. (Context lost to retention is no failure: an encoder renders
        // what follows with what it has.)
        if self.last <= self.after && range.last_seq > self.after && range.first_seq > self.after + 1 {
            return Some(FollowItem::RecoveryFailed { first_seq: range.first_seq });
        }
        let full_page = range.events.len() == REPLAY_PAGE;
        let log_last = range.last_seq;
        for event in self.hub.decode(&self.key, range) {
            self.last = event.seq;
            self.newest_ends = event.event.kind.at_rest();
            self.ready.push_back(event);
        }
        if !full_page {
            self.hub.initialise_feed(&self.key, &self.feed, log_last).await;
            let nothing_new = self.idle && self.last == self.after;
            self.mode = if self.newest_ends || nothing_new { Mode::Draining } else { Mode::Live };
        }
        None
    }

    /// Waits for the next live events; on a gap (it fell behind the feed's
    /// ring) reads the missing range from the store instead. A new notice
    /// of a hold of the session's writes comes out while none is ready.
    async fn wait_live(&mut self) -> Option<FollowItem> {
        let feed = self.feed.clone();
        loop {
            // Registered before looking, so an event pushed in between
            // still wakes it.
            let changed = feed.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match feed.take_after(self.last, &mut self.ready) {
                Taken::Some => {
                    if let Some(last) = self.ready.back() {
                        self.last = last.seq;
                    }
                    return None;
                }
                Taken::Gap => return self.catch_up().await,
                // Stopped running here while this follow goes on: the rest
                // comes through the store.
                Taken::Detached => self.hub.attach(&self.key, &feed).await,
                Taken::Nothing => {
                    if let Some((seen, held)) = feed.held_since(self.held_seen) {
                        self.held_seen = seen;
                        if let Some(held) = held {
                            return Some(FollowItem::Held(held));
                        }
                    }
                    changed.await
                }
            }
        }
    }

    /// Reads a page of what follows `last` from the store.
    async fn catch_up(&mut self) -> Option<FollowItem> {
        let range = match self.hub.read_after(&self.key, self.last, REPLAY_PAGE).await {
            Ok(range) => range,
            Err(e) => return Some(FollowItem::Failed(e)),
        };
        if range.first_seq > self.last + 1 && range.last_seq > self.last {
            return Some(FollowItem::RecoveryFailed { first_seq: range.first_seq });
        }
        for event in self.hub.decode(&self.key, range) {
            self.last = event.seq;
            self.ready.push_back(event);
        }
        None
    }

    /// The follow is over: what was read and not handed out is dropped,
    /// the feed released.
    fn finish(&mut self) {
        self.mode = Mode::Done;
        self.ready.clear();
        self.release();
    }

    fn release(&mut self) {
        if !std::mem::replace(&mut self.released, true) {
            self.hub.release(self.key.clone(), self.feed.clone());
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.release();
    }
}
