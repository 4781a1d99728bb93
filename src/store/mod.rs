//! Where sessions live: the small traits every backend implements, and the
//! choice of backend from the configuration (Redis when `store.redis_url` is
//! set, the in-memory store otherwise).
//!
//! This module owns persistence only. The store keeps opaque documents and
//! event payloads (JSON text); what a session *means* (its state machine,
//! who may touch it, takeover) belongs to `sessions`.
//!
//! Every operation is timed (`timed.rs`, a decorator over the backend).
//!
//! Every key is tenant-scoped ([`SessionKey`]), so a lookup with the wrong
//! tenant finds nothing, exactly like a missing session.

mod memory;
mod redis;
mod redis_notify;
mod timed;

use std::{fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use tokio::sync::mpsc;

use self::timed::Timed;
use crate::{config::StoreConfig, telemetry::metrics::Metrics};

pub use self::{memory::MemoryStore, redis::RedisStore};

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
        format!("{}/{}", self.tenant, self.id)
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
    /// A fenced write was refused: this replica does not hold the session's lease.
    #[error("this replica does not hold the lease")]
    NotLeaseholder,
    /// The backend answered something this code cannot read.
    #[error("store data is corrupt: {0}")]
    Corrupt(String),
}

impl StoreError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unavailable(_) => "store_unavailable",
            Self::NotLeaseholder => "not_leaseholder",
            Self::Corrupt(_) => "store_corrupt",
        }
    }
}

/// A state document and its version (1 after create, +1 per successful CAS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    pub version: u64,
    /// The document, JSON text.
    pub doc: String,
}

/// What a state write does to the session's lease, atomically with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseOp {
    /// Leave the lease alone (e.g. a relay decision written by a non-owner).
    None,
    /// Take the lease for `replica` for `ttl`; it must be free, expired, or
    /// already held by `replica`. Otherwise the write is refused.
    Acquire { replica: String, ttl: Duration },
    /// The lease must be held by `replica` (fencing); it is extended by `ttl`.
    Require { replica: String, ttl: Duration },
    /// The lease must be held by `replica`, or be free; it is deleted.
    Release { replica: String },
}

/// The outcome of a conditional state write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Written; the new version.
    Written(u64),
    /// The version did not match (for create: the session already exists).
    VersionConflict,
    /// The lease condition of the [`LeaseOp`] did not hold.
    LeaseConflict,
}

/// Session state documents, versioned, with compare-and-set.
#[async_trait]
pub trait StateStore: Send + Sync {
    /// Creates the document at version 1, applying `lease` atomically.
    /// `VersionConflict` when the session already exists.
    async fn create(&self, key: &SessionKey, doc: &str, lease: LeaseOp) -> Result<WriteOutcome, StoreError>;

    async fn load(&self, key: &SessionKey) -> Result<Option<Versioned>, StoreError>;

    /// Replaces the document if its version is still `expected` (new version
    /// `expected + 1`), applying `lease` atomically: both conditions hold or
    /// nothing is written. Refreshes the session TTL.
    async fn compare_and_set(
        &self,
        key: &SessionKey,
        expected: u64,
        doc: &str,
        lease: LeaseOp,
    ) -> Result<WriteOutcome, StoreError>;
}

/// One appended event as stored: its sequence number and payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    pub seq: u64,
    /// JSON text, as given to `append`.
    pub payload: String,
}

/// Events for one session in one append.
#[derive(Debug, Clone)]
pub struct AppendBatch {
    pub key: SessionKey,
    /// Fencing: only the lease holder may append.
    pub replica: String,
    pub payloads: Vec<String>,
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

/// The per-session event log: gapless sequence numbers 1, 2, 3, …
#[async_trait]
pub trait EventLog: Send + Sync {
    /// Appends every batch (for many sessions, in one round trip where the
    /// backend allows). Each batch is atomic and fenced by the lease; the
    /// result per batch is the seq of its first and last event. After a
    /// successful append, watchers of the session are notified with its new
    /// last seq. The log is trimmed to `event_log_max_len` and its TTL
    /// refreshed.
    async fn append(&self, batches: &[AppendBatch]) -> Vec<Result<(u64, u64), StoreError>>;

    /// Events with seq > `after`, at most `limit`, plus the retained bounds.
    /// If `after + 1 < first_seq` the caller's cursor is past retention.
    async fn read_after(&self, key: &SessionKey, after: u64, limit: usize) -> Result<LogRange, StoreError>;
}

/// Session leases and the index of sessions that hold one. The lease is
/// mostly taken and released through [`StateStore`] writes ([`LeaseOp`]);
/// these are the operations that stand alone.
#[async_trait]
pub trait Leases: Send + Sync {
    /// Extends the lease if `replica` holds it; false if it does not.
    async fn renew(&self, key: &SessionKey, replica: &str, ttl: Duration) -> Result<bool, StoreError>;

    async fn owner(&self, key: &SessionKey) -> Result<Option<String>, StoreError>;

    /// Sessions whose lease deadline (as last written by acquire or renew)
    /// has passed: candidates for takeover. At most `limit`.
    async fn expired(&self, limit: usize) -> Result<Vec<SessionKey>, StoreError>;

    /// Drops `key` from the lease index (after it stopped running).
    async fn forget(&self, key: &SessionKey) -> Result<(), StoreError>;
}

/// Relay id → session, for the relay endpoint that names only the relay.
#[async_trait]
pub trait RelayIndex: Send + Sync {
    async fn put_relay(&self, relay_id: &str, key: &SessionKey) -> Result<(), StoreError>;
    async fn get_relay(&self, relay_id: &str) -> Result<Option<SessionKey>, StoreError>;
}

/// A wake-up heard on this replica's one subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// The session's log now ends at `last_seq`; `by` is the replica that
    /// appended (`None` from a replica too old to say).
    Appended { key: SessionKey, last_seq: u64, by: Option<String> },
    /// Something was written to the session's state that its owner should
    /// look at (a relay decision, a cancel).
    Wake { key: SessionKey },
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
    /// Announces a state change to whichever replica watches `key`.
    async fn wake(&self, key: &SessionKey) -> Result<(), StoreError>;
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
        Self(crate::protocol::events::now_ms() / 60_000)
    }

    /// Whole seconds (1 to 60) until the current window ends and the
    /// budget refills.
    pub fn seconds_left() -> u64 {
        60 - (crate::protocol::events::now_ms() / 1000) % 60
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
    pub state: Arc<dyn StateStore>,
    pub log: Arc<dyn EventLog>,
    pub leases: Arc<dyn Leases>,
    pub relays: Arc<dyn RelayIndex>,
    pub notifications: Arc<dyn Notifications>,
    pub quotas: Arc<dyn Quotas>,
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
        match &config.redis_url {
            Some(url) => {
                let backend = Arc::new(RedisStore::open(url, config, notices)?);
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
        B: StateStore + EventLog + Leases + RelayIndex + Notifications + Quotas + Health + 'static,
    {
        Self {
            state: backend.clone(),
            log: backend.clone(),
            leases: backend.clone(),
            relays: backend.clone(),
            notifications: backend.clone(),
            quotas: backend.clone(),
            health: backend,
            kind,
        }
    }
}
