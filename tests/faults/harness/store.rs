//! The store itself, opened by a test on a Redis (or cluster) of its own,
//! with a key prefix of its own.

use std::time::Duration;

use switchboard::{
    config::{RedisTarget, RedisTls, StoreConfig},
    store::{Notice, Store},
};
use tokio::sync::mpsc;

/// The store at `target` (death hints on), its key prefix, and the notices
/// its subscription hears.
pub fn open(target: RedisTarget, tls: RedisTls) -> (Store, String, mpsc::Receiver<Notice>) {
    let key_prefix = format!("sbfault:{}:", uuid::Uuid::new_v4().simple());
    let config = StoreConfig {
        redis: Some(target),
        tls,
        wait_replicas: 0,
        wait_replicas_timeout: Duration::from_millis(500),
        commit_linger: Duration::ZERO,
        append_tick: Duration::from_millis(1),
        key_prefix: key_prefix.clone(),
        session_ttl: Duration::from_secs(60),
        event_log_max_len: 100,
        lease_ttl: Duration::from_secs(10),
        liveness_check: Some(Duration::from_millis(100)),
        hold_notice: Duration::from_secs(5),
        hold_max: Duration::from_secs(60),
    };
    let (tx, rx) = mpsc::channel(switchboard::store::NOTICE_CHANNEL);
    (Store::open(&config, tx, Default::default()).expect("the store opens"), key_prefix, rx)
}
