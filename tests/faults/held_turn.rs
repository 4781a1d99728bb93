//! A turn whose writes the store holds tells its streams so — a notice
//! without an id every `store.hold_notice_secs` — and after
//! `store.hold_max_secs` stops and fails them visibly (`store_held`); once
//! the store takes writes again the turn goes on from its last commit and
//! a client that rejoins with `Last-Event-ID` gets the whole answer.
//!
//! Two ways a store holds writes: one Redis frozen (SIGSTOP), and a Redis
//! Cluster with `wait_replicas = 1` whose killed primary's replica was
//! promoted with no replica of its own (every commit of the round waits
//! for an acknowledgement that cannot come) until the old primary returns
//! as its replica.

use std::time::Duration;

use futures::{StreamExt, stream::FuturesUnordered};

use crate::harness::{
    checks::{self, Expect},
    cluster::{Cluster, ClusterOptions, ClusterShape},
    transcript::Transcript,
};

const WORDS: u32 = 60;
/// Turns of the failover test.
const SESSIONS: usize = 24;
const TURN_TIMEOUT: Duration = Duration::from_secs(60);
/// Notices every second; the turn stops after four.
const HOLD: &str = "hold_notice_secs = 1\nhold_max_secs = 4";
const HELD: &str = "switchboard_held_turn_notices_total{outcome=\"held\"}";
const GAVE_UP: &str = "switchboard_held_turn_notices_total{outcome=\"gave_up\"}";

fn words() -> String {
    format!("run:{} words:{WORDS}", uuid::Uuid::new_v4().simple())
}

/// The notices a client saw (frames without an id) and whether its stream
/// ended with the `store_held` failure.
fn notices(t: &Transcript) -> (usize, bool) {
    let held = t.events.iter().filter(|e| e.seq.is_none() && e.kind == "held").count();
    let failed = t.events.iter().any(|e| e.seq.is_none() && e.kind == "store_held");
    (held, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_held_by_a_frozen_redis_says_so_fails_visibly_and_goes_on_after() {
    let cluster = Cluster::start(ClusterOptions {
        replicas: 2,
        lease_ttl_secs: 10,
        chunk_delay: Duration::from_millis(40),
        store_toml: HOLD.to_string(),
        ..ClusterOptions::default()
    })
    .await;
    let session = cluster.create_session(0).await;
    let cursor = cluster.last_seq(&session).await;
    let follower = cluster.start_and_follow(0, &session, &words(), TURN_TIMEOUT).await;
    assert!(follower.wait_for_events(6, TURN_TIMEOUT).await, "the turn streams\n{}", cluster.dump_logs());

    cluster.redis_ref().freeze();
    let failed = follower.wait_until(Duration::from_secs(20), |t| notices(t).1).await;
    cluster.redis_ref().thaw();
    let transcript = follower.finish().await;

    let mut failures = checks::turn(&transcript, &Expect { cursor, words: WORDS });
    let (held, _) = notices(&transcript);
    if !failed {
        failures.push("the stream did not fail with store_held while Redis was frozen".into());
    }
    if held == 0 {
        failures.push("no held notice reached the client before the failure".into());
    }
    if cluster.metric(0, HELD).await < 1.0 || cluster.metric(0, GAVE_UP).await < 1.0 {
        failures.push(format!("the owner did not count the hold ({HELD}, {GAVE_UP})"));
    }
    eprintln!("held turn, frozen Redis: {held} notice(s), then store_held; {}", transcript.describe_connections());
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), cluster.dump_logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_held_by_wait_replicas_after_a_failover_says_so_and_goes_on_once_a_replica_returns() {
    let cluster = Cluster::start(ClusterOptions {
        replicas: 2,
        lease_ttl_secs: 10,
        chunk_delay: Duration::from_millis(50),
        store_toml: HOLD.to_string(),
        redis_cluster: Some(ClusterShape { primaries: 3, replicas_per_primary: 1, wait_replicas: 1 }),
        ..ClusterOptions::default()
    })
    .await;
    let mut followers = Vec::new();
    // Enough sessions that some live in the killed primary's slots (a
    // third of them, at random).
    for i in 0..SESSIONS {
        let session = cluster.create_session(i % 2).await;
        let cursor = cluster.last_seq(&session).await;
        followers.push((cursor, cluster.start_and_follow(i % 2, &session, &words(), TURN_TIMEOUT).await));
    }
    assert!(cluster.upstream.wait_for_calls(SESSIONS, Duration::from_secs(20)).await, "{}", cluster.dump_logs());
    let redis = cluster.redis_cluster.as_ref().expect("a cluster");
    let victim = redis.first_primaries()[0];
    redis.kill_node(victim);
    assert!(redis.wait_failed_over(victim, Duration::from_secs(20)).await, "no failover\n{}", cluster.dump_logs());
    // The promoted replica has none of its own: writes of its slots (and
    // of the rounds they share) are held until one is back.
    let mut waits: FuturesUnordered<_> =
        followers.iter().map(|(_, f)| f.wait_until(Duration::from_secs(20), |t| notices(t).1)).collect();
    let mut failed_any = false;
    while let Some(failed) = waits.next().await {
        if failed {
            failed_any = true;
            break;
        }
    }
    drop(waits);
    redis.restart_node(victim).await;
    assert!(redis.wait_replica_synced(victim, Duration::from_secs(20)).await, "no resync\n{}", cluster.dump_logs());

    let mut failures = Vec::new();
    let (mut held, mut failed) = (0, 0);
    for (cursor, follower) in followers {
        let transcript = follower.finish().await;
        failures.extend(checks::turn(&transcript, &Expect { cursor, words: WORDS }));
        let (h, f) = notices(&transcript);
        held += h;
        failed += usize::from(f);
    }
    if !failed_any || held == 0 {
        failures.push(format!("no held turn told its client: {held} notice(s), {failed} store_held failure(s)"));
    }
    eprintln!(
        "held turns after a failover with wait_replicas = 1: {held} notice(s), {failed} stream(s) failed store_held"
    );
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), cluster.dump_logs());
}
