//! Index hints that were lost, written again from the session's state.
//!
//! A commit's index entries (its owner's `owned` set, the `orphans` set,
//! a created session's list entries) live in other slots than the session
//! on a cluster: a second write after the commit, which a node's failure
//! can lose while the commit went through. The state hash is the truth and
//! the indexes are derived from it, so a lost entry is repairable: the
//! session is queued here, and a task owned by the store reads its state
//! (`own`, `st`) and writes the entry the state implies now — in its
//! owner's `owned` set, or in `orphans` when it is active and owned by
//! nobody, its list entries while it exists — retrying until the node
//! answers. Only additions are repaired: a lost removal leaves an entry
//! that whoever finds it re-checks against the state and prunes (the
//! takeover sweep, the listing), as does an addition made stale by a
//! commit racing the repair. Without this, a session whose `owned` entry
//! was lost would not be found by the sweep when its owner dies, only when
//! a request touched it.
//!
//! The queue lives in the replica that lost the write: if it dies before
//! the repair, the session is taken over when a request touches it (its
//! state names a dead owner).

use std::{
    collections::HashMap,
    ops::Range,
    sync::{Arc, Mutex},
    time::Duration,
};

use redis::RedisResult;
use tokio::sync::Notify;

use super::{
    Keys,
    conn::{Conn, Redo, Spread},
    map_err,
};
use crate::{
    store::{SessionKey, StoreError, is_active},
    telemetry::metrics::Metrics,
};

/// Sessions repaired per round (one batch of reads, one of writes).
const BATCH: usize = 256;

/// Sessions waiting at most; a repair beyond is dropped (and logged), so a
/// long outage cannot grow the queue without bound.
const MAX_PENDING: usize = 100_000;

/// The wait before a round that failed is tried again.
const RETRY_AFTER: Duration = Duration::from_millis(250);

/// What one session waits for.
#[derive(Debug, Default)]
struct Pending {
    ownership: bool,
    /// (list key, position member), each once.
    listed: Vec<(String, String)>,
}

impl Pending {
    fn merge(&mut self, other: Pending) {
        self.ownership |= other.ownership;
        for entry in other.listed {
            if !self.listed.contains(&entry) {
                self.listed.push(entry);
            }
        }
    }
}

/// The queue of sessions whose index entries must be written again.
pub(super) struct Repairs {
    pending: Mutex<HashMap<SessionKey, Pending>>,
    ready: Notify,
    /// `switchboard_store_index_entries_total` by outcome.
    metrics: Arc<Metrics>,
}

impl Repairs {
    pub(super) fn new(metrics: Arc<Metrics>) -> Self {
        Self { pending: Mutex::default(), ready: Notify::new(), metrics }
    }

    /// Queues `lost` (from [`Conn::send`]).
    pub(super) fn add(&self, lost: Vec<Redo>) {
        if lost.is_empty() {
            return;
        }
        self.metrics.index_entries("lost", lost.len() as u64);
        let mut dropped = 0;
        {
            let mut pending = self.pending.lock().expect("the repair queue is never poisoned");
            for redo in lost {
                let (key, what) = match redo {
                    Redo::Ownership(key) => (key, Pending { ownership: true, listed: Vec::new() }),
                    Redo::Listed { key, list, position } => {
                        (key, Pending { ownership: false, listed: vec![(list, position)] })
                    }
                };
                if pending.len() >= MAX_PENDING && !pending.contains_key(&key) {
                    dropped += 1;
                    continue;
                }
                pending.entry(key).or_default().merge(what);
            }
        }
        self.metrics.index_entries("dropped", dropped);
        if dropped > 0 {
            tracing::warn!(dropped, "index repair queue full; those sessions are taken over on their next request");
        }
        self.ready.notify_one();
    }

    /// Up to [`BATCH`] sessions, waiting until there is one.
    async fn take(&self) -> Vec<(SessionKey, Pending)> {
        loop {
            {
                let mut pending = self.pending.lock().expect("the repair queue is never poisoned");
                if !pending.is_empty() {
                    let keys: Vec<SessionKey> = pending.keys().take(BATCH).cloned().collect();
                    return keys.into_iter().filter_map(|k| pending.remove_entry(&k)).collect();
                }
            }
            self.ready.notified().await;
        }
    }

    /// Puts back what a round could not write (merged with anything queued
    /// for the same sessions since).
    fn put_back(&self, failed: Vec<(SessionKey, Pending)>) {
        let mut pending = self.pending.lock().expect("the repair queue is never poisoned");
        for (key, what) in failed {
            pending.entry(key).or_default().merge(what);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.pending.lock().unwrap().len()
    }
}

/// The task that empties [`Repairs`] (spawned by the store, stopped with it).
pub(super) struct Repairer {
    pub(super) conn: Conn,
    pub(super) keys: Arc<Keys>,
    pub(super) repairs: Arc<Repairs>,
}

impl Repairer {
    pub(super) async fn run(self) {
        loop {
            let batch = self.repairs.take().await;
            let sessions = batch.len();
            let failed = self.round(batch).await;
            self.repairs.metrics.index_entries("repaired", (sessions - failed.len()) as u64);
            if failed.is_empty() {
                tracing::info!(sessions, "lost index entries written again");
            } else {
                tracing::debug!(failed = failed.len(), "lost index entries not written yet; retrying");
                self.repairs.put_back(failed);
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
    }

    /// One round: reads each session's owner and status, writes the
    /// entries they imply. Returns the sessions to try again.
    async fn round(&self, batch: Vec<(SessionKey, Pending)>) -> Vec<(SessionKey, Pending)> {
        let mut conn = self.conn.clone();
        let mut read = Spread::default();
        for (key, _) in &batch {
            read.answered().cmd("HMGET").arg(self.keys.state(key)).arg("own").arg("st");
        }
        let states = match conn.send(read).await {
            Ok(sent) => sent.replies,
            Err(_) => return batch,
        };

        // Each session's answered commands, one after the other: its span.
        let mut write = Spread::default();
        let mut spans: Vec<(SessionKey, Pending, Range<usize>)> = Vec::new();
        let mut failed = Vec::new();
        let mut orphaned = false;
        for ((key, pending), state) in batch.into_iter().zip(states) {
            let state: RedisResult<(Option<String>, Option<String>)> =
                state.and_then(|value| Ok(redis::from_redis_value(value)?));
            let (owner, status) = match state.map_err(map_err) {
                Ok(state) => state,
                Err(StoreError::Corrupt(error)) => {
                    tracing::warn!(session = %key.id, %error, "a lost index entry cannot be derived; left to its next commit");
                    continue;
                }
                Err(_) => {
                    failed.push((key, pending));
                    continue;
                }
            };
            // No status: the session is gone (deleted, expired), and with
            // it every entry it had.
            let Some(status) = status else { continue };
            let member = key.to_member();
            let start = write.len();
            if pending.ownership {
                match owner.filter(|o| !o.is_empty()) {
                    Some(owner) => {
                        write.answered().cmd("SADD").arg(self.keys.owned_of(&owner, &key)).arg(&member);
                    }
                    None if is_active(&status) => {
                        write.answered().cmd("SADD").arg(self.keys.orphans_of(&key)).arg(&member);
                        orphaned = true;
                    }
                    None => {}
                }
            }
            for (list, position) in &pending.listed {
                write.answered().cmd("ZADD").arg(list).arg(0).arg(position);
            }
            spans.push((key, pending, start..write.len()));
        }
        if orphaned {
            write.hint().cmd("PUBLISH").arg(self.keys.orphans_channel()).arg("o");
        }
        match conn.send(write).await {
            Ok(sent) => {
                for (key, pending, span) in spans {
                    if sent.replies[span].iter().any(Result::is_err) {
                        failed.push((key, pending));
                    }
                }
            }
            Err(_) => failed.extend(spans.into_iter().map(|(key, pending, _)| (key, pending))),
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str) -> SessionKey {
        SessionKey::new("acme", id)
    }

    #[tokio::test]
    async fn a_sessions_lost_entries_are_queued_once_and_taken_together() {
        let repairs = Repairs::new(Default::default());
        repairs.add(vec![
            Redo::Ownership(key("s1")),
            Redo::Listed { key: key("s1"), list: "l".into(), position: "p".into() },
            Redo::Ownership(key("s1")),
            Redo::Listed { key: key("s1"), list: "l".into(), position: "p".into() },
            Redo::Ownership(key("s2")),
        ]);
        assert_eq!(repairs.len(), 2);
        let mut batch = repairs.take().await;
        batch.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(batch[0].0, key("s1"));
        assert!(batch[0].1.ownership);
        assert_eq!(batch[0].1.listed, vec![("l".to_string(), "p".to_string())]);
        assert_eq!(batch[1].0, key("s2"));
        assert!(batch[1].1.listed.is_empty());
        assert_eq!(repairs.len(), 0);

        // Put back after a failed round, merged with what came since.
        repairs.add(vec![Redo::Listed { key: key("s2"), list: "l".into(), position: "q".into() }]);
        repairs.put_back(batch);
        assert_eq!(repairs.len(), 2);
        let batch = repairs.take().await;
        let s2 = batch.iter().find(|(k, _)| *k == key("s2")).expect("s2 is queued");
        assert!(s2.1.ownership, "the failed round's ownership entry is kept");
        assert_eq!(s2.1.listed, vec![("l".to_string(), "q".to_string())]);
    }

    #[test]
    fn the_queue_is_bounded() {
        let metrics = Arc::new(Metrics::new());
        let repairs = Repairs::new(metrics.clone());
        repairs.add((0..MAX_PENDING + 10).map(|i| Redo::Ownership(key(&i.to_string()))).collect());
        assert_eq!(repairs.len(), MAX_PENDING);
        let text = metrics.render();
        assert!(text.contains("switchboard_store_index_entries_total{outcome=\"dropped\"} 10"), "{text}");
        // A session already queued still gets its new entries.
        repairs.add(vec![Redo::Listed { key: key("0"), list: "l".into(), position: "p".into() }]);
        assert_eq!(repairs.len(), MAX_PENDING);
    }
}
