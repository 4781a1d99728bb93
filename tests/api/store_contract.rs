//! The store contract: every behaviour the session layer relies on, proved
//! against both backends. `contract!(name)` turns the function `name(Backend)`
//! into the tests `name::memory` and `name::redis`. Each test opens its own
//! store with its own key prefix, so they run in parallel against one Redis.
//!
//! This file holds the harness and helpers; the behaviours are grouped in
//! `store_contract/` (state and leases, log, notifications, quotas), plus the
//! Redis-only tests (outages, reconnection, backoff) in `redis_only.rs`.

use std::time::Duration;

use switchboard::{
    config::StoreConfig,
    store::{AppendBatch, LeaseOp, Notice, SessionKey, Store, StoreError, Versioned, WriteOutcome},
};
use tokio::{
    sync::mpsc,
    time::{Instant, sleep, timeout_at},
};

use crate::helpers::{redis_url, unique_prefix};

#[derive(Clone, Copy)]
enum Backend {
    Memory,
    Redis,
}

struct Harness {
    store: Store,
    notices: mpsc::Receiver<Notice>,
}

impl Backend {
    fn open(self) -> Harness {
        self.open_with_max_len(1000)
    }

    fn open_with_max_len(self, event_log_max_len: u64) -> Harness {
        let redis_url = match self {
            Backend::Memory => None,
            Backend::Redis => Some(redis_url()),
        };
        open_store(redis_url, event_log_max_len)
    }
}

fn open_store(redis_url: Option<String>, event_log_max_len: u64) -> Harness {
    let config = StoreConfig {
        redis_url,
        key_prefix: unique_prefix(),
        session_ttl: Duration::from_secs(60),
        event_log_max_len,
        lease_ttl: Duration::from_secs(10),
    };
    let (tx, notices) = mpsc::channel(switchboard::store::NOTICE_CHANNEL);
    let store = Store::open(&config, tx, Default::default()).expect("the store opens");
    Harness { store, notices }
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
        }
    )*};
}

fn key(tenant: &str, id: &str) -> SessionKey {
    SessionKey::new(tenant, id)
}

fn acquire(replica: &str) -> LeaseOp {
    acquire_for(replica, Duration::from_secs(10))
}

fn acquire_for(replica: &str, ttl: Duration) -> LeaseOp {
    LeaseOp::Acquire { replica: replica.to_string(), ttl }
}

fn require(replica: &str) -> LeaseOp {
    LeaseOp::Require { replica: replica.to_string(), ttl: Duration::from_secs(10) }
}

fn release(replica: &str) -> LeaseOp {
    LeaseOp::Release { replica: replica.to_string() }
}

fn batch<'a>(key: &SessionKey, replica: &str, payloads: impl IntoIterator<Item = &'a str>) -> AppendBatch {
    AppendBatch {
        key: key.clone(),
        replica: replica.to_string(),
        payloads: payloads.into_iter().map(str::to_string).collect(),
    }
}

fn numbered(from: u64, to: u64) -> Vec<String> {
    (from..=to).map(|n| format!("{{\"n\":{n}}}")).collect()
}

/// Creates `key` with the lease held by `replica`.
async fn create_owned(store: &Store, key: &SessionKey, replica: &str) {
    assert_eq!(store.state.create(key, "{}", acquire(replica)).await, Ok(WriteOutcome::Written(1)));
}

async fn append_numbered(store: &Store, key: &SessionKey, from: u64, to: u64) {
    let payloads = numbered(from, to);
    let results = store.log.append(&[batch(key, "a", payloads.iter().map(String::as_str))]).await;
    assert_eq!(results, vec![Ok((from, to))]);
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

mod log;
mod notify;
mod quotas;
mod redis_only;
mod state;
