//! The Redis store, shared by every replica: sessions (state, conversation,
//! event log), instance heartbeats and ownership, the relay index, quotas,
//! and wake-ups (through [`redis_notify`](super::redis_notify), which owns
//! the subscription).
//!
//! Layout (hash tags keep one session's keys in one cluster slot):
//! - `{prefix}{t:<tenant>:s:<id>}:state` — hash: `v`, `doc`, `st`, `own`,
//!   `ep`, `cn`, `seq`, `ck`, `ts` (the seq before the current turn's first
//!   event), `lo` (the last owner), `nm`, `r:<relay_id>`, `cancel`, and `eps`, the
//!   tenures' first seqs (`<epoch>:<first seq>;…`, newest last, so a reader
//!   finds the id of a seq; `lua/commit.lua`), and the instances following
//!   the session (`fw`, `f:<instance>`; `lua/follow.lua`)
//! - `{prefix}{t:<tenant>:s:<id>}:msgs` — list, the conversation (JSON each)
//! - `{prefix}{t:<tenant>:s:<id>}:events` — stream, entry `<epoch>-<seq>`
//!   (`0-<seq>` as older builds wrote it), field `e`; the owner appends with
//!   plain `XADD`s, fenced by the id (`redis/sessions.rs`)
//! - `{prefix}{t:<tenant>:s:<id>}:ws` — hash, the workspace's manifest: path →
//!   `digest:size:mode`; `…:blobs` — hash, SHA-256 hex → content (`redis/workspace.rs`)
//! - `{prefix}{t:<tenant>:s:<id>}:annex` — hash, name → `<deadline ms>:<value>`:
//!   documents kept beside the session for a while (`redis/annex.rs`)
//! - `{prefix}replicas` — zset instance → heartbeat deadline (server ms)
//! - `{prefix}owned:<instance>:{b<k>}` — set of `tenant/id` the instance
//!   owns, in 16 buckets by the session (`{prefix}owned:<instance>`, one
//!   set, before them: still read)
//! - `{prefix}orphans:{b<k>}` — set of `tenant/id`: active, owned by nobody,
//!   in the same buckets (`{prefix}orphans` before them: still read)
//! - `{prefix}{t:<tenant>}:relay:<relay_id>` — `tenant/id`: relays and resume
//!   hints, in the tenant's slot (`{prefix}relay:<relay_id>` before: still read)
//! - `{prefix}{t:<tenant>}:subj:<subject>:sessions`, `{prefix}{t:<tenant>}:sessions`
//!   — zsets of list positions, the catalog's lists (`redis/catalog.rs`)
//! - `{prefix}rl:<tenant>` — GCRA arrival time; `{prefix}slots:<tenant>` — zset of
//!   running sessions → deadline; `{prefix}tpm:<tenant>:<minute>` — tokens used
//! - channel `{prefix}{t:<tenant>:s:<id>}:n` — `e:<last_seq>:<instance>`
//!   after commits and announced appends while another instance follows,
//!   `w` wakes (on a cluster a shard channel: `SPUBLISH` from the scripts
//!   on the session's node, `SSUBSCRIBE` there); channel `{prefix}orphans`
//!   — `o`
//! - channel `{prefix}i:<instance>` — the instance's own wake-ups: `w:` and
//!   the session (a decision, a cancel, a commit by another instance for a
//!   session it runs), `f:` and the session (another instance now follows
//!   one it runs, so its appends are announced); published by the scripts
//!   that cause them, so an owner subscribes once, not once per session
//! - channel `{prefix}live:{<instance>}` — never published on: the
//!   instance's liveness subscription, whose subscriber count is its death
//!   hint (on a cluster a shard channel); `{prefix}live` — hash instance →
//!   `<node> <generation>`, the node that held it when last confirmed
//!   ([`liveness`])
//!
//! Every conditional write is one Lua script (`lua/*.lua`), because a
//! check-then-write from the client would race with other replicas; a script
//! touches the keys of ONE hash tag only, so it stays valid on a cluster.
//! The ownership indexes (owned sets, orphans) live in other slots and are
//! written by plain commands in the same pipeline as the commit they follow;
//! they are hints for the takeover sweep, which re-checks every session it
//! finds against its state hash, derived from that hash and written again
//! from it when a cluster node's failure lost one ([`repair`]). Tenant ids cannot contain `:` or `/`
//! (config validation), so no two (tenant, id) pairs share a key.
//!
//! Commands go through one connection ([`conn`]): on one Redis a
//! `ConnectionManager` (a multiplexed connection shared by every caller,
//! pipelining concurrent commands with no check-out round trip, reconnected
//! in the background); on a Redis Cluster (`store.redis_cluster`) the redis
//! crate's cluster connection, which routes every command to its slot's
//! node. Their response and connect timeouts are [`COMMAND_TIMEOUT`], so a
//! frozen Redis turns into errors (and 503s) quickly instead of hung
//! requests. Anything that blocks (pub/sub) uses a connection made for it.
//! Batches that span slots (a group commit of several sessions with their
//! index hints, a delete's clean-up, a list's documents) go through
//! [`conn::Spread`]: one pipeline on one Redis, each command routed to its
//! slot's node on a cluster.

mod annex;
mod catalog;
mod conn;
mod liveness;
mod log;
mod quotas;
mod repair;
mod replicas;
mod sessions;
mod workspace;

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use redis::{
    ErrorKind, RedisError, Script,
    aio::{ConnectionManager, ConnectionManagerConfig},
    cluster::ClusterClientBuilder,
};
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;

use self::{
    conn::{Conn, LazyCluster, Spread},
    repair::{Repairer, Repairs},
};
use super::{Health, Notice, Notifications, RelayIndex, SessionKey, StoreError, redis_notify::Subscriber};
use crate::{
    config::{RedisTarget, RedisTls, StoreConfig},
    telemetry::metrics::Metrics,
};

/// How long a command may take, and a connection attempt. Short: commands
/// are small, and a request that cannot reach Redis should get its 503
/// within a couple of seconds.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

/// Buckets of the ownership and orphan indexes: each bucket's sets share a
/// hash tag (`{b<k>}`), so on a cluster the index writes of every replica
/// and tenant spread over this many slots instead of one key per replica
/// (and one for all orphans) that a single node would take every write of.
const INDEX_BUCKETS: u32 = 16;

/// The Lua scripts, hashed once (EVALSHA sends only the hash).
struct Scripts {
    commit: Script,
    decide: Script,
    cancel: Script,
    delete: Script,
    heartbeat: Script,
    replicas_dead: Script,
    forget_replica: Script,
    read_after: Script,
    follow: Script,
    rate_gcra: Script,
    slot_acquire: Script,
    tokens_take: Script,
    workspace_files: Script,
}

impl Scripts {
    fn new() -> Self {
        Self {
            commit: Script::new(include_str!("lua/commit.lua")),
            decide: Script::new(include_str!("lua/decide.lua")),
            cancel: Script::new(include_str!("lua/cancel.lua")),
            delete: Script::new(include_str!("lua/delete.lua")),
            heartbeat: Script::new(include_str!("lua/heartbeat.lua")),
            replicas_dead: Script::new(include_str!("lua/replicas_dead.lua")),
            forget_replica: Script::new(include_str!("lua/forget_replica.lua")),
            read_after: Script::new(include_str!("lua/read_after.lua")),
            follow: Script::new(include_str!("lua/follow.lua")),
            rate_gcra: Script::new(include_str!("lua/rate_gcra.lua")),
            slot_acquire: Script::new(include_str!("lua/slot_acquire.lua")),
            tokens_take: Script::new(include_str!("lua/tokens_take.lua")),
            workspace_files: Script::new(include_str!("lua/workspace_files.lua")),
        }
    }
}

/// Key and channel names (see the module docs).
struct Keys {
    prefix: String,
}

impl Keys {
    /// Joined by `concat` (one allocation of the exact length): made per
    /// round trip, a stream's per token, where `format!` cost a few times
    /// more.
    fn session(&self, key: &SessionKey, suffix: &str) -> String {
        [&self.prefix, "{t:", &key.tenant, ":s:", &key.id, "}:", suffix].concat()
    }
    fn state(&self, key: &SessionKey) -> String {
        self.session(key, "state")
    }
    fn messages(&self, key: &SessionKey) -> String {
        self.session(key, "msgs")
    }
    fn events(&self, key: &SessionKey) -> String {
        self.session(key, "events")
    }
    fn manifest(&self, key: &SessionKey) -> String {
        self.session(key, "ws")
    }
    fn blobs(&self, key: &SessionKey) -> String {
        self.session(key, "blobs")
    }
    fn annex(&self, key: &SessionKey) -> String {
        self.session(key, "annex")
    }
    fn replicas(&self) -> String {
        format!("{}replicas", self.prefix)
    }
    /// The bucket of `key`'s entries in the ownership and orphan indexes.
    fn bucket(key: &SessionKey) -> u32 {
        // FNV-1a: stable across builds and platforms (the bucket is part of
        // a key name every replica must agree on).
        let hash = key.to_member().bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
        hash % INDEX_BUCKETS
    }
    /// `instance`'s owned sessions of bucket `bucket`.
    fn owned(&self, instance: &str, bucket: u32) -> String {
        // Plain copies: two of these are made per chat.
        [&*self.prefix, "owned:", instance, ":{b", itoa::Buffer::new().format(bucket), "}"].concat()
    }
    fn owned_of(&self, instance: &str, key: &SessionKey) -> String {
        self.owned(instance, Self::bucket(key))
    }
    /// Orphans of bucket `bucket`.
    fn orphans(&self, bucket: u32) -> String {
        [&*self.prefix, "orphans:{b", itoa::Buffer::new().format(bucket), "}"].concat()
    }
    fn orphans_of(&self, key: &SessionKey) -> String {
        self.orphans(Self::bucket(key))
    }
    /// The one-key indexes of builds before the buckets: still read (and
    /// cleaned) by the sweep, so a replica of an older build that dies
    /// during a rolling upgrade is taken over.
    fn owned_legacy(&self, instance: &str) -> String {
        format!("{}owned:{instance}", self.prefix)
    }
    fn orphans_legacy(&self) -> String {
        format!("{}orphans", self.prefix)
    }
    /// In the tenant's slot, like its lists: a lookup names the tenant.
    fn relay(&self, tenant: &str, relay_id: &str) -> String {
        format!("{}{{t:{tenant}}}:relay:{relay_id}", self.prefix)
    }
    /// The one key per id of builds before the tenant's tag: still read
    /// (for the caller's tenant only) and deleted, until its TTL (the
    /// session TTL) has passed for entries an older replica wrote.
    fn relay_legacy(&self, relay_id: &str) -> String {
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
    /// Tagged like the session's keys: on a cluster, a shard channel of
    /// the session's slot, published from the commit script on its node.
    fn channel(&self, key: &SessionKey) -> String {
        self.session(key, "n")
    }
    fn orphans_channel(&self) -> String {
        format!("{}orphans", self.prefix)
    }
    /// What an instance's own channel is named after (scripts append the
    /// instance).
    fn instance_channel_prefix(&self) -> String {
        [&*self.prefix, "i:"].concat()
    }
    /// An instance's own channel: wake-ups for the sessions it runs (a
    /// decision, a cancel, a takeover, a new follower elsewhere), so an
    /// owner needs no subscription per session. A plain channel, heard
    /// from every node of a cluster.
    fn instance_channel(&self, instance: &str) -> String {
        format!("{}{instance}", self.instance_channel_prefix())
    }
    /// An instance's liveness channel ([`liveness`]): never published on,
    /// its subscriber count is the hint. Tagged by the instance: on a
    /// cluster a shard channel, spread over the slots.
    fn live_channel(&self, instance: &str) -> String {
        format!("{}live:{{{instance}}}", self.prefix)
    }
    /// Hash instance → `<node> <generation>`: where each instance's
    /// liveness subscription was last confirmed.
    fn live(&self) -> String {
        format!("{}live", self.prefix)
    }
}

pub struct RedisStore {
    connection: Conn,
    keys: Arc<Keys>,
    session_ttl_ms: u64,
    max_len: u64,
    /// How commit scripts announce: `PUBLISH` on one Redis, `SPUBLISH` (a
    /// shard channel, heard on the session's node only) on a cluster.
    publish: &'static str,
    /// `store.wait_replicas` and its timeout in ms (0 replicas: no WAIT).
    wait_replicas: (u32, u64),
    scripts: Scripts,
    subscriber: Subscriber,
    /// Index hints lost on their way, and the task writing them again.
    repairs: Arc<Repairs>,
    _repairer: AbortOnDropHandle<()>,
    /// Death hints ([`liveness`]), their connection, and the task
    /// recording this instance's.
    hints: Arc<liveness::Hints>,
    /// `store.liveness_check_ms` is on: the liveness subscription is held
    /// and recorded.
    hints_wanted: bool,
    probes: Conn,
    recorder: std::sync::Mutex<Option<AbortOnDropHandle<()>>>,
}

impl RedisStore {
    /// Builds the connection and spawns the subscription task; connects to
    /// nothing yet (both connect in the background or on first use), so
    /// the app starts while Redis is down. Must be called inside a tokio
    /// runtime.
    pub fn open(
        target: &RedisTarget,
        config: &StoreConfig,
        notices: mpsc::Sender<Notice>,
        metrics: Arc<Metrics>,
    ) -> Result<Self, StoreError> {
        let keys = Arc::new(Keys { prefix: config.key_prefix.clone() });
        let orphans = keys.orphans_channel();
        let (connection, probes, subscriber, publish) = match target {
            RedisTarget::Node(url) => {
                let client = match certificates(&config.tls) {
                    Some(certificates) => redis::Client::build_with_tls(url.as_str(), certificates),
                    None => redis::Client::open(url.as_str()),
                }
                .map_err(map_err)?;
                let manager = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(COMMAND_TIMEOUT))
                    .set_connection_timeout(Some(COMMAND_TIMEOUT))
                    // Reconnection is retried by the next command anyway; a
                    // short series keeps a command from waiting out a long
                    // backoff.
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_millis(500));
                let manager = ConnectionManager::new_lazy_with_config(client.clone(), manager).map_err(map_err)?;
                let connection = Conn::Node(manager);
                (connection.clone(), connection, Subscriber::spawn(client, notices, orphans), "PUBLISH")
            }
            RedisTarget::Cluster(seeds) => {
                let builder = || {
                    let builder = ClusterClientBuilder::new(seeds.iter().map(String::as_str));
                    match certificates(&config.tls) {
                        Some(certificates) => builder.certs(certificates),
                        None => builder,
                    }
                    .connection_timeout(COMMAND_TIMEOUT)
                    .response_timeout(COMMAND_TIMEOUT)
                    // Room for a redirection or a topology refresh
                    // after a failover, within a bounded wait.
                    .overall_response_timeout(Some(2 * COMMAND_TIMEOUT))
                    .min_retry_wait(50)
                    .max_retry_wait(500)
                };
                let client = builder().build().map_err(map_err)?;
                let subscriber = Subscriber::spawn_cluster(builder(), notices, orphans)?;
                // The death hints' probes name nodes (a slot's primary),
                // which may be down or stale during a failover: on a
                // connection of their own, so their failures and the
                // topology refreshes they cause never delay the store's
                // commands.
                let probes = Conn::Cluster(Arc::new(LazyCluster::new(builder().build().map_err(map_err)?)));
                (Conn::Cluster(Arc::new(LazyCluster::new(client))), probes, subscriber, "SPUBLISH")
            }
        };
        let repairs = Arc::new(Repairs::new(metrics));
        let repairer = Repairer { conn: connection.clone(), keys: keys.clone(), repairs: repairs.clone() };
        Ok(Self {
            connection,
            keys,
            session_ttl_ms: millis(config.session_ttl),
            max_len: config.event_log_max_len,
            publish,
            wait_replicas: (config.wait_replicas, millis(config.wait_replicas_timeout)),
            scripts: Scripts::new(),
            subscriber,
            repairs,
            _repairer: AbortOnDropHandle::new(tokio::spawn(repairer.run())),
            hints: Arc::default(),
            hints_wanted: config.liveness_check.is_some(),
            probes,
            recorder: std::sync::Mutex::new(None),
        })
    }

    fn connection(&self) -> Conn {
        self.connection.clone()
    }

    /// Sends `spread` on `conn` ([`Conn::send`]); hints lost on the way are
    /// queued to be written again ([`repair`]).
    async fn send(&self, conn: &mut Conn, spread: Spread) -> redis::RedisResult<Vec<redis::RedisResult<redis::Value>>> {
        let sent = conn.send(spread).await?;
        self.repairs.add(sent.lost);
        Ok(sent.replies)
    }
}

#[async_trait]
impl RelayIndex for RedisStore {
    async fn put_relay(&self, relay_id: &str, key: &SessionKey) -> Result<(), StoreError> {
        redis::cmd("SET")
            .arg(self.keys.relay(&key.tenant, relay_id))
            .arg(key.to_member())
            .arg("PX")
            .arg(self.session_ttl_ms)
            .query_async::<()>(&mut self.connection())
            .await
            .map_err(map_err)
    }

    async fn get_relay(&self, tenant: &str, relay_id: &str) -> Result<Option<SessionKey>, StoreError> {
        // Both keys in one batch (two slots on a cluster); the tenant's wins.
        let mut spread = Spread::default();
        spread.answered().cmd("GET").arg(self.keys.relay(tenant, relay_id));
        spread.answered().cmd("GET").arg(self.keys.relay_legacy(relay_id));
        let mut conn = self.connection();
        for reply in self.send(&mut conn, spread).await.map_err(map_err)? {
            let member: Option<String> = reply.and_then(|v| Ok(redis::from_redis_value(v)?)).map_err(map_err)?;
            let Some(member) = member else { continue };
            let key = SessionKey::from_member(&member)
                .ok_or_else(|| StoreError::Corrupt(format!("relay target {member:?}")))?;
            if *key.tenant == *tenant {
                return Ok(Some(key));
            }
        }
        Ok(None)
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

    async fn listen(&self, instance: &str) -> Result<(), StoreError> {
        if !self.hints_wanted {
            // No death hints: no liveness subscription to hold or record.
            return self.subscriber.listen(self.keys.instance_channel(instance), None).await;
        }
        let mut recorder = self.recorder.lock().expect("not poisoned").take();
        if recorder.is_none() {
            self.hints.set_instance(instance);
            let record = liveness::record(
                self.probes.clone(),
                self.keys.clone(),
                self.hints.clone(),
                self.subscriber.subscribed(),
            );
            recorder = Some(AbortOnDropHandle::new(tokio::spawn(record)));
        }
        *self.recorder.lock().expect("not poisoned") = recorder;
        self.subscriber.listen(self.keys.instance_channel(instance), Some(self.keys.live_channel(instance))).await
    }

    async fn follow(&self, key: &SessionKey, instance: &str, following: bool) -> Result<(), StoreError> {
        let _: i64 = self
            .scripts
            .follow
            .key(self.keys.state(key))
            .arg(instance)
            .arg(if following { "1" } else { "0" })
            .arg(self.keys.instance_channel_prefix())
            .arg(key.to_member())
            .invoke_async(&mut self.connection())
            .await
            .map_err(map_err)?;
        Ok(())
    }
}

#[async_trait]
impl Health for RedisStore {
    async fn ping(&self) -> Result<(), StoreError> {
        redis::cmd("PING").query_async::<String>(&mut self.connection()).await.map(drop).map_err(map_err)
    }
}

/// `[store.tls]` as the redis crate takes it (`None`: nothing configured,
/// the system's roots for `rediss://`).
fn certificates(tls: &RedisTls) -> Option<redis::TlsCertificates> {
    if tls == &RedisTls::default() {
        return None;
    }
    Some(redis::TlsCertificates {
        client_tls: tls
            .client
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig { client_cert: cert.clone(), client_key: key.clone() }),
        root_cert: tls.ca.clone(),
    })
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
        assert_eq!(keys.messages(&key), "sb:{t:acme:s:s1}:msgs");
        assert_eq!(keys.events(&key), "sb:{t:acme:s:s1}:events");
        assert_eq!(keys.replicas(), "sb:replicas");
        assert_eq!(keys.owned("a#1", 3), "sb:owned:a#1:{b3}");
        assert_eq!(keys.orphans(15), "sb:orphans:{b15}");
        // A session's bucket is the same for every replica and every build.
        assert_eq!(Keys::bucket(&key), Keys::bucket(&SessionKey::new("acme", "s1")));
        assert_eq!(keys.owned_of("a#1", &key), keys.owned("a#1", Keys::bucket(&key)));
        assert_eq!(keys.relay("acme", "r1"), "sb:{t:acme}:relay:r1");
        assert_eq!(keys.relay_legacy("r1"), "sb:relay:r1");
        assert_eq!(keys.channel(&key), "sb:{t:acme:s:s1}:n");
        assert_eq!(keys.instance_channel("a#1"), "sb:i:a#1");
        assert_eq!(keys.live_channel("a#1"), "sb:live:{a#1}");
        assert_eq!(keys.live(), "sb:live");
    }

    #[tokio::test]
    async fn a_tenants_lists_share_the_tenants_hash_tag() {
        let (tx, _rx) = mpsc::channel(1);
        let config = StoreConfig::for_unit_tests();
        let target = RedisTarget::Node("redis://127.0.0.1:1".into());
        let store = RedisStore::open(&target, &config, tx, Default::default()).unwrap();
        let subject = crate::store::ListScope::Subject { tenant: "acme".into(), subject: "alice".into() };
        assert_eq!(store.list_key(&subject), "sb:{t:acme}:subj:alice:sessions");
        assert_eq!(store.list_key(&crate::store::ListScope::Tenant("acme".into())), "sb:{t:acme}:sessions");
    }

    #[test]
    fn expiries_are_whole_positive_milliseconds() {
        assert_eq!(millis(Duration::ZERO), 1);
        assert_eq!(millis(Duration::from_micros(1500)), 1);
        assert_eq!(millis(Duration::from_secs(60)), 60_000);
    }
}
