//! The in-memory store: the embedded default, for one replica. It keeps the
//! same contract as the Redis store (versions, fenced appends, leases, the
//! lease and relay indexes, notices for watched sessions) inside the process.
//!
//! What it does not do: nothing survives a restart and nothing is shared
//! between processes, so session TTLs are not enforced (a session lives as
//! long as the process; the TTL exists in Redis to reclaim what abandoned
//! sessions leave behind). Leases do expire, by `tokio::time::Instant`
//! deadlines: an expired lease is treated as absent everywhere.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Mutex, MutexGuard, OnceLock},
    time::Duration,
};

mod quotas;

use async_trait::async_trait;
use tokio::{sync::mpsc, time::Instant};

use super::{
    AppendBatch, EventLog, Health, LeaseOp, Leases, LogRange, Notice, Notifications, RelayIndex, SessionKey,
    StateStore, StoreError, StoredEvent, Versioned, WriteOutcome,
};
use crate::config::StoreConfig;

pub struct MemoryStore {
    /// Quota counters, apart from `inner`: they never need to change
    /// together with sessions.
    quotas: Mutex<quotas::QuotaState>,
    /// One std mutex over everything, not a sharded map: every operation is
    /// a few map lookups with no await while it is held, and one lock makes
    /// the multi-structure updates (state + lease + lease index; log + lease
    /// check) atomic with no further thought.
    inner: Mutex<Inner>,
    max_len: usize,
    notices: mpsc::Sender<Notice>,
    /// Feeds a task that forwards to `notices`, started at the first notice
    /// (inside the runtime). Like Redis PUBLISH, an append never waits for
    /// the session layer to drain its notices (it may be the appender
    /// itself); order is kept and nothing is dropped. The queue is unbounded
    /// like the Redis client's own subscription buffer; it only grows while
    /// the notice consumer is stalled.
    forward: OnceLock<mpsc::UnboundedSender<Notice>>,
}

#[derive(Default)]
struct Inner {
    sessions: HashMap<SessionKey, Session>,
    /// Lease deadlines as last written by acquire or renew.
    lease_index: HashMap<SessionKey, Instant>,
    relays: HashMap<String, SessionKey>,
    /// Watch counts.
    watched: HashMap<SessionKey, usize>,
}

/// One session's records; any of them may be missing, as Redis keys may.
#[derive(Default)]
struct Session {
    state: Option<Versioned>,
    lease: Option<Lease>,
    log: VecDeque<StoredEvent>,
    /// Seq of the last event ever appended (survives trimming).
    last_seq: u64,
}

struct Lease {
    replica: String,
    deadline: Instant,
}

impl Session {
    fn holder(&self, now: Instant) -> Option<&str> {
        self.lease.as_ref().filter(|lease| lease.deadline > now).map(|lease| lease.replica.as_str())
    }
}

/// What a successful lease operation does to the lease index.
enum IndexChange {
    Keep,
    Set(Instant),
    Remove,
}

/// Checks and applies `op`; on `Err` nothing changed.
fn apply_lease(session: &mut Session, op: &LeaseOp, now: Instant) -> Result<IndexChange, ()> {
    let holder = session.holder(now);
    match op {
        LeaseOp::None => Ok(IndexChange::Keep),
        LeaseOp::Acquire { replica, ttl } | LeaseOp::Require { replica, ttl } => {
            let allowed = match op {
                LeaseOp::Acquire { .. } => holder.is_none_or(|h| h == replica),
                _ => holder == Some(replica.as_str()),
            };
            if !allowed {
                return Err(());
            }
            let deadline = now + *ttl;
            session.lease = Some(Lease { replica: replica.clone(), deadline });
            Ok(IndexChange::Set(deadline))
        }
        LeaseOp::Release { replica } => {
            if holder.is_some_and(|h| h != replica) {
                return Err(());
            }
            session.lease = None;
            Ok(IndexChange::Remove)
        }
    }
}

impl MemoryStore {
    pub fn new(config: &StoreConfig, notices: mpsc::Sender<Notice>) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            max_len: usize::try_from(config.event_log_max_len).unwrap_or(usize::MAX),
            notices,
            forward: OnceLock::new(),
            quotas: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-applied write
        // (checks come before mutations), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn notify(&self, notices: Vec<Notice>) {
        if notices.is_empty() {
            return;
        }
        let forward = self.forward.get_or_init(|| {
            let (tx, mut rx) = mpsc::unbounded_channel();
            let out = self.notices.clone();
            // Ends when the store (the only sender) is dropped.
            tokio::spawn(async move {
                while let Some(notice) = rx.recv().await {
                    if out.send(notice).await.is_err() {
                        return;
                    }
                }
            });
            tx
        });
        for notice in notices {
            let _ = forward.send(notice);
        }
    }

    fn write_state(&self, key: &SessionKey, expected: Option<u64>, doc: &str, lease: &LeaseOp) -> WriteOutcome {
        let now = Instant::now();
        let mut inner = self.lock();
        // A failed CAS on an unknown session must not leave an empty entry.
        let session = match expected {
            None => inner.sessions.entry(key.clone()).or_default(),
            Some(_) => match inner.sessions.get_mut(key) {
                Some(session) => session,
                None => return WriteOutcome::VersionConflict,
            },
        };
        let version = match (expected, &session.state) {
            (None, None) => 1,
            (Some(expected), Some(state)) if state.version == expected => expected + 1,
            _ => return WriteOutcome::VersionConflict,
        };
        let Ok(change) = apply_lease(session, lease, now) else {
            return WriteOutcome::LeaseConflict;
        };
        session.state = Some(Versioned { version, doc: doc.to_string() });
        match change {
            IndexChange::Keep => {}
            IndexChange::Set(deadline) => {
                inner.lease_index.insert(key.clone(), deadline);
            }
            IndexChange::Remove => {
                inner.lease_index.remove(key);
            }
        }
        WriteOutcome::Written(version)
    }
}

#[async_trait]
impl StateStore for MemoryStore {
    async fn create(&self, key: &SessionKey, doc: &str, lease: LeaseOp) -> Result<WriteOutcome, StoreError> {
        Ok(self.write_state(key, None, doc, &lease))
    }

    async fn load(&self, key: &SessionKey) -> Result<Option<Versioned>, StoreError> {
        Ok(self.lock().sessions.get(key).and_then(|s| s.state.clone()))
    }

    async fn compare_and_set(
        &self,
        key: &SessionKey,
        expected: u64,
        doc: &str,
        lease: LeaseOp,
    ) -> Result<WriteOutcome, StoreError> {
        Ok(self.write_state(key, Some(expected), doc, &lease))
    }
}

#[async_trait]
impl EventLog for MemoryStore {
    /// An empty batch is answered `Ok((0, 0))` with no fencing check and no
    /// notice, as in the Redis store.
    async fn append(&self, batches: &[AppendBatch]) -> Vec<Result<(u64, u64), StoreError>> {
        let now = Instant::now();
        let mut notices = Vec::new();
        let results = {
            let mut inner = self.lock();
            let inner = &mut *inner;
            batches
                .iter()
                .map(|batch| {
                    if batch.payloads.is_empty() {
                        return Ok((0, 0));
                    }
                    // No entry, no lease: nothing to create for a refused batch.
                    let Some(session) = inner
                        .sessions
                        .get_mut(&batch.key)
                        .filter(|session| session.holder(now) == Some(batch.replica.as_str()))
                    else {
                        return Err(StoreError::NotLeaseholder);
                    };
                    let first = session.last_seq + 1;
                    for payload in &batch.payloads {
                        session.last_seq += 1;
                        session.log.push_back(StoredEvent { seq: session.last_seq, payload: payload.clone() });
                    }
                    let excess = session.log.len().saturating_sub(self.max_len);
                    session.log.drain(..excess);
                    if inner.watched.contains_key(&batch.key) {
                        notices.push(Notice::Appended {
                            key: batch.key.clone(),
                            last_seq: session.last_seq,
                            by: Some(batch.replica.clone()),
                        });
                    }
                    Ok((first, session.last_seq))
                })
                .collect()
        };
        self.notify(notices);
        results
    }

    async fn read_after(&self, key: &SessionKey, after: u64, limit: usize) -> Result<LogRange, StoreError> {
        let inner = self.lock();
        let Some(session) = inner.sessions.get(key) else {
            return Ok(LogRange { events: Vec::new(), first_seq: 0, last_seq: 0 });
        };
        let start = session.log.partition_point(|event| event.seq <= after);
        Ok(LogRange {
            events: session.log.range(start..).take(limit).cloned().collect(),
            first_seq: session.log.front().map_or(0, |event| event.seq),
            last_seq: session.last_seq,
        })
    }
}

#[async_trait]
impl Leases for MemoryStore {
    async fn renew(&self, key: &SessionKey, replica: &str, ttl: Duration) -> Result<bool, StoreError> {
        let now = Instant::now();
        let mut inner = self.lock();
        let Some(session) = inner.sessions.get_mut(key) else {
            return Ok(false);
        };
        let op = LeaseOp::Require { replica: replica.to_string(), ttl };
        match apply_lease(session, &op, now) {
            Ok(IndexChange::Set(deadline)) => {
                inner.lease_index.insert(key.clone(), deadline);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn owner(&self, key: &SessionKey) -> Result<Option<String>, StoreError> {
        let now = Instant::now();
        Ok(self.lock().sessions.get(key).and_then(|s| s.holder(now)).map(str::to_string))
    }

    async fn expired(&self, limit: usize) -> Result<Vec<SessionKey>, StoreError> {
        let now = Instant::now();
        let inner = self.lock();
        let mut expired: Vec<(&Instant, &SessionKey)> = inner
            .lease_index
            .iter()
            .filter(|(_, deadline)| **deadline <= now)
            .map(|(key, deadline)| (deadline, key))
            .collect();
        // Oldest deadline first, as the Redis zset orders them.
        expired.sort();
        Ok(expired.into_iter().take(limit).map(|(_, key)| key.clone()).collect())
    }

    async fn forget(&self, key: &SessionKey) -> Result<(), StoreError> {
        self.lock().lease_index.remove(key);
        Ok(())
    }
}

#[async_trait]
impl RelayIndex for MemoryStore {
    async fn put_relay(&self, relay_id: &str, key: &SessionKey) -> Result<(), StoreError> {
        self.lock().relays.insert(relay_id.to_string(), key.clone());
        Ok(())
    }

    async fn get_relay(&self, relay_id: &str) -> Result<Option<SessionKey>, StoreError> {
        Ok(self.lock().relays.get(relay_id).cloned())
    }
}

#[async_trait]
impl Notifications for MemoryStore {
    async fn watch(&self, key: &SessionKey) -> Result<(), StoreError> {
        *self.lock().watched.entry(key.clone()).or_default() += 1;
        Ok(())
    }

    async fn unwatch(&self, key: &SessionKey) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if let Some(count) = inner.watched.get_mut(key) {
            *count -= 1;
            if *count == 0 {
                inner.watched.remove(key);
            }
        }
        Ok(())
    }

    async fn wake(&self, key: &SessionKey) -> Result<(), StoreError> {
        let watched = self.lock().watched.contains_key(key);
        if watched {
            self.notify(vec![Notice::Wake { key: key.clone() }]);
        }
        Ok(())
    }
}

#[async_trait]
impl Health for MemoryStore {
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(max_len: u64) -> (MemoryStore, mpsc::Receiver<Notice>) {
        let config = StoreConfig {
            redis_url: None,
            key_prefix: "sb:".to_string(),
            session_ttl: Duration::from_secs(60),
            event_log_max_len: max_len,
            lease_ttl: Duration::from_secs(10),
        };
        let (tx, rx) = mpsc::channel(16);
        (MemoryStore::new(&config, tx), rx)
    }

    fn acquire(replica: &str, secs: u64) -> LeaseOp {
        LeaseOp::Acquire { replica: replica.to_string(), ttl: Duration::from_secs(secs) }
    }

    /// A lease renewed for zero time ends at once (deadline == now), which
    /// exercises expiry deterministically, without waiting.
    #[tokio::test]
    async fn a_lease_is_absent_once_its_deadline_passes() {
        let (store, _rx) = store(10);
        let key = SessionKey::new("acme", "s1");
        assert_eq!(store.create(&key, "{}", acquire("a", 60)).await, Ok(WriteOutcome::Written(1)));
        assert_eq!(store.owner(&key).await, Ok(Some("a".to_string())));
        assert_eq!(store.expired(10).await, Ok(vec![]));
        assert_eq!(store.compare_and_set(&key, 1, "{}", acquire("b", 60)).await, Ok(WriteOutcome::LeaseConflict));

        assert_eq!(store.renew(&key, "a", Duration::ZERO).await, Ok(true));
        assert_eq!(store.owner(&key).await, Ok(None));
        assert_eq!(store.expired(10).await, Ok(vec![key.clone()]));
        assert_eq!(store.renew(&key, "a", Duration::from_secs(60)).await, Ok(false));
        let batch = AppendBatch { key: key.clone(), replica: "a".to_string(), payloads: vec!["1".to_string()] };
        assert_eq!(store.append(&[batch]).await, vec![Err(StoreError::NotLeaseholder)]);
        let require = LeaseOp::Require { replica: "a".to_string(), ttl: Duration::from_secs(60) };
        assert_eq!(store.compare_and_set(&key, 1, "{}", require).await, Ok(WriteOutcome::LeaseConflict));
        assert_eq!(store.compare_and_set(&key, 1, "{}", acquire("b", 60)).await, Ok(WriteOutcome::Written(2)));
        assert_eq!(store.owner(&key).await, Ok(Some("b".to_string())));
        assert_eq!(store.expired(10).await, Ok(vec![]));
    }

    #[tokio::test]
    async fn the_log_keeps_only_the_newest_events() {
        let (store, _rx) = store(3);
        let key = SessionKey::new("acme", "s1");
        store.create(&key, "{}", acquire("a", 10)).await.unwrap();
        let payloads = (1..=5).map(|n| n.to_string()).collect();
        let batch = AppendBatch { key: key.clone(), replica: "a".to_string(), payloads };
        assert_eq!(store.append(&[batch]).await, vec![Ok((1, 5))]);
        let range = store.read_after(&key, 0, 10).await.unwrap();
        assert_eq!((range.first_seq, range.last_seq), (3, 5));
        let seqs: Vec<u64> = range.events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [3, 4, 5]);
    }
}
