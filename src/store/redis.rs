//! The Redis store, shared by every replica: state documents, event logs,
//! leases, the lease and relay indexes, and wake-ups (through
//! [`redis_notify`](super::redis_notify), which owns the subscription).
//!
//! Layout (hash tags keep one session's keys in one cluster slot):
//! - `{prefix}{t:<tenant>:s:<id>}:state` — hash `v` (version), `doc` (JSON)
//! - `{prefix}{t:<tenant>:s:<id>}:events` — stream, entry `0-<seq>`, field `e`
//! - `{prefix}{t:<tenant>:s:<id>}:lease` — owner replica id, PX lease TTL
//! - `{prefix}leases` — zset `tenant/id` → lease deadline (server ms)
//! - `{prefix}relay:<relay_id>` — `tenant/id`
//! - `{prefix}rl:<tenant>` — GCRA arrival time; `{prefix}slots:<tenant>` — zset of
//!   running sessions → deadline; `{prefix}tpm:<tenant>:<minute>` — tokens used
//! - channel `{prefix}n:<tenant>/<id>` — `e:<last_seq>` after appends, `w` wakes
//!
//! Every conditional write is one Lua script (`lua/*.lua`), because a
//! check-then-write from the client would race with other replicas; a script
//! touches the keys of ONE session only, so it stays valid on a cluster. The
//! lease index and relay keys live in other slots and are written with
//! separate commands. Tenant ids cannot contain `:` or `/` (config
//! validation), so no two (tenant, id) pairs share a key.
//!
//! Commands go through a deadpool-redis pool of multiplexed connections.
//! Their response timeout is redis-rs's default (500 ms), right for short
//! commands; anything that blocks (pub/sub, `XREAD BLOCK`) must use a
//! connection made for it, never one from this pool.
//!
//! The event log (appends, reads) is in `redis/log.rs`.

mod log;
mod quotas;

use std::time::Duration;

use async_trait::async_trait;
use deadpool_redis::{Config as PoolConfig, Pool, Runtime};
use redis::{ErrorKind, RedisError, Script};
use tokio::sync::mpsc;

use super::{
    Health, LeaseOp, Leases, Notice, Notifications, RelayIndex, SessionKey, StateStore, StoreError, Versioned,
    WriteOutcome, redis_notify::Subscriber,
};
use crate::config::StoreConfig;

/// How long a command waits for a free pooled connection or a new one.
const POOL_TIMEOUT: Duration = Duration::from_secs(2);

/// The Lua scripts, hashed once (EVALSHA sends only the hash).
struct Scripts {
    state_write: Script,
    lease_renew: Script,
    index_touch: Script,
    index_expired: Script,
    append: Script,
    read_after: Script,
    rate_gcra: Script,
    slot_acquire: Script,
    tokens_take: Script,
}

impl Scripts {
    fn new() -> Self {
        Self {
            state_write: Script::new(include_str!("lua/state_write.lua")),
            lease_renew: Script::new(include_str!("lua/lease_renew.lua")),
            index_touch: Script::new(include_str!("lua/lease_index_touch.lua")),
            index_expired: Script::new(include_str!("lua/lease_index_expired.lua")),
            append: Script::new(include_str!("lua/append.lua")),
            read_after: Script::new(include_str!("lua/read_after.lua")),
            rate_gcra: Script::new(include_str!("lua/rate_gcra.lua")),
            slot_acquire: Script::new(include_str!("lua/slot_acquire.lua")),
            tokens_take: Script::new(include_str!("lua/tokens_take.lua")),
        }
    }
}

/// Key and channel names (see the module docs).
struct Keys {
    prefix: String,
}

impl Keys {
    fn session(&self, key: &SessionKey, suffix: &str) -> String {
        format!("{}{{t:{}:s:{}}}:{suffix}", self.prefix, key.tenant, key.id)
    }
    fn state(&self, key: &SessionKey) -> String {
        self.session(key, "state")
    }
    fn events(&self, key: &SessionKey) -> String {
        self.session(key, "events")
    }
    fn lease(&self, key: &SessionKey) -> String {
        self.session(key, "lease")
    }
    fn lease_index(&self) -> String {
        format!("{}leases", self.prefix)
    }
    fn relay(&self, relay_id: &str) -> String {
        format!("{}relay:{relay_id}", self.prefix)
    }
    fn rate(&self, tenant: &str) -> String {
        format!("{}rl:{tenant}", self.prefix)
    }
    fn slots(&self, tenant: &str) -> String {
        format!("{}slots:{tenant}", self.prefix)
    }
    fn tokens(&self, tenant: &str, minute: u64) -> String {
        format!("{}tpm:{tenant}:{minute}", self.prefix)
    }
    fn channel(&self, key: &SessionKey) -> String {
        format!("{}n:{}", self.prefix, key.to_member())
    }
}

pub struct RedisStore {
    pool: Pool,
    keys: Keys,
    session_ttl_ms: u64,
    max_len: u64,
    scripts: Scripts,
    subscriber: Subscriber,
}

impl RedisStore {
    /// Builds the pool and spawns the subscription task; connects to nothing
    /// yet (both connect in the background or on first use), so the app
    /// starts while Redis is down. Must be called inside a tokio runtime.
    pub fn open(url: &str, config: &StoreConfig, notices: mpsc::Sender<Notice>) -> Result<Self, StoreError> {
        let mut pool_config = PoolConfig::from_url(url);
        let mut limits = pool_config.get_pool_config();
        limits.timeouts.wait = Some(POOL_TIMEOUT);
        limits.timeouts.create = Some(POOL_TIMEOUT);
        limits.timeouts.recycle = Some(POOL_TIMEOUT);
        pool_config.pool = Some(limits);
        let pool =
            pool_config.create_pool(Some(Runtime::Tokio1)).map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let client = redis::Client::open(url).map_err(map_err)?;
        Ok(Self {
            pool,
            keys: Keys { prefix: config.key_prefix.clone() },
            session_ttl_ms: millis(config.session_ttl),
            max_len: config.event_log_max_len,
            scripts: Scripts::new(),
            subscriber: Subscriber::spawn(client, notices),
        })
    }

    async fn connection(&self) -> Result<deadpool_redis::Connection, StoreError> {
        self.pool.get().await.map_err(|e| StoreError::Unavailable(e.to_string()))
    }

    /// Runs `state_write.lua`; `mode` is `create` or `cas`.
    async fn write_state(
        &self,
        key: &SessionKey,
        mode: &str,
        expected: u64,
        doc: &str,
        lease: &LeaseOp,
    ) -> Result<WriteOutcome, StoreError> {
        let (op, replica, ttl) = match lease {
            LeaseOp::None => ("none", "", 0),
            LeaseOp::Acquire { replica, ttl } => ("acquire", replica.as_str(), millis(*ttl)),
            LeaseOp::Require { replica, ttl } => ("require", replica.as_str(), millis(*ttl)),
            LeaseOp::Release { replica } => ("release", replica.as_str(), 0),
        };
        let mut conn = self.connection().await?;
        let mut script = self.scripts.state_write.prepare_invoke();
        script
            .key(self.keys.state(key))
            .key(self.keys.lease(key))
            .key(self.keys.events(key))
            .arg(mode)
            .arg(expected)
            .arg(doc)
            .arg(self.session_ttl_ms)
            .arg(op)
            .arg(replica)
            .arg(ttl);
        let code: i64 = script.invoke_async(&mut conn).await.map_err(map_err)?;
        let outcome = match code {
            -1 => WriteOutcome::VersionConflict,
            -2 => WriteOutcome::LeaseConflict,
            version if version > 0 => WriteOutcome::Written(version as u64),
            other => {
                return Err(StoreError::Corrupt(format!("state script answered {other}")));
            }
        };
        if matches!(outcome, WriteOutcome::Written(_)) {
            match lease {
                LeaseOp::None => {}
                LeaseOp::Acquire { ttl, .. } | LeaseOp::Require { ttl, .. } => {
                    self.index_touch(&mut conn, key, *ttl).await;
                }
                LeaseOp::Release { .. } => self.index_remove(&mut conn, key).await,
            }
        }
        Ok(outcome)
    }

    /// Records the lease deadline in the index. A failure is logged, not
    /// returned: the state write it follows did happen, and the owner's next
    /// renew writes the deadline again.
    async fn index_touch(&self, conn: &mut deadpool_redis::Connection, key: &SessionKey, ttl: Duration) {
        let result: Result<i64, _> = self
            .scripts
            .index_touch
            .key(self.keys.lease_index())
            .arg(key.to_member())
            .arg(millis(ttl))
            .invoke_async(conn)
            .await;
        if let Err(e) = result {
            tracing::warn!(session = %key, error = %e, "lease index not updated");
        }
    }

    async fn index_remove(&self, conn: &mut deadpool_redis::Connection, key: &SessionKey) {
        let result: Result<i64, _> =
            redis::cmd("ZREM").arg(self.keys.lease_index()).arg(key.to_member()).query_async(conn).await;
        if let Err(e) = result {
            tracing::warn!(session = %key, error = %e, "lease index entry not removed");
        }
    }
}

#[async_trait]
impl StateStore for RedisStore {
    async fn create(&self, key: &SessionKey, doc: &str, lease: LeaseOp) -> Result<WriteOutcome, StoreError> {
        self.write_state(key, "create", 0, doc, &lease).await
    }

    async fn load(&self, key: &SessionKey) -> Result<Option<Versioned>, StoreError> {
        let mut conn = self.connection().await?;
        let (version, doc): (Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(self.keys.state(key))
            .arg("v")
            .arg("doc")
            .query_async(&mut conn)
            .await
            .map_err(map_err)?;
        match (version, doc) {
            (None, None) => Ok(None),
            (Some(version), Some(doc)) => {
                let version = version.parse().map_err(|_| StoreError::Corrupt(format!("state version {version:?}")))?;
                Ok(Some(Versioned { version, doc }))
            }
            _ => Err(StoreError::Corrupt("state hash lacks v or doc".to_string())),
        }
    }

    async fn compare_and_set(
        &self,
        key: &SessionKey,
        expected: u64,
        doc: &str,
        lease: LeaseOp,
    ) -> Result<WriteOutcome, StoreError> {
        self.write_state(key, "cas", expected, doc, &lease).await
    }
}

#[async_trait]
impl Leases for RedisStore {
    async fn renew(&self, key: &SessionKey, replica: &str, ttl: Duration) -> Result<bool, StoreError> {
        let mut conn = self.connection().await?;
        let renewed: i64 = self
            .scripts
            .lease_renew
            .key(self.keys.lease(key))
            .arg(replica)
            .arg(millis(ttl))
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        if renewed == 1 {
            self.index_touch(&mut conn, key, ttl).await;
        }
        Ok(renewed == 1)
    }

    async fn owner(&self, key: &SessionKey) -> Result<Option<String>, StoreError> {
        let mut conn = self.connection().await?;
        redis::cmd("GET").arg(self.keys.lease(key)).query_async(&mut conn).await.map_err(map_err)
    }

    async fn expired(&self, limit: usize) -> Result<Vec<SessionKey>, StoreError> {
        let mut conn = self.connection().await?;
        let members: Vec<String> = self
            .scripts
            .index_expired
            .key(self.keys.lease_index())
            .arg(limit.min(i64::MAX as usize))
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        Ok(members.iter().filter_map(|m| SessionKey::from_member(m)).collect())
    }

    async fn forget(&self, key: &SessionKey) -> Result<(), StoreError> {
        let mut conn = self.connection().await?;
        redis::cmd("ZREM")
            .arg(self.keys.lease_index())
            .arg(key.to_member())
            .query_async::<i64>(&mut conn)
            .await
            .map(drop)
            .map_err(map_err)
    }
}

#[async_trait]
impl RelayIndex for RedisStore {
    async fn put_relay(&self, relay_id: &str, key: &SessionKey) -> Result<(), StoreError> {
        let mut conn = self.connection().await?;
        redis::cmd("SET")
            .arg(self.keys.relay(relay_id))
            .arg(key.to_member())
            .arg("PX")
            .arg(self.session_ttl_ms)
            .query_async::<()>(&mut conn)
            .await
            .map_err(map_err)
    }

    async fn get_relay(&self, relay_id: &str) -> Result<Option<SessionKey>, StoreError> {
        let mut conn = self.connection().await?;
        let member: Option<String> =
            redis::cmd("GET").arg(self.keys.relay(relay_id)).query_async(&mut conn).await.map_err(map_err)?;
        member
            .map(|m| SessionKey::from_member(&m).ok_or_else(|| StoreError::Corrupt(format!("relay target {m:?}"))))
            .transpose()
    }
}

#[async_trait]
impl Notifications for RedisStore {
    async fn watch(&self, key: &SessionKey) -> Result<(), StoreError> {
        self.subscriber.watch(self.keys.channel(key), key.clone()).await
    }

    async fn unwatch(&self, key: &SessionKey) -> Result<(), StoreError> {
        self.subscriber.unwatch(self.keys.channel(key)).await
    }

    async fn wake(&self, key: &SessionKey) -> Result<(), StoreError> {
        let mut conn = self.connection().await?;
        redis::cmd("PUBLISH")
            .arg(self.keys.channel(key))
            .arg("w")
            .query_async::<i64>(&mut conn)
            .await
            .map(drop)
            .map_err(map_err)
    }
}

#[async_trait]
impl Health for RedisStore {
    async fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.connection().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await.map(drop).map_err(map_err)
    }
}

/// Replies this code cannot read (or a key of the wrong type) are corrupt
/// data; everything else means Redis did not answer properly. Error texts
/// name the failure, never the URL (which may carry a password).
fn map_err(error: RedisError) -> StoreError {
    match error.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => StoreError::Corrupt(error.to_string()),
        _ if error.code() == Some("WRONGTYPE") => StoreError::Corrupt(error.to_string()),
        _ => StoreError::Unavailable(error.to_string()),
    }
}

/// Redis rejects a zero expiry, so durations round up to at least 1 ms.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sessions_keys_share_a_hash_tag() {
        let keys = Keys { prefix: "sb:".to_string() };
        let key = SessionKey::new("acme", "s1");
        assert_eq!(keys.state(&key), "sb:{t:acme:s:s1}:state");
        assert_eq!(keys.events(&key), "sb:{t:acme:s:s1}:events");
        assert_eq!(keys.lease(&key), "sb:{t:acme:s:s1}:lease");
        assert_eq!(keys.lease_index(), "sb:leases");
        assert_eq!(keys.relay("r1"), "sb:relay:r1");
        assert_eq!(keys.channel(&key), "sb:n:acme/s1");
    }

    #[test]
    fn expiries_are_whole_positive_milliseconds() {
        assert_eq!(millis(Duration::ZERO), 1);
        assert_eq!(millis(Duration::from_micros(1500)), 1);
        assert_eq!(millis(Duration::from_secs(60)), 60_000);
    }
}
