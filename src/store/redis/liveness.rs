//! Death hints: whether another instance's connection to Redis is gone,
//! seen within a fraction of a second instead of a lease TTL.
//!
//! A killed process's TCP connections close at once, and Redis frees a
//! closed client — with its subscriptions — in the same turn of its event
//! loop. So each instance subscribes to a channel of its own that nobody
//! publishes on, `{prefix}live:{<instance>}` (on a cluster a shard channel,
//! held on its slot's primary), and its subscriber count there says whether
//! the instance's connection lives. Each time the subscription task has
//! (re)subscribed every channel, this instance records in the hash
//! `{prefix}live` the node that holds it (its `run_id` from `INFO server`,
//! new at every start of the process: a cluster node's `CLUSTER MYID`
//! survives a restart, its subscriptions do not) and the subscription's
//! generation.
//!
//! Another instance's channel with no subscriber says "dead" only on the
//! node it recorded: after a Redis restart or a cluster failover every
//! subscription is gone at once, but the node is another, so nobody looks
//! dead until each instance has subscribed again and recorded the new node
//! (no stampede). What the count cannot see — a stopped or stuck process
//! (its connection is open), a host gone without a FIN — the lease still
//! bounds. Reading the hints is `ownership.rs`'s (twice, tens of ms apart,
//! before it takes anything over).
//!
//! With `store.liveness_check_ms = 0` an instance neither holds nor
//! records a liveness subscription (nobody can read it dead by a hint).
//! The hints are on by default on a Redis Cluster too (the kill and the
//! primary failover fault tests run with them).
//!
//! Before this instance reads or offers hints it checks that it can see
//! its own subscription from its command connection; a proxy that does not
//! pass subscriptions through, or a server that refuses `PUBSUB` or the
//! identity command, fails that check: the hints stay off, the record is
//! removed (nobody reads this instance as dead by a count it cannot vouch
//! for), and the log says why.

use std::{
    collections::HashMap,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use redis::{ErrorKind, RedisError, RedisResult, Value};
use tokio::sync::watch;

use super::{Keys, conn::Conn, map_err};
use crate::store::{Liveness, StoreError};

/// How often the self-test looks for this instance's own subscription
/// before it concludes it cannot be seen, and how far apart.
const SELF_TEST_TRIES: u32 = 10;
const SELF_TEST_PAUSE: Duration = Duration::from_millis(200);
/// Waits between tries when Redis does not answer at all.
const UNAVAILABLE_PAUSE: Duration = Duration::from_millis(500);

/// This instance's side of the hints.
#[derive(Default)]
pub(super) struct Hints {
    /// Set when the self-test passed: hints are read and offered.
    on: AtomicBool,
    /// This instance, once it listens.
    instance: OnceLock<String>,
}

impl Hints {
    pub(super) fn set_instance(&self, instance: &str) {
        let _ = self.instance.set(instance.to_string());
    }

    pub(super) fn instance(&self) -> Option<&str> {
        self.instance.get().map(String::as_str)
    }

    pub(super) fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }
}

/// Records this instance's liveness after each (re)subscription, and runs
/// the self-test; returns when the subscription task is gone.
pub(super) async fn record(conn: Conn, keys: Arc<Keys>, hints: Arc<Hints>, mut subscribed: watch::Receiver<u64>) {
    let Some(instance) = hints.instance().map(str::to_string) else { return };
    let channel = keys.live_channel(&instance);
    let mut off_reason_logged = false;
    while subscribed.changed().await.is_ok() {
        let generation = *subscribed.borrow_and_update();
        let mut tries = 0;
        let verdict = loop {
            if *subscribed.borrow() != generation {
                // Subscribed again meanwhile: record that one.
                break None;
            }
            match probe(&mut conn.clone(), std::slice::from_ref(&channel)).await {
                Ok(seen) => match seen.first() {
                    Some((count, node)) if *count > 0 && !node.is_empty() => {
                        let record = format!("{node} {generation}");
                        match hset(&conn, &keys, &instance, &record).await {
                            Ok(()) => break Some(Ok(())),
                            Err(_) => tokio::time::sleep(UNAVAILABLE_PAUSE).await,
                        }
                    }
                    _ => {
                        tries += 1;
                        if tries >= SELF_TEST_TRIES {
                            break Some(Err(
                                "this instance cannot see its own subscription from its command connection \
                                 (a proxy that does not pass subscriptions through?)"
                                    .to_string(),
                            ));
                        }
                        tokio::time::sleep(SELF_TEST_PAUSE).await;
                    }
                },
                Err(e) if refused(&e) => break Some(Err(format!("the store refuses the commands hints need: {e}"))),
                // Redis does not answer: the next subscription (or this
                // one, once it answers) is recorded.
                Err(_) => tokio::time::sleep(UNAVAILABLE_PAUSE).await,
            }
        };
        match verdict {
            Some(Ok(())) if !hints.on.swap(true, Ordering::Relaxed) => {
                tracing::info!("death hints on: a dead replica's sessions are taken over within a second");
            }
            None | Some(Ok(())) => {}
            Some(Err(reason)) => {
                hints.on.store(false, Ordering::Relaxed);
                let _ = redis::cmd("HDEL").arg(keys.live()).arg(&instance).query_async::<i64>(&mut conn.clone()).await;
                if !off_reason_logged {
                    tracing::warn!(%reason, "death hints off: a dead replica's sessions wait for its lease to lapse");
                    off_reason_logged = true;
                }
            }
        }
    }
}

/// The hints of the instances recorded in the hash (`only`: of these),
/// this instance left out.
pub(super) async fn read(
    conn: &Conn,
    keys: &Keys,
    hints: &Hints,
    only: Option<&[String]>,
) -> Result<Vec<Liveness>, StoreError> {
    if !hints.on() {
        return Ok(Vec::new());
    }
    let mut c = conn.clone();
    let records: HashMap<String, String> = match only {
        None => redis::cmd("HGETALL").arg(keys.live()).query_async(&mut c).await.map_err(map_err)?,
        Some([]) => return Ok(Vec::new()),
        Some(instances) => {
            let values: Vec<Option<String>> =
                redis::cmd("HMGET").arg(keys.live()).arg(instances).query_async(&mut c).await.map_err(map_err)?;
            instances.iter().cloned().zip(values).filter_map(|(i, v)| Some((i, v?))).collect()
        }
    };
    let mine = hints.instance();
    let records: Vec<(String, String)> = records.into_iter().filter(|(i, _)| Some(i.as_str()) != mine).collect();
    if records.is_empty() {
        return Ok(Vec::new());
    }
    let channels: Vec<String> = records.iter().map(|(i, _)| keys.live_channel(i)).collect();
    // Counts alone first (cheap); the node only where one is zero.
    let counts = numsub(&mut c, &channels).await.map_err(map_err)?;
    let zero: Vec<String> = channels.iter().zip(&counts).filter(|(_, n)| **n == 0).map(|(ch, _)| ch.clone()).collect();
    let nodes: HashMap<String, (u64, String)> = if zero.is_empty() {
        HashMap::new()
    } else {
        zero.iter().cloned().zip(probe(&mut c, &zero).await.map_err(map_err)?).collect()
    };
    Ok(records
        .into_iter()
        .zip(channels)
        .map(|((instance, record), channel)| {
            let recorded_node = record.split(' ').next().unwrap_or_default();
            let zero = nodes.get(&channel);
            let silent = zero.is_some_and(|(n, node)| *n == 0 && node == recorded_node);
            let moved = zero.is_some_and(|(n, node)| *n == 0 && node != recorded_node);
            Liveness { instance, record, silent, moved }
        })
        .collect())
}

/// For each channel, its subscriber count and then the `run_id` of the
/// node that answered (read after the count: a node replaced in between
/// shows as another node, never the reverse).
async fn probe(conn: &mut Conn, channels: &[String]) -> RedisResult<Vec<(u64, String)>> {
    if conn.is_cluster() {
        let mut seen = Vec::with_capacity(channels.len());
        for channel in channels {
            let mut count = redis::cmd("PUBSUB");
            count.arg("SHARDNUMSUB").arg(channel);
            let replies = conn.on_node_of(channel, vec![count, info_server()]).await?;
            let [counts, info] = replies.as_slice() else { return Err(unexpected("two replies")) };
            seen.push((counts_of(counts)?.first().copied().unwrap_or(0), run_id(info)?));
        }
        Ok(seen)
    } else {
        let mut count = redis::cmd("PUBSUB");
        count.arg("NUMSUB").arg(channels);
        let replies = conn.on_node_of("", vec![count, info_server()]).await?;
        let [counts, info] = replies.as_slice() else { return Err(unexpected("two replies")) };
        let node = run_id(info)?;
        Ok(counts_of(counts)?.into_iter().map(|n| (n, node.clone())).collect())
    }
}

fn info_server() -> redis::Cmd {
    let mut info = redis::cmd("INFO");
    info.arg("server").arg("replication");
    info
}

/// The node's `run_id`, new at every start of the process (a cluster
/// node's id, `CLUSTER MYID`, survives a restart in `nodes.conf`, and a
/// restarted node has lost every subscription); empty for a node that is
/// not a primary (a cluster client's stale view may route there: a demoted
/// node's count says nothing about where the instance subscribed since).
fn run_id(info: &Value) -> RedisResult<String> {
    let info: String = redis::from_redis_value_ref(info)?;
    let field = |name: &str| info.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let run_id = field("run_id:").ok_or_else(|| unexpected("INFO server without run_id"))?;
    Ok(if field("role:") == Some("master") { run_id.to_string() } else { String::new() })
}

/// Subscriber counts alone.
async fn numsub(conn: &mut Conn, channels: &[String]) -> RedisResult<Vec<u64>> {
    if conn.is_cluster() {
        let mut counts = Vec::with_capacity(channels.len());
        for channel in channels {
            let mut count = redis::cmd("PUBSUB");
            count.arg("SHARDNUMSUB").arg(channel);
            let replies = conn.on_node_of(channel, vec![count]).await?;
            counts.push(replies.first().map(counts_of).transpose()?.and_then(|c| c.first().copied()).unwrap_or(0));
        }
        Ok(counts)
    } else {
        let mut count = redis::cmd("PUBSUB");
        count.arg("NUMSUB").arg(channels);
        counts_of(&count.query_async(conn).await?)
    }
}

/// `[channel, count, channel, count, …]` → the counts (RESP2 and RESP3
/// alike: a flat array, or a map).
fn counts_of(reply: &Value) -> RedisResult<Vec<u64>> {
    let pairs: Vec<(String, u64)> = match reply {
        Value::Map(map) => map
            .iter()
            .map(|(k, v)| Ok((redis::from_redis_value_ref(k)?, redis::from_redis_value_ref(v)?)))
            .collect::<RedisResult<_>>()?,
        Value::Array(items) => items
            .chunks(2)
            .map(|pair| match pair {
                [k, v] => Ok((redis::from_redis_value_ref(k)?, redis::from_redis_value_ref(v)?)),
                _ => Err(unexpected("an odd NUMSUB reply")),
            })
            .collect::<RedisResult<_>>()?,
        _ => return Err(unexpected("a NUMSUB reply")),
    };
    Ok(pairs.into_iter().map(|(_, n)| n).collect())
}

async fn hset(conn: &Conn, keys: &Keys, instance: &str, record: &str) -> RedisResult<()> {
    redis::cmd("HSET").arg(keys.live()).arg(instance).arg(record).query_async::<i64>(&mut conn.clone()).await.map(drop)
}

/// The server answered with an error (an unknown or forbidden command),
/// as opposed to not answering.
fn refused(error: &RedisError) -> bool {
    matches!(error.kind(), ErrorKind::Server(_)) || error.kind() == ErrorKind::UnexpectedReturnType
}

fn unexpected(what: &'static str) -> RedisError {
    RedisError::from((ErrorKind::UnexpectedReturnType, "unexpected reply", what.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numsub_replies_in_both_protocols() {
        let flat = Value::Array(vec![
            Value::BulkString(b"a".to_vec()),
            Value::Int(1),
            Value::BulkString(b"b".to_vec()),
            Value::Int(0),
        ]);
        assert_eq!(counts_of(&flat).unwrap(), vec![1, 0]);
        let map = Value::Map(vec![(Value::BulkString(b"a".to_vec()), Value::Int(2))]);
        assert_eq!(counts_of(&map).unwrap(), vec![2]);
        assert!(counts_of(&Value::Int(3)).is_err());
    }
}
