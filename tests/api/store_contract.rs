//! The store contract: every behaviour the session layer relies on, proved
//! against both backends. `contract!(name)` turns the function `name(Backend)`
//! into the tests `name::memory` and `name::redis`. Each test opens its own
//! store with its own key prefix, so they run in parallel against one Redis.
//!
//! This file holds the harness and helpers; the behaviours are grouped in
//! `store_contract/` (commits, the log, instances and ownership,
//! notifications, quotas, the catalog, annexes), plus the Redis-only tests (outages, reconnection,
//! backoff, lost answers) in `redis_only.rs`.

use std::time::Duration;

use switchboard::{
    config::{RedisTarget, StoreConfig},
    store::{
        Commit, CommitError, Committed, Conflict, Fence, MessagesWrite, Notice, OwnerChange, Record, SessionKey,
        StateWrite, Store, StoreError,
    },
};
use tokio::{
    sync::mpsc,
    time::{Instant, sleep, timeout_at},
};

use crate::helpers::{redis_cluster_seeds, redis_url, unique_prefix};

#[derive(Clone, Copy)]
enum Backend {
    Memory,
    Redis,
    /// The three-primary Redis Cluster `.ci/run` starts.
    Cluster,
}

struct Harness {
    store: Store,
    notices: mpsc::Receiver<Notice>,
    /// The store's key prefix (the test's own).
    prefix: String,
}

impl Backend {
    fn open(self) -> Harness {
        self.open_with_max_len(1000)
    }

    fn open_with_max_len(self, event_log_max_len: u64) -> Harness {
        let target = match self {
            Backend::Memory => None,
            Backend::Redis => Some(RedisTarget::Node(redis_url())),
            Backend::Cluster => Some(RedisTarget::Cluster(redis_cluster_seeds())),
        };
        open_store(target, event_log_max_len)
    }
}

fn open_store(redis: Option<RedisTarget>, event_log_max_len: u64) -> Harness {
    open_config(store_config(redis, event_log_max_len))
}

/// A store configuration with a prefix of the test's own.
fn store_config(redis: Option<RedisTarget>, event_log_max_len: u64) -> StoreConfig {
    StoreConfig {
        redis,
        tls: Default::default(),
        wait_replicas: 0,
        wait_replicas_timeout: Duration::from_millis(500),
        commit_linger: Duration::ZERO,
        append_tick: Duration::from_millis(1),
        key_prefix: unique_prefix(),
        session_ttl: Duration::from_secs(60),
        event_log_max_len,
        lease_ttl: Duration::from_secs(10),
        liveness_check: Some(Duration::from_millis(100)),
        hold_notice: Duration::from_secs(5),
        hold_max: Duration::from_secs(60),
    }
}

fn open_config(config: StoreConfig) -> Harness {
    open_config_with(config, Default::default())
}

/// The store counting into `metrics`.
fn open_config_with(config: StoreConfig, metrics: std::sync::Arc<switchboard::telemetry::metrics::Metrics>) -> Harness {
    let prefix = config.key_prefix.clone();
    let (tx, notices) = mpsc::channel(switchboard::store::NOTICE_CHANNEL);
    let store = Store::open(&config, tx, metrics).expect("the store opens");
    Harness { store, notices, prefix }
}

macro_rules! contract {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$name(super::Backend::Memory).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$name(super::Backend::Redis).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis_cluster() {
                super::$name(super::Backend::Cluster).await
            }
        }
    )*};
}

fn key(tenant: &str, id: &str) -> SessionKey {
    SessionKey::new(tenant, id)
}

fn numbered(from: u64, to: u64) -> Vec<String> {
    (from..=to).map(|n| format!("{{\"n\":{n}}}")).collect()
}

fn state(doc: &str, status: &'static str) -> Option<StateWrite> {
    Some(StateWrite { doc: doc.to_string(), status })
}

async fn commit_one(store: &Store, commit: Commit) -> Result<Committed, CommitError> {
    store.sessions.commit(std::slice::from_ref(&commit)).await.remove(0)
}

async fn load(store: &Store, key: &SessionKey) -> Record {
    store.sessions.load(key, true).await.expect("load works").expect("the session exists")
}

/// The fence of a command on `key` as it is stored now.
async fn unchanged(store: &Store, key: &SessionKey) -> Fence {
    let r = load(store, key).await;
    Fence::Unchanged { version: r.version, owner: r.owner, epoch: r.epoch, last_seq: r.last_seq }
}

/// The tenure of `instance` over a session: its owner commits, numbered.
struct Tenure {
    key: SessionKey,
    instance: String,
    epoch: u64,
    n: u64,
    /// Where the log ends as far as the owner knows (its commits' `after`).
    seq: u64,
}

impl Tenure {
    /// The next owner commit (not yet sent).
    fn next(&mut self) -> Commit {
        self.n += 1;
        Commit::new(
            self.key.clone(),
            Fence::Owner { instance: self.instance.clone(), epoch: self.epoch, n: self.n, after: self.seq },
            &self.instance,
        )
    }

    async fn append(&mut self, store: &Store, from: u64, to: u64) {
        let mut commit = self.next();
        commit.events = numbered(from, to);
        let committed = commit_one(store, commit).await.expect("the owner's commit goes through");
        assert_eq!((committed.first_seq, committed.last_seq), (from, to));
        self.seq = to;
    }
}

/// Creates `key`, running and owned by `instance`.
async fn create_owned(store: &Store, key: &SessionKey, instance: &str) -> Tenure {
    let mut commit = Commit::new(key.clone(), Fence::Absent, instance);
    commit.owner = OwnerChange::Acquire(instance.to_string());
    commit.state = state(r#"{"doc":1}"#, "running");
    let committed = commit_one(store, commit).await.expect("the session is created");
    assert_eq!((committed.version, committed.epoch), (1, 1));
    Tenure { key: key.clone(), instance: instance.to_string(), epoch: 1, n: 0, seq: 0 }
}

/// Creates `key`, idle and owned by nobody.
async fn create_idle(store: &Store, key: &SessionKey) {
    let mut commit = Commit::new(key.clone(), Fence::Absent, "api");
    commit.state = state(r#"{"doc":1}"#, "idle");
    commit_one(store, commit).await.expect("the session is created");
}

async fn seqs_after(store: &Store, key: &SessionKey, after: u64, limit: usize) -> Vec<u64> {
    let range = store.log.read_after(key, after, limit).await.expect("read_after works");
    range.events.iter().map(|event| event.seq).collect()
}

/// The next notice other than `Resubscribed`, which only says "re-read".
async fn next_notice(notices: &mut mpsc::Receiver<Notice>) -> Notice {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match timeout_at(deadline, notices.recv()).await {
            Ok(Some(Notice::Resubscribed)) => continue,
            Ok(Some(notice)) => return notice,
            Ok(None) => panic!("the notice channel closed"),
            Err(_) => panic!("no notice within 5 s"),
        }
    }
}

/// Polls `check` until it holds; the deadline only bounds a failing test.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within 5 s");
        sleep(Duration::from_millis(20)).await;
    }
}

mod annexes;
mod appends;
mod catalog;
mod cluster_only;
mod commits;
mod log;
mod notify;
mod quotas;
mod redis_only;
mod replicas;
