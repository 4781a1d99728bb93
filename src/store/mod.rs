//! Where sessions live: the small traits every backend implements, and the
//! choice of backend from the configuration (Redis when `store.redis_url` is
//! set, a Redis Cluster when `store.redis_cluster` is, the in-memory store
//! otherwise).
//!
//! This module owns persistence only. The store keeps opaque documents,
//! messages and event payloads (JSON text); what a session *means* (its
//! state machine) belongs to `domain`, who may touch it and who runs it to
//! `sessions`. What the store guarantees: a [`Commit`] — a session's new
//! state, its new messages and the events they imply — is applied whole or
//! not at all, fenced by its owner's tenure, so the log and the state never
//! disagree.
//!
//! Every operation is timed (`timed.rs`, a decorator over the backend).
//!
//! Every key is tenant-scoped ([`SessionKey`]), so a lookup with the wrong
//! tenant finds nothing, exactly like a missing session. Which sessions a
//! subject has, and deleting one, is the [`Catalog`] (`catalog.rs`).

mod annex;
mod catalog;
mod memory;
mod redis;
mod redis_notify;
mod redis_notify_cluster;
mod redis_watches;
mod timed;
mod workspace;

use std::{fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use tokio::sync::mpsc;

use self::timed::Timed;
use crate::{config::StoreConfig, telemetry::metrics::Metrics};

pub use self::{
    annex::Annexes,
    catalog::{Catalog, Deleted, Deletion, ListPosition, ListScope, Listed, Listing},
    memory::MemoryStore,
    redis::RedisStore,
    workspace::{FileEntry, StoredFile, WorkspaceStore, WorkspaceWrite},
};

/// A session's identity: its tenant and its id. Every store key derives from
/// both, so tenants can never address each other's sessions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionKey {
    pub tenant: Arc<str>,
    pub id: Arc<str>,
}

impl SessionKey {
    pub fn new(tenant: impl Into<Arc<str>>, id: impl Into<Arc<str>>) -> Self {
        Self { tenant: tenant.into(), id: id.into() }
    }

    /// `tenant/id`: how a key is written inside the store (relay index,
    /// lease index). Tenant ids cannot contain `/` (config validation).
    pub fn to_member(&self) -> String {
        [&*self.tenant, "/", &self.id].concat()
    }

    pub fn from_member(member: &str) -> Option<Self> {
        let (tenant, id) = member.split_once('/')?;
        (!tenant.is_empty() && !id.is_empty()).then(|| Self::new(tenant, id))
    }
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant, self.id)
    }
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    /// The backend did not answer (connection refused, timeout, pool exhausted).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The backend answered something this code cannot read.
    #[error("store data is corrupt: {0}")]
    Corrupt(String),
}

impl StoreError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unavailable(_) => "store_unavailable",
            Self::Corrupt(_) => "store_corrupt",
        }
    }
}

/// A session as stored: its state document, the fields that fence writes
/// to it, its inbox (what other replicas left for its owner), and, when
/// asked for, its conversation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// 1 after create, +1 per commit that writes the document.
    pub version: u64,
    /// The state document (JSON text).
    pub doc: String,
    /// The instance that runs it (see [`Replicas`]), if any.
    pub owner: Option<String>,
    /// The instance that ran it last (or runs it).
    pub last_owner: Option<String>,
    /// +1 at every change of owner: a new tenure.
    pub epoch: u64,
    /// The newest event's seq (0 before the first).
    pub last_seq: u64,
    /// `last_seq` as of the last commit that wrote the document: events
    /// after it are the output of a step in progress.
    pub checkpoint_seq: u64,
    /// The seq before the current (or last) turn's stream began: a client
    /// that joins a running turn replays it from there.
    pub turn_start_seq: u64,
    /// Messages in the conversation.
    pub message_count: u64,
    /// The conversation (JSON text each), when the load asked for it.
    pub messages: Option<Vec<String>>,
    /// A cancel request waits for the owner.
    pub cancel_requested: bool,
    /// Live relays: id → the decision recorded for it (JSON text), or
    /// `None` while undecided.
    pub relays: Vec<(String, Option<String>)>,
}

/// A session read with the events after its checkpoint
/// ([`SessionStore::load_with_tail`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    pub record: Record,
    /// The events with seq > `record.checkpoint_seq`, ascending, gapless;
    /// `None` when there were more than asked for.
    pub tail: Option<Vec<StoredEvent>>,
}

/// What a commit requires of the stored session, checked atomically with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// The session must not exist (create).
    Absent,
    /// A session whose id the creating replica made (a random UUID no one
    /// held before this commit): it cannot exist, so a store may write it
    /// without reading first (the Redis store sends plain commands in one
    /// `MULTI` instead of the commit script); otherwise as `Absent`.
    New,
    /// Nothing changed since it was read: same version, owner, epoch and
    /// last seq (a command from a request, a takeover).
    Unchanged { version: u64, owner: Option<String>, epoch: u64, last_seq: u64 },
    /// `instance` still owns it in tenure `epoch`, and this is the tenure's
    /// commit number `n` (1, 2, …). A commit whose `n` was already applied
    /// (a retry after a lost answer) is answered as committed again and
    /// changes nothing. `after`: the seq the owner has written up to (its
    /// [`Append`]s included); a log that ends before it (an append of the
    /// same round did not land) refuses the commit for now
    /// ([`StoreError::Unavailable`]: the round is sent again).
    Owner { instance: String, epoch: u64, n: u64, after: u64 },
}

/// The tenure a session's creation begins (`lua/commit.lua`: one above
/// nothing; logs of older builds have tenure 0 ids).
pub const FIRST_EPOCH: u64 = 1;

impl Fence {
    /// Whether the commit creates the session.
    pub fn creates(&self) -> bool {
        matches!(self, Fence::Absent | Fence::New)
    }
}

/// What a commit does to the session's owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerChange {
    Keep,
    /// Becomes the owner: a new tenure (epoch + 1, commit numbers from 1).
    Acquire(String),
    /// Nobody owns it. An active session without an owner is an orphan:
    /// any replica takes it over at once.
    Release,
}

/// The conversation's change.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MessagesWrite {
    #[default]
    Keep,
    /// JSON text of each message, after the stored ones.
    Append(Vec<String>),
    /// The whole conversation, rewritten (compaction).
    Replace(Vec<String>),
}

/// One transition of one session, written atomically: the state document,
/// the conversation's new messages, the events it implies, the owner
/// change and the inbox entries it took up — all or nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub key: SessionKey,
    pub fence: Fence,
    pub owner: OwnerChange,
    /// The new state document and its status (`None`: events only).
    pub state: Option<StateWrite>,
    pub messages: MessagesWrite,
    /// Event payloads (JSON text), in order; they get the next seqs.
    pub events: Vec<String>,
    /// Relays any replica may now decide.
    pub open_relays: Vec<String>,
    /// Relays taken up (decided, timed out) or gone with the turn.
    pub close_relays: Vec<String>,
    /// The cancel request was taken up.
    pub clear_cancel: bool,
    /// Its events begin a turn's stream (a new turn, a resume): the seq
    /// before them is recorded (`Record::turn_start_seq`).
    pub turn_start: bool,
    /// The instance writing (named in the append notice).
    pub by: String,
    /// A creating commit's list entries (a hint, see [`Catalog`]).
    pub listing: Option<Listing>,
    /// Files the transition changed (a tool's, or a seed at creation).
    pub workspace: Option<WorkspaceWrite>,
    /// A commit that writes the state or changes the owner renews the
    /// session's keys (they expire `store.session_ttl_secs` after it);
    /// `false` leaves their expiry as it is (a key the commit makes gets
    /// one): the writer's commit of a tenure whose keys were renewed
    /// moments before (a short turn's end), see `sessions/writer.rs`.
    pub renew: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateWrite {
    pub doc: String,
    /// The document's status, kept beside it for the store's own checks.
    pub status: &'static str,
}

/// Whether a stored status is a turn in progress (running, or waiting for
/// a relay decision): a session that must have an owner, or be an orphan.
pub fn is_active(status: &str) -> bool {
    matches!(status, "running" | "awaiting_relay")
}

impl Commit {
    /// A commit of `key` by `by` under `fence` that changes nothing yet.
    pub fn new(key: SessionKey, fence: Fence, by: impl Into<String>) -> Self {
        Self {
            key,
            fence,
            owner: OwnerChange::Keep,
            state: None,
            messages: MessagesWrite::Keep,
            events: Vec::new(),
            open_relays: Vec::new(),
            close_relays: Vec::new(),
            clear_cancel: false,
            turn_start: false,
            by: by.into(),
            listing: None,
            workspace: None,
            renew: true,
        }
    }

    /// Whether it renews the session's keys: it writes the state or
    /// changes the owner, and is not told to leave the expiry alone
    /// (`lua/commit.lua` decides the same).
    pub fn renews(&self) -> bool {
        self.renew && (self.state.is_some() || self.owner != OwnerChange::Keep)
    }
}

/// A commit that was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Committed {
    pub version: u64,
    pub epoch: u64,
    /// Seqs of the commit's events (`first_seq > last_seq` when it had none).
    pub first_seq: u64,
    pub last_seq: u64,
    /// An instance other than the committing one follows the session (as
    /// the commit found it): its owner's appends must be announced.
    pub followed_elsewhere: bool,
}

/// Streamed events of a running session (text and tool-argument deltas,
/// progress), appended by its owner without a change of state: no script
/// and no read, one plain append per event. The fence is in the entries'
/// ids: each carries the tenure's epoch in its high part, and a takeover
/// moves the log's top to its own epoch first, so the store itself refuses
/// every later append of an older tenure. The owner numbers the events
/// (it writes all of its tenure's events, so it knows where the log ends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Append {
    /// The owner and its tenure.
    pub instance: Arc<str>,
    pub epoch: u64,
    /// The seq of `events[0]`; the others follow it.
    pub first_seq: u64,
    /// Event payloads (JSON text), in order.
    pub events: Vec<String>,
    /// Announce the events ([`Notice::Appended`]): another instance
    /// follows the session.
    pub announce: bool,
}

impl Append {
    /// The seq of the last event.
    pub fn last_seq(&self) -> u64 {
        self.first_seq + self.events.len() as u64 - 1
    }
}

/// One session's part of the writer's round ([`SessionStore::write`]): its
/// appends, then its commit, applied in that order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionWrite {
    pub key: SessionKey,
    pub append: Option<Append>,
    /// A transition under [`Fence::Owner`], after the appends.
    pub commit: Option<Commit>,
}

/// What a [`SessionWrite`] did: its appends landed (or had, before a lost
/// answer), and its commit was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wrote {
    pub committed: Option<Committed>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {
    /// The fence did not hold; nothing was written.
    #[error("{0}")]
    Conflict(Conflict),
    #[error(transparent)]
    Store(#[from] StoreError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Conflict {
    /// `Fence::Absent`, but the session exists.
    #[error("the session already exists")]
    Exists,
    /// `Fence::Unchanged`, but it changed (or is gone).
    #[error("the session changed since it was read")]
    Changed,
    /// `Fence::Owner`, but another instance (or a newer tenure) owns it.
    #[error("this replica no longer runs the session")]
    Fenced,
}

/// What became of a relay decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decided {
    /// Recorded for the owner to take up.
    Recorded,
    /// Already decided (taken up or not).
    AlreadyDecided,
    /// No such session.
    Missing,
}

/// What became of a cancel request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelRequest {
    /// Recorded; the owner is woken and ends the turn.
    Recorded,
    /// Nothing runs: the session's status (the caller decides what to do).
    NotRunning(String),
    Missing,
}

/// Sessions: read, committed, and the two things anybody may leave in a
/// running session's inbox.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// The session, with its conversation when `history`.
    async fn load(&self, key: &SessionKey, history: bool) -> Result<Option<Record>, StoreError>;

    /// The session with its conversation, and the events after its
    /// checkpoint (the step in progress, which a takeover cuts) when at
    /// most `limit` follow it, in the same atomic read where the backend
    /// allows: a takeover's one read. The tail is `None` when more follow
    /// (the caller pages them with [`EventLog::read_after`]).
    async fn load_with_tail(&self, key: &SessionKey, limit: usize) -> Result<Option<Loaded>, StoreError>;

    /// Applies each commit atomically and independently (in one round trip
    /// where the backend allows); results in the same order. Commits of one
    /// session must not be in the same call.
    async fn commit(&self, commits: &[Commit]) -> Vec<Result<Committed, CommitError>>;

    /// The writer's round: every session's appends and then its commit, in
    /// one round trip where the backend allows; results in the same order,
    /// one per session (sessions must not repeat). An append whose entry is
    /// already there from an earlier attempt of the same tenure counts as
    /// applied; one after the tenure ended is [`Conflict::Fenced`], and so
    /// is one to a session that is gone.
    async fn write(&self, writes: &[SessionWrite]) -> Vec<Result<Wrote, CommitError>>;

    /// Records `decision` (JSON text) for live relay `relay_id`, and wakes
    /// the owner.
    async fn decide(&self, key: &SessionKey, relay_id: &str, decision: &str) -> Result<Decided, StoreError>;

    /// Asks the owner of a running session to cancel its turn.
    async fn request_cancel(&self, key: &SessionKey) -> Result<CancelRequest, StoreError>;
}

/// One appended event as stored: its sequence number and payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    pub seq: u64,
    /// JSON text, as committed.
    pub payload: String,
}

/// A page of the log after some cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRange {
    /// Events with seq > cursor, ascending, gapless, at most `limit`.
    pub events: Vec<StoredEvent>,
    /// The oldest seq still retained (0 when the log is empty).
    pub first_seq: u64,
    /// The newest seq ever appended (0 when nothing was appended).
    pub last_seq: u64,
}

/// Reading the per-session event log (written by [`SessionStore::commit`]):
/// gapless sequence numbers 1, 2, 3, …
#[async_trait]
pub trait EventLog: Send + Sync {
    /// Events with seq > `after`, at most `limit`, plus the retained bounds.
    /// If `after + 1 < first_seq` the caller's cursor is past retention.
    async fn read_after(&self, key: &SessionKey, after: u64, limit: usize) -> Result<LogRange, StoreError>;
}

/// Which instances are alive, which sessions each owns, and which sessions
/// nobody owns. An instance is one run of a replica process; it is alive
/// while it beats within the TTL. This is the only lease: one heartbeat per
/// instance, however many sessions it runs. A session's owner is fenced by
/// its tenure ([`Fence::Owner`]), so an instance presumed dead too early
/// cannot write over the one that took its sessions.
#[async_trait]
pub trait Replicas: Send + Sync {
    /// `instance` is alive for `ttl` more. False when its previous beat had
    /// lapsed (others may have taken its sessions).
    async fn heartbeat(&self, instance: &str, ttl: Duration) -> Result<bool, StoreError>;

    /// Whether `instance` beat within its TTL.
    async fn alive(&self, instance: &str) -> Result<bool, StoreError>;

    /// `instance` is gone now (end of a drain): its sessions, if any are
    /// left, are taken over at the next sweep.
    async fn leave(&self, instance: &str) -> Result<(), StoreError>;

    /// Instances whose beat lapsed, at most `limit`.
    async fn dead(&self, limit: usize) -> Result<Vec<String>, StoreError>;

    /// Sessions `instance` was recorded to own, at most `limit` of them.
    async fn owned(&self, instance: &str, limit: usize) -> Result<Vec<SessionKey>, StoreError>;

    /// `instance` no longer owns `keys`; a dead instance that owns nothing
    /// more is forgotten.
    async fn disown(&self, instance: &str, keys: &[SessionKey]) -> Result<(), StoreError>;

    /// Active sessions nobody owns (handed off), at most `limit`.
    async fn orphans(&self, limit: usize) -> Result<Vec<SessionKey>, StoreError>;

    /// `key` is no longer an orphan.
    async fn adopted(&self, key: &SessionKey) -> Result<(), StoreError>;

    /// The death hints of other instances: for each instance that recorded
    /// a liveness subscription (`only`: of these alone), its record and
    /// whether the subscription is gone while the node that held it is
    /// still the one it recorded ([`Liveness::silent`]). Empty where the
    /// store has no such signal (one process's memory) or it was found
    /// unreliable (a proxy that does not pass subscriptions through).
    async fn liveness(&self, _only: Option<&[String]>) -> Result<Vec<Liveness>, StoreError> {
        Ok(Vec::new())
    }
}

/// One instance's death hint ([`Replicas::liveness`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Liveness {
    pub instance: String,
    /// What the instance recorded when it last subscribed: the node and its
    /// subscription's generation. A new value means it subscribed again
    /// (it lives).
    pub record: String,
    /// Nobody listens on its channel, on the node it recorded: its
    /// connection to the store closed (the process died, or lost the
    /// connection). Never true across a node's restart or failover (the
    /// node is another).
    pub silent: bool,
    /// Nobody listens on its channel, and the node answering is not the
    /// one it recorded (restarted, failed over, or not a primary): the
    /// store's nodes changed under it.
    pub moved: bool,
}

/// Relay id → session, for the relay endpoint that names only the relay.
#[async_trait]
pub trait RelayIndex: Send + Sync {
    /// Indexes `relay_id` (a relay, or a resume hint) under `key`'s tenant.
    async fn put_relay(&self, relay_id: &str, key: &SessionKey) -> Result<(), StoreError>;
    /// The session of `tenant` that `relay_id` names; another tenant's
    /// index is not read.
    async fn get_relay(&self, tenant: &str, relay_id: &str) -> Result<Option<SessionKey>, StoreError>;
}

/// A wake-up heard on this replica's one subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// The session's log now ends at `last_seq`; `by` is the instance that
    /// committed.
    Appended { key: SessionKey, last_seq: u64, by: Option<String> },
    /// Something was left for the session's owner: a relay decision, a
    /// cancel request, or another instance took it over.
    Wake { key: SessionKey },
    /// Another instance began following a session this one runs: its
    /// appends must be announced from now on.
    Followed { key: SessionKey },
    /// A session was handed off: whoever can should take it over now.
    Orphaned,
    /// The subscription was re-established: anything may have been missed,
    /// so every watcher should re-read.
    Resubscribed,
}

/// The per-replica subscription: one connection, many sessions.
#[async_trait]
pub trait Notifications: Send + Sync {
    /// Start hearing about `key` (counted: `watch` twice needs `unwatch` twice).
    async fn watch(&self, key: &SessionKey) -> Result<(), StoreError>;
    async fn unwatch(&self, key: &SessionKey) -> Result<(), StoreError>;

    /// Listens to `instance`'s own channel from now on: wake-ups for the
    /// sessions it runs ([`Notice::Wake`], [`Notice::Followed`]), so an
    /// owner needs no watch of each session.
    async fn listen(&self, instance: &str) -> Result<(), StoreError>;

    /// `instance` follows `key` (`true`) or stops one follow (`false`;
    /// counted, each start has its stop): a commit announces its events
    /// ([`Notice::Appended`]) only while some instance other than the
    /// committing one follows. An instance that dies following leaves
    /// announcements on (harmless: never a missing one).
    async fn follow(&self, key: &SessionKey, instance: &str, following: bool) -> Result<(), StoreError>;
}

/// The answer to one rate-limited request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateDecision {
    /// Allowed; this many more may follow at once.
    Allowed { remaining: u32 },
    /// Refused; the next one will be allowed after this long.
    Limited { retry_after: Duration },
}

/// Per-tenant quotas counted across replicas.
#[async_trait]
pub trait Quotas: Send + Sync {
    /// One request of `tenant`, at `rate` per second with `burst`.
    async fn take_request(&self, tenant: &str, rate: u32, burst: u32) -> Result<RateDecision, StoreError>;

    /// Counts `session_id` as running for `tenant` until `ttl` passes without
    /// another call; `max` (if any) bounds how many may run at once. False
    /// when the tenant is at its maximum. Calling again refreshes it.
    async fn acquire_slot(
        &self,
        tenant: &str,
        session_id: &str,
        max: Option<u32>,
        ttl: Duration,
    ) -> Result<bool, StoreError>;

    async fn release_slot(&self, tenant: &str, session_id: &str) -> Result<(), StoreError>;

    /// Reserves `tokens` of the tenant's budget of `limit` model tokens for
    /// the current minute; `None` when that would pass the limit (nothing
    /// is counted then).
    async fn reserve_tokens(&self, tenant: &str, tokens: u64, limit: u64) -> Result<Option<TokenWindow>, StoreError>;

    /// Corrects a reservation in `window` by `delta` (what was used minus
    /// what was reserved; negative gives tokens back). Never refused.
    async fn correct_tokens(&self, tenant: &str, window: TokenWindow, delta: i64) -> Result<(), StoreError>;
}

/// The minute a token reservation counts against (minutes since the Unix
/// epoch). A correction names it, so a model call that ends after the minute
/// turned is corrected where it was reserved, not in the next minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenWindow(pub u64);

impl TokenWindow {
    pub fn now() -> Self {
        Self(crate::domain::now_ms() / 60_000)
    }

    /// Whole seconds (1 to 60) until the current window ends and the
    /// budget refills.
    pub fn seconds_left() -> u64 {
        60 - (crate::domain::now_ms() / 1000) % 60
    }
}

/// Liveness of the backend, for `/readyz`.
#[async_trait]
pub trait Health: Send + Sync {
    async fn ping(&self) -> Result<(), StoreError>;
}

/// The store handles the rest of the app uses, all backed by one backend.
#[derive(Clone)]
pub struct Store {
    pub sessions: Arc<dyn SessionStore>,
    pub log: Arc<dyn EventLog>,
    pub replicas: Arc<dyn Replicas>,
    pub relays: Arc<dyn RelayIndex>,
    pub notifications: Arc<dyn Notifications>,
    pub quotas: Arc<dyn Quotas>,
    pub catalog: Arc<dyn Catalog>,
    pub workspaces: Arc<dyn WorkspaceStore>,
    pub annexes: Arc<dyn Annexes>,
    pub health: Arc<dyn Health>,
    /// `"redis"` or `"memory"`, for logs.
    pub kind: &'static str,
}

/// Bound of the channel that carries [`Notice`]s to the session layer.
pub const NOTICE_CHANNEL: usize = 1024;

impl Store {
    /// Builds the configured backend. Notices heard by this replica's
    /// subscription are sent to `notices`. Connecting to Redis is lazy: the
    /// app starts while Redis is down and `/readyz` says so.
    /// Every operation is timed into `metrics`.
    pub fn open(
        config: &StoreConfig,
        notices: mpsc::Sender<Notice>,
        metrics: Arc<Metrics>,
    ) -> Result<Self, StoreError> {
        match &config.redis {
            Some(target) => {
                let backend = Arc::new(RedisStore::open(target, config, notices, metrics.clone())?);
                Ok(Self::from_backend(Arc::new(Timed::new(backend, metrics, "redis")), "redis"))
            }
            None => {
                let backend = Arc::new(MemoryStore::new(config, notices));
                Ok(Self::from_backend(Arc::new(Timed::new(backend, metrics, "memory")), "memory"))
            }
        }
    }

    fn from_backend<B>(backend: Arc<B>, kind: &'static str) -> Self
    where
        B: SessionStore
            + EventLog
            + Replicas
            + RelayIndex
            + Notifications
            + Quotas
            + Catalog
            + WorkspaceStore
            + Annexes
            + Health
            + 'static,
    {
        Self {
            sessions: backend.clone(),
            log: backend.clone(),
            replicas: backend.clone(),
            relays: backend.clone(),
            notifications: backend.clone(),
            quotas: backend.clone(),
            catalog: backend.clone(),
            workspaces: backend.clone(),
            annexes: backend.clone(),
            health: backend,
            kind,
        }
    }
}
