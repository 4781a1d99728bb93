//! The in-memory store: the embedded default, for one replica. It keeps the
//! same contract as the Redis store (atomic fenced commits, the gapless log,
//! heartbeats and ownership, the relay index, notices for watched sessions)
//! inside the process, under one lock.
//!
//! What it does not do: nothing survives a restart and nothing is shared
//! between processes, so session TTLs are not enforced (a session lives as
//! long as the process; the TTL exists in Redis to reclaim what abandoned
//! sessions leave behind). Heartbeats do expire, by `tokio::time::Instant`
//! deadlines.

use std::{
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex, MutexGuard, OnceLock},
    time::Duration,
};

mod catalog;
mod quotas;

use async_trait::async_trait;
use tokio::{sync::mpsc, time::Instant};

use super::{
    Append, CancelRequest, Commit, CommitError, Committed, Conflict, Decided, EventLog, Fence, Health, LogRange,
    MessagesWrite, Notice, Notifications, OwnerChange, Record, RelayIndex, Replicas, SessionKey, SessionStore,
    SessionWrite, StoreError, StoredEvent, Wrote,
};
use crate::config::StoreConfig;

pub struct MemoryStore {
    /// Quota counters, apart from `inner`: they never need to change
    /// together with sessions.
    quotas: Mutex<quotas::QuotaState>,
    /// One std mutex over everything, not a sharded map: every operation is
    /// a few map lookups with no await while it is held, and one lock makes
    /// a commit (state, messages, log, owner, indexes) atomic with no
    /// further thought.
    inner: Mutex<Inner>,
    max_len: usize,
    notices: mpsc::Sender<Notice>,
    /// Feeds a task that forwards to `notices`, started at the first notice
    /// (inside the runtime). Like Redis PUBLISH, a commit never waits for
    /// the session layer to drain its notices (it may be the committer
    /// itself); order is kept and nothing is dropped. The queue is unbounded
    /// like the Redis client's own subscription buffer; it only grows while
    /// the notice consumer is stalled.
    forward: OnceLock<mpsc::UnboundedSender<Notice>>,
}

#[derive(Default)]
struct Inner {
    sessions: HashMap<SessionKey, Stored>,
    /// Instance → heartbeat deadline.
    replicas: HashMap<String, Instant>,
    owned: HashMap<String, HashSet<SessionKey>>,
    orphans: HashSet<SessionKey>,
    /// (tenant, relay id) → session.
    relays: HashMap<(Arc<str>, String), SessionKey>,
    /// Watch counts.
    watched: HashMap<SessionKey, usize>,
    /// Instances listening to their own channel (`Notifications::listen`).
    listening: HashSet<String>,
    /// Follow counts by instance (see `Notifications::follow`).
    followers: HashMap<SessionKey, HashMap<String, usize>>,
    /// The catalog's lists (`catalog.rs`).
    lists: HashMap<super::ListScope, std::collections::BTreeSet<super::ListPosition>>,
}

impl Inner {
    /// Whether a wake-up for `key`'s owner `owner` is heard: on the
    /// session's channel (watched) or on the owner's own.
    fn wakes(&self, key: &SessionKey, owner: &str) -> bool {
        self.watched.contains_key(key) || (!owner.is_empty() && self.listening.contains(owner))
    }
}

/// One session's records, as the Redis hash, list and stream hold them.
#[derive(Default)]
struct Stored {
    version: u64,
    doc: String,
    status: String,
    owner: String,
    last_owner: String,
    epoch: u64,
    commit_n: u64,
    last_seq: u64,
    /// The epoch of the log's top (Redis: the high part of the stream's
    /// last id): an owner's append of an older tenure is refused.
    log_epoch: u64,
    checkpoint_seq: u64,
    turn_start_seq: u64,
    messages: Vec<String>,
    log: VecDeque<StoredEvent>,
    relays: BTreeMap<String, Option<String>>,
    cancel: bool,
    /// The workspace: manifest and blobs (`store::workspace`).
    files: BTreeMap<String, super::FileEntry>,
    blobs: HashMap<String, bytes::Bytes>,
    /// Annexes (`store::annex`): name → value with its deadline.
    annexes: HashMap<String, String>,
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

    /// A session's record as a load answers it.
    fn record_of(s: &Stored, history: bool) -> Record {
        Record {
            version: s.version,
            doc: s.doc.clone(),
            owner: (!s.owner.is_empty()).then(|| s.owner.clone()),
            last_owner: (!s.last_owner.is_empty()).then(|| s.last_owner.clone()),
            epoch: s.epoch,
            last_seq: s.last_seq,
            checkpoint_seq: s.checkpoint_seq,
            turn_start_seq: s.turn_start_seq,
            message_count: s.messages.len() as u64,
            messages: history.then(|| s.messages.clone()),
            cancel_requested: s.cancel,
            relays: s.relays.iter().map(|(id, decision)| (id.clone(), decision.clone())).collect(),
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

    /// An owner's appends under the lock, as Redis takes them: an event
    /// whose (epoch, seq) is not above the log's top is refused — this
    /// tenure's own from an earlier attempt (counted as applied), or a
    /// later tenure's fence.
    fn append(
        &self,
        inner: &mut Inner,
        key: &SessionKey,
        append: &Append,
        notices: &mut Vec<Notice>,
    ) -> Result<(), CommitError> {
        let watched = inner.watched.contains_key(key);
        let Some(s) = inner.sessions.get_mut(key) else { return Err(CommitError::Conflict(Conflict::Fenced)) };
        for (i, payload) in append.events.iter().enumerate() {
            let seq = append.first_seq + i as u64;
            if (append.epoch, seq) <= (s.log_epoch, s.last_seq) {
                if *s.owner != *append.instance || s.epoch != append.epoch {
                    return Err(CommitError::Conflict(Conflict::Fenced));
                }
                continue;
            }
            s.log_epoch = append.epoch;
            s.last_seq = seq;
            s.log.push_back(StoredEvent { seq, payload: payload.clone() });
        }
        let excess = s.log.len().saturating_sub(self.max_len);
        s.log.drain(..excess);
        if append.announce && watched {
            let last_seq = append.last_seq();
            notices.push(Notice::Appended { key: key.clone(), last_seq, by: Some(append.instance.to_string()) });
        }
        Ok(())
    }

    /// One commit under the lock; notices to send after it.
    fn apply(&self, inner: &mut Inner, commit: &Commit, notices: &mut Vec<Notice>) -> Result<Committed, CommitError> {
        let exists = inner.sessions.contains_key(&commit.key);
        let mut duplicate = false;
        {
            let current = inner.sessions.get(&commit.key);
            match (&commit.fence, current) {
                (Fence::Absent | Fence::New, Some(_)) => return Err(CommitError::Conflict(Conflict::Exists)),
                (Fence::Absent | Fence::New, None) => {}
                (Fence::Unchanged { version, owner, epoch, last_seq }, Some(s)) => {
                    let same_owner = owner.as_deref().unwrap_or("") == s.owner;
                    if s.version != *version || s.epoch != *epoch || s.last_seq != *last_seq || !same_owner {
                        return Err(CommitError::Conflict(Conflict::Changed));
                    }
                    // While it runs, only its owner appends events.
                    let running = super::is_active(&s.status) && !s.owner.is_empty();
                    if running && commit.owner == OwnerChange::Keep && !commit.events.is_empty() {
                        return Err(CommitError::Conflict(Conflict::Changed));
                    }
                }
                (Fence::Unchanged { .. }, None) => return Err(CommitError::Conflict(Conflict::Changed)),
                (Fence::Owner { instance, epoch, n, after }, Some(s)) => {
                    if s.owner != *instance || s.epoch != *epoch {
                        return Err(CommitError::Conflict(Conflict::Fenced));
                    }
                    if *n <= s.commit_n {
                        duplicate = true;
                    } else if *n != s.commit_n + 1 {
                        return Err(CommitError::Conflict(Conflict::Fenced));
                    } else if s.last_seq < *after {
                        return Err(CommitError::Store(StoreError::Unavailable(format!(
                            "the log ends at {} before the commit's appends",
                            s.last_seq
                        ))));
                    }
                }
                (Fence::Owner { .. }, None) => return Err(CommitError::Conflict(Conflict::Fenced)),
            }
        }
        if !exists {
            inner.sessions.insert(commit.key.clone(), Stored::default());
        }
        let followed_elsewhere =
            inner.followers.get(&commit.key).is_some_and(|by| by.keys().any(|instance| *instance != commit.by));
        let Some(s) = inner.sessions.get_mut(&commit.key) else {
            return Err(CommitError::Store(StoreError::Corrupt("session vanished under the lock".into())));
        };
        if duplicate {
            let first_seq = (s.last_seq + 1).saturating_sub(commit.events.len() as u64);
            let (version, epoch, last_seq) = (s.version, s.epoch, s.last_seq);
            return Ok(Committed { version, epoch, first_seq, last_seq, followed_elsewhere });
        }
        if let Fence::Owner { n, .. } = &commit.fence {
            s.commit_n = *n;
        }
        let previous = s.owner.clone();
        match &commit.owner {
            OwnerChange::Keep => {}
            OwnerChange::Acquire(instance) => {
                s.owner = instance.clone();
                s.last_owner = instance.clone();
                s.epoch += 1;
                s.commit_n = 0;
                s.log_epoch = s.epoch;
            }
            OwnerChange::Release => s.owner.clear(),
        }
        match &commit.messages {
            MessagesWrite::Keep => {}
            MessagesWrite::Append(messages) => s.messages.extend(messages.iter().cloned()),
            MessagesWrite::Replace(messages) => s.messages = messages.clone(),
        }
        let first_seq = s.last_seq + 1;
        if commit.turn_start {
            s.turn_start_seq = s.last_seq;
        }
        for payload in &commit.events {
            s.last_seq += 1;
            s.log.push_back(StoredEvent { seq: s.last_seq, payload: payload.clone() });
        }
        let excess = s.log.len().saturating_sub(self.max_len);
        s.log.drain(..excess);
        if let Some(state) = &commit.state {
            s.version += 1;
            s.doc = state.doc.clone();
            s.status = state.status.to_string();
            s.checkpoint_seq = s.last_seq;
        }
        for relay in &commit.open_relays {
            s.relays.insert(relay.clone(), None);
        }
        for relay in &commit.close_relays {
            s.relays.remove(relay);
        }
        if commit.clear_cancel {
            s.cancel = false;
        }
        if let Some(write) = &commit.workspace {
            for digest in &write.drop_blobs {
                s.blobs.remove(digest);
            }
            for (digest, content) in &write.blobs {
                s.blobs.insert(digest.clone(), content.clone());
            }
            for path in &write.remove {
                s.files.remove(path);
            }
            for (path, entry) in &write.set {
                s.files.insert(path.clone(), entry.clone());
            }
        }
        if !commit.events.is_empty() {
            s.log_epoch = s.epoch;
        }
        let committed =
            Committed { version: s.version, epoch: s.epoch, first_seq, last_seq: s.last_seq, followed_elsewhere };
        let (owner, active) = (s.owner.clone(), super::is_active(&s.status));
        if let Some(listing) = &commit.listing {
            self.list_entry(inner, &commit.key, listing);
        }
        let watched = inner.watched.contains_key(&commit.key);
        if watched && followed_elsewhere && !commit.events.is_empty() {
            notices.push(Notice::Appended {
                key: commit.key.clone(),
                last_seq: committed.last_seq,
                by: Some(commit.by.clone()),
            });
        }
        match &commit.owner {
            OwnerChange::Keep => {}
            OwnerChange::Acquire(instance) => {
                inner.owned.entry(instance.clone()).or_default().insert(commit.key.clone());
                inner.orphans.remove(&commit.key);
                // The instance that ran it until now learns it lost it:
                // on the session's channel or on its own.
                if !previous.is_empty() && previous != owner && (watched || inner.listening.contains(&previous)) {
                    notices.push(Notice::Wake { key: commit.key.clone() });
                }
            }
            OwnerChange::Release => {
                if let Some(owned) = inner.owned.get_mut(&previous) {
                    owned.remove(&commit.key);
                }
                if active {
                    inner.orphans.insert(commit.key.clone());
                    notices.push(Notice::Orphaned);
                }
            }
        }
        Ok(committed)
    }
}

#[async_trait]
impl SessionStore for MemoryStore {
    async fn load(&self, key: &SessionKey, history: bool) -> Result<Option<Record>, StoreError> {
        Ok(self.lock().sessions.get(key).map(|s| Self::record_of(s, history)))
    }

    async fn load_with_tail(&self, key: &SessionKey, limit: usize) -> Result<Option<super::Loaded>, StoreError> {
        // One lock: the record and its log as one snapshot.
        let inner = self.lock();
        let Some(stored) = inner.sessions.get(key) else { return Ok(None) };
        let record = Self::record_of(stored, true);
        let after = record.checkpoint_seq;
        let retained = stored.last_seq <= after || stored.log.front().is_none_or(|first| first.seq <= after + 1);
        let tail: Vec<StoredEvent> = stored.log.iter().filter(|e| e.seq > after).take(limit + 1).cloned().collect();
        let tail = (retained && tail.len() <= limit).then_some(tail);
        Ok(Some(super::Loaded { record, tail }))
    }

    async fn commit(&self, commits: &[Commit]) -> Vec<Result<Committed, CommitError>> {
        let mut notices = Vec::new();
        let results = {
            let mut inner = self.lock();
            commits.iter().map(|commit| self.apply(&mut inner, commit, &mut notices)).collect()
        };
        self.notify(notices);
        results
    }

    async fn write(&self, writes: &[SessionWrite]) -> Vec<Result<Wrote, CommitError>> {
        let mut notices = Vec::new();
        let results = {
            let mut inner = self.lock();
            writes
                .iter()
                .map(|write| {
                    if let Some(append) = &write.append {
                        self.append(&mut inner, &write.key, append, &mut notices)?;
                    }
                    let committed = match &write.commit {
                        Some(commit) => Some(self.apply(&mut inner, commit, &mut notices)?),
                        None => None,
                    };
                    Ok(Wrote { committed })
                })
                .collect()
        };
        self.notify(notices);
        results
    }

    async fn decide(&self, key: &SessionKey, relay_id: &str, decision: &str) -> Result<Decided, StoreError> {
        let woken = {
            let mut inner = self.lock();
            let Some(session) = inner.sessions.get_mut(key) else { return Ok(Decided::Missing) };
            match session.relays.get_mut(relay_id) {
                Some(slot @ None) => *slot = Some(decision.to_string()),
                _ => return Ok(Decided::AlreadyDecided),
            }
            let owner = session.owner.clone();
            inner.wakes(key, &owner)
        };
        if woken {
            self.notify(vec![Notice::Wake { key: key.clone() }]);
        }
        Ok(Decided::Recorded)
    }

    async fn request_cancel(&self, key: &SessionKey) -> Result<CancelRequest, StoreError> {
        let woken = {
            let mut inner = self.lock();
            let Some(session) = inner.sessions.get_mut(key) else { return Ok(CancelRequest::Missing) };
            if !super::is_active(&session.status) {
                return Ok(CancelRequest::NotRunning(session.status.clone()));
            }
            session.cancel = true;
            let owner = session.owner.clone();
            inner.wakes(key, &owner)
        };
        if woken {
            self.notify(vec![Notice::Wake { key: key.clone() }]);
        }
        Ok(CancelRequest::Recorded)
    }
}

#[async_trait]
impl EventLog for MemoryStore {
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
impl Replicas for MemoryStore {
    async fn heartbeat(&self, instance: &str, ttl: Duration) -> Result<bool, StoreError> {
        let now = Instant::now();
        let before = self.lock().replicas.insert(instance.to_string(), now + ttl);
        Ok(before.is_some_and(|deadline| deadline > now))
    }

    async fn alive(&self, instance: &str) -> Result<bool, StoreError> {
        let now = Instant::now();
        Ok(self.lock().replicas.get(instance).is_some_and(|deadline| *deadline > now))
    }

    async fn leave(&self, instance: &str) -> Result<(), StoreError> {
        let now = Instant::now();
        self.lock().replicas.insert(instance.to_string(), now);
        Ok(())
    }

    async fn dead(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        let now = Instant::now();
        let inner = self.lock();
        let mut dead: Vec<(&Instant, &String)> =
            inner.replicas.iter().filter(|(_, deadline)| **deadline <= now).map(|(i, d)| (d, i)).collect();
        dead.sort();
        Ok(dead.into_iter().take(limit).map(|(_, instance)| instance.clone()).collect())
    }

    async fn owned(&self, instance: &str, limit: usize) -> Result<Vec<SessionKey>, StoreError> {
        let inner = self.lock();
        Ok(inner.owned.get(instance).map(|keys| keys.iter().take(limit).cloned().collect()).unwrap_or_default())
    }

    async fn disown(&self, instance: &str, keys: &[SessionKey]) -> Result<(), StoreError> {
        let now = Instant::now();
        let mut inner = self.lock();
        let empty = match inner.owned.get_mut(instance) {
            Some(owned) => {
                for key in keys {
                    owned.remove(key);
                }
                owned.is_empty()
            }
            None => true,
        };
        if empty {
            inner.owned.remove(instance);
            if inner.replicas.get(instance).is_some_and(|deadline| *deadline <= now) {
                inner.replicas.remove(instance);
            }
        }
        Ok(())
    }

    async fn orphans(&self, limit: usize) -> Result<Vec<SessionKey>, StoreError> {
        Ok(self.lock().orphans.iter().take(limit).cloned().collect())
    }

    async fn adopted(&self, key: &SessionKey) -> Result<(), StoreError> {
        self.lock().orphans.remove(key);
        Ok(())
    }
}

#[async_trait]
impl RelayIndex for MemoryStore {
    async fn put_relay(&self, relay_id: &str, key: &SessionKey) -> Result<(), StoreError> {
        self.lock().relays.insert((key.tenant.clone(), relay_id.to_string()), key.clone());
        Ok(())
    }

    async fn get_relay(&self, tenant: &str, relay_id: &str) -> Result<Option<SessionKey>, StoreError> {
        Ok(self.lock().relays.get(&(Arc::from(tenant), relay_id.to_string())).cloned())
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

    async fn listen(&self, instance: &str) -> Result<(), StoreError> {
        self.lock().listening.insert(instance.to_string());
        Ok(())
    }

    async fn follow(&self, key: &SessionKey, instance: &str, following: bool) -> Result<(), StoreError> {
        let followed = {
            let mut inner = self.lock();
            let Some(owner) = inner.sessions.get(key).map(|s| s.owner.clone()) else { return Ok(()) };
            let counts = inner.followers.entry(key.clone()).or_default();
            let count = counts.entry(instance.to_string()).or_default();
            let now = if following { *count + 1 } else { count.saturating_sub(1) };
            *count = now;
            if now == 0 {
                counts.remove(instance);
            }
            // The owner learns of a new follower elsewhere on its own
            // channel.
            following && now == 1 && owner != instance && inner.listening.contains(&owner)
        };
        if followed {
            self.notify(vec![Notice::Followed { key: key.clone() }]);
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

#[async_trait]
impl super::Annexes for MemoryStore {
    async fn put_annex(&self, key: &SessionKey, name: &str, value: &str, keep: Duration) -> Result<(), StoreError> {
        let field = super::annex::kept_for(value, keep);
        if let Some(session) = self.lock().sessions.get_mut(key) {
            session.annexes.insert(name.to_string(), field);
        }
        Ok(())
    }

    async fn get_annex(&self, key: &SessionKey, name: &str) -> Result<Option<String>, StoreError> {
        let inner = self.lock();
        let field = inner.sessions.get(key).and_then(|session| session.annexes.get(name));
        Ok(field.map(String::as_str).and_then(super::annex::still_kept))
    }
}

#[async_trait]
impl super::WorkspaceStore for MemoryStore {
    async fn files(&self, key: &SessionKey) -> Result<Vec<super::StoredFile>, StoreError> {
        let inner = self.lock();
        let Some(session) = inner.sessions.get(key) else { return Ok(Vec::new()) };
        session
            .files
            .iter()
            .map(|(path, entry)| {
                let content = session.blobs.get(&entry.digest).cloned().ok_or_else(|| {
                    StoreError::Corrupt(format!("the workspace names a blob it does not hold ({path})"))
                })?;
                Ok(super::StoredFile { path: path.clone(), entry: entry.clone(), content })
            })
            .collect()
    }
}
